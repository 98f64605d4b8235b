"""What a training stage holds out and how long its examples may be: the validation split, its evaluation during
training, and the token limit (`cutoff_len`).

- Validation split (`hyperparameters.val_size`, LLaMA-Factory's): a share in (0, 1) or a number of records >= 1,
  drawn (seeded) by response pair, so that a pair's aspects are all on one side and the validation set holds pairs
  the stage never trained on; LLaMA-Factory draws single records, which lets a pair's other aspects train.
- Evaluation, every `eval_steps` and at the end: the validation loss (the trainer's `eval_loss`; SFT only, GRPO
  has no such loss) and the verdict accuracy, the share of validation records whose greedy first answer token
  starts with the label's first character: SageLM's evaluation reads a verdict by the first character of the
  answer, and greedy decoding's first token is the most probable one after the prompt, so this is the accuracy of
  the judge as it will be asked. With several GPUs each evaluates its share of the records and the counts are
  summed.
- Token limit (`hyperparameters.cutoff_len`, SageLM 4096): prompt (text and both responses' audio tokens) plus
  answer. LLaMA-Factory's `infer_seqlen` cuts the prompt first when the answer is short, which for an audio prompt
  would cut audio tokens; here the prompt is kept whole and the answer is cut to fit (LLaMA-Factory's rule when
  the prompt is short), and a record whose prompt alone reaches the limit is left out. Both are counted. The
  prompt lengths are measured once per record and shared (`training.lengths`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from lalm_judge.training.records import TrainingRecord
from lalm_judge.training.settings import TrainingError


def split_validation(
    records: Sequence[TrainingRecord], val_size: float, seed: int
) -> tuple[list[TrainingRecord], list[TrainingRecord]]:
    """(training, validation) records: whole response pairs drawn until the validation set holds `val_size` records
    (a share below 1, else a count); both keep source order."""
    if not val_size:
        return list(records), []
    wanted = math.ceil(val_size * len(records)) if val_size < 1 else int(val_size)
    pairs = list(dict.fromkeys(record.audios for record in records))
    if wanted >= len(records) or len(pairs) < 2:
        raise TrainingError(
            f"val_size {val_size:g} would hold out {wanted} of {len(records)} records in {len(pairs)} response pairs; "
            "leave at least one pair to train on"
        )
    order = np.random.default_rng(seed).permutation(len(pairs))
    held: set[tuple[str, ...]] = set()
    count = 0
    for index in order:
        if count >= wanted:
            break
        held.add(pairs[index])
        count += sum(record.audios == pairs[index] for record in records)
    if len(held) == len(pairs):
        held.discard(pairs[order[-1]])
    return [r for r in records if r.audios not in held], [r for r in records if r.audios in held]


@dataclass
class CutoffReport:
    """What the token limit did to a stage's records (never silent)."""

    cutoff_len: int | None
    n_dropped: int = 0
    dropped: list[str] = field(default_factory=list)  # the first sources left out
    n_answers_cut: int = 0


def apply_cutoff(
    records: Sequence[TrainingRecord], prompt_lengths: Sequence[int], cutoff_len: int | None
) -> tuple[list[TrainingRecord], CutoffReport]:
    """The records whose prompt fits under `cutoff_len` (all without a limit), with the report of those left out."""
    report = CutoffReport(cutoff_len)
    if cutoff_len is None:
        return list(records), report
    kept = []
    for record, length in zip(records, prompt_lengths, strict=True):
        if length >= cutoff_len:
            report.n_dropped += 1
            if len(report.dropped) < 10:
                report.dropped.append(f"{record.source} ({length} prompt tokens)")
        else:
            kept.append(record)
    if not kept:
        raise TrainingError(
            f"cutoff_len {cutoff_len}: every record's prompt is longer ({min(prompt_lengths)} tokens or more); raise "
            "cutoff_len or shorten max_response_s"
        )
    return kept, report


def verdict_accuracy(model: Any, collator: Any, records: Sequence[TrainingRecord], batch_size: int) -> float:
    """Share of `records` whose greedy first answer token starts with the label's first character. Under several
    processes (torch.distributed) each evaluates its share of the records (every world-th from its rank) and the
    counts are summed, so every GPU does 1/N of the work and all get the same accuracy."""
    rank, world = _distributed()
    right = _right_verdicts(model, collator, records[rank::world], batch_size)
    if world > 1:
        import torch.distributed as dist

        counts = torch.tensor([right, len(records[rank::world])], dtype=torch.float64, device=model.device)
        dist.all_reduce(counts)
        right = int(counts[0].item())
    return right / len(records)


def _distributed() -> tuple[int, int]:
    """(rank, processes) of torch.distributed's group, (0, 1) when there is none."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _right_verdicts(model: Any, collator: Any, records: Sequence[TrainingRecord], batch_size: int) -> int:
    """How many of `records` the model's greedy first answer token gets right (`verdict_accuracy`)."""
    right = 0
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(records), batch_size):
            batch = records[start : start + batch_size]
            inputs = collator.prompt_inputs([record.as_row() for record in batch]).to(model.device)
            with torch.no_grad():
                logits = model(**inputs).logits
            mask = inputs["attention_mask"]
            last = mask.shape[1] - 1 - mask.flip(1).argmax(dim=1)
            tokens = logits[torch.arange(len(batch)), last].argmax(dim=-1).tolist()
            for record, token in zip(batch, tokens, strict=True):
                text = collator.tokenizer.decode([token], skip_special_tokens=True).lstrip()
                right += text[:1] == record.label[:1]
    finally:
        model.train(was_training)
    return right


class ValidationCallback:
    """Evaluates the verdict accuracy of the validation records whenever the trainer evaluates (SFT: beside its
    validation loss), or every `eval_steps` steps when the trainer has no validation loss of its own (GRPO); a
    TrainerCallback, made when transformers is loaded."""

    @staticmethod
    def make(collator: Any, records: Sequence[TrainingRecord], batch_size: int, eval_steps: int | None = None) -> Any:
        from transformers import TrainerCallback

        class Validation(TrainerCallback):
            def __init__(self) -> None:
                self.evaluations: list[dict[str, float | None]] = []

            def evaluate(self, model: Any, step: int, loss: float | None) -> None:
                accuracy = verdict_accuracy(model, collator, records, batch_size)
                self.evaluations.append({"step": step, "loss": loss, "verdict_accuracy": accuracy})

            def on_evaluate(self, args, state, control, model=None, metrics=None, **kwargs):
                self.evaluate(model, int(state.global_step), float((metrics or {}).get("eval_loss", float("nan"))))

            def on_step_end(self, args, state, control, model=None, **kwargs):
                if eval_steps and state.global_step % eval_steps == 0:
                    self.evaluate(model, int(state.global_step), None)

        return Validation()
