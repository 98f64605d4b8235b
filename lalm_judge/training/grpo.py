"""GRPO training of a pairwise judge (`lalm-judge pairwise train --method grpo`): the SageLM study's reinforcement
learning arm, against which it compared rationale SFT.

SageLM's preliminary comparison trained the judge with GRPO and a rule-based reward of accuracy plus format; its
code for it is not released, so the reward is written here from that description (`judge_reward`):
- accuracy: 1 when the verdict read from the completion (SageLM's first-character rule, `pairwise.parsing`) is the
  record's label, else 0;
- format: 1 when the completion is the answer format SageLM's records teach: the verdict alone on its first line
  (exactly 1, 2 or Tie), then a non-empty rationale; else 0.
The reward is `reward_weights.accuracy` x accuracy + `reward_weights.format` x format (both 1 by default).

The trainer is TRL's `GRPOTrainer` (trl 1.16), whose multimodal support covers images only: `AudioGRPOTrainer`
renders each record as the `transformers` judge backend renders the pairwise request (the SFT collator's prompt:
the judge's system turn, the instruction with each response's audio at its place) and gives the model the audio
features when it generates and when the completions' log-probabilities are computed (a forward pre-hook adds them
to the model call, row by row). Prompts pass through TRL as JSON of the record's row. Supported as TRL runs it
here: the policy's own generation (no vLLM server), `beta` 0 or more (the reference model gets the audio too), one
optimisation pass per generation batch (`num_iterations` 1).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from lalm_judge.core.vocabulary import VERDICTS
from lalm_judge.pairwise.parsing import parse_verdict
from lalm_judge.training.records import TrainingRecord

AUDIO_PREFIX = "audio_"


def accuracy_reward(completion: str, label: str) -> float:
    return float(parse_verdict(completion).label == label)


def format_reward(completion: str) -> float:
    verdict, newline, rationale = completion.partition("\n")
    return float(verdict.strip() in VERDICTS and bool(newline) and bool(rationale.strip()))


def judge_reward(completions: Sequence[str], labels: Sequence[str], weights: Mapping[str, float]) -> list[float]:
    """SageLM's rule-based reward of each completion: weighted accuracy plus format (module docstring)."""
    return [
        weights["accuracy"] * accuracy_reward(completion, label) + weights["format"] * format_reward(completion)
        for completion, label in zip(completions, labels, strict=True)
    ]


def accuracy(prompts: Sequence[str], completions: Sequence[str], label: Sequence[str], **_: Any) -> list[float]:
    """TRL reward function: the accuracy part of the reward (weighted by GRPOConfig.reward_weights)."""
    return [accuracy_reward(completion, gold) for completion, gold in zip(completions, label, strict=True)]


def answer_format(prompts: Sequence[str], completions: Sequence[str], **_: Any) -> list[float]:
    """TRL reward function: the format part of the reward."""
    return [format_reward(completion) for completion in completions]


# In the order of `GRPOSettings.reward_weights` (accuracy, format); TRL logs each under its function's name.
REWARD_FUNCTIONS = (accuracy, answer_format)


def grpo_rows(records: Sequence[TrainingRecord]) -> list[dict[str, str]]:
    """The trainer's dataset: each record's row as the prompt (JSON) and its label for the reward."""
    return [{"prompt": json.dumps(record.as_row(), ensure_ascii=False), "label": record.label} for record in records]


@contextlib.contextmanager
def audio_inputs(model: Any, fields: Mapping[str, torch.Tensor]) -> Iterator[None]:
    """Every call of `model` inside adds `fields` (the audio features of its rows) to its keyword arguments."""

    def add(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return args, {**kwargs, **fields}

    handle = model.register_forward_pre_hook(add, with_kwargs=True, prepend=True)
    try:
        yield
    finally:
        handle.remove()


def make_trainer_class() -> type:
    """`AudioGRPOTrainer`, made when TRL is loaded (its import takes seconds)."""
    from trl import GRPOTrainer

    class AudioGRPOTrainer(GRPOTrainer):
        """GRPO on pairwise records with two audio responses each (module docstring)."""

        def __init__(self, *, model: Any, collator: Any, **kwargs: Any):
            self.judge_collator = collator
            self._audio_rows: dict[str, torch.Tensor] = {}
            # TRL keeps a processor-based model from sampling its image placeholder (whose features would not
            # match); for an audio model that is the audio placeholder. The attribute is set only for that.
            config = model.config
            audio_token = getattr(config, "audio_token_id", None) or getattr(config, "audio_token_index", None)
            config.image_token_id = audio_token
            try:
                super().__init__(model=model, **kwargs)
            finally:
                del config.image_token_id

        def _tokenize_prompts(self, prompts: list) -> tuple[list[list[int]], None, dict[str, torch.Tensor]]:
            rows = [json.loads(prompt) for prompt in prompts]
            encoded = self.judge_collator.prompt_inputs(rows).to(self.accelerator.device)
            mask = encoded["attention_mask"].bool()
            prompt_ids = [ids[row_mask].tolist() for ids, row_mask in zip(encoded["input_ids"], mask, strict=True)]
            fields = {k: v for k, v in encoded.items() if k not in ("input_ids", "attention_mask", "num_audio_tokens")}
            per_row = len(json.loads(prompts[0])["audios"])
            self._audio_rows = {k: v.reshape(len(rows), per_row, *v.shape[1:]) for k, v in fields.items()}
            return prompt_ids, None, fields

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            output = super()._generate_and_score_completions(inputs)
            output.update({AUDIO_PREFIX + key: value for key, value in self._audio_rows.items()})
            return output

        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
            self._audio_rows = {k[len(AUDIO_PREFIX) :]: v for k, v in inputs.items() if k.startswith(AUDIO_PREFIX)}
            return super()._compute_loss(model, inputs)

        def _get_per_token_logps_and_entropies(
            self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, **kwargs
        ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
            step = kwargs.pop("batch_size", None) or input_ids.size(0)
            target = self.accelerator.unwrap_model(model)
            parts = []
            for start in range(0, input_ids.size(0), step):
                end = min(start + step, input_ids.size(0))
                fields = {key: value[start:end].flatten(0, 1) for key, value in self._audio_rows.items()}
                with audio_inputs(target, fields):
                    parts.append(
                        super()._get_per_token_logps_and_entropies(
                            model,
                            input_ids[start:end],
                            attention_mask[start:end],
                            logits_to_keep,
                            batch_size=end - start,
                            **kwargs,
                        )
                    )
            logps = torch.cat([part[0] for part in parts])
            entropies = None if parts[0][1] is None else torch.cat([part[1] for part in parts])
            aux = None if parts[0][2] is None else torch.stack([part[2] for part in parts]).mean()
            return logps, entropies, aux

    return AudioGRPOTrainer
