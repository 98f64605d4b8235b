"""Batches for supervised fine-tuning: the judge's own prompt, then the answer, with the loss on the answer only.

An example's prompt is rendered exactly as the `transformers` judge backend renders a pairwise request at
judging time: the record becomes a `JudgeRequest` whose user text has an `AUDIO_SLOT` where each `<audio>`
placeholder stood and whose audio items are the responses in order, `build_conversation` turns it into the
system turn and a user turn of text and audio parts, the model's own chat template renders it with the
generation prompt, and the processor expands each audio part into that clip's audio tokens. With the `sagelm`
pairwise prompt the judge stage builds the same request from an item (tests/training/test_collator.py).

The target is the record's output (label line, then rationale) followed by what the chat template writes
after an assistant turn (Qwen: `<|im_end|>` and a newline), so the model learns to stop. Labels are -100 on
the prompt and on padding: only the answer is learnt.

The audio of each response is read at the processor's sampling rate and cut to the stage limit
(`records.audio_cut` counts the cut clips for the report).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from lalm_judge.audio.waveform import read_audio
from lalm_judge.judging.backends.base import AUDIO_SLOT, JudgeRequest
from lalm_judge.judging.backends.chat import build_conversation
from lalm_judge.pairwise.sagelm import RECORD_AUDIO
from lalm_judge.training.settings import TrainingError


def answer_length(prompt_len: int, answer_len: int, cutoff_len: int | None) -> int:
    """How much of the answer fits beside a whole prompt under the limit (`training.validation`)."""
    return answer_len if cutoff_len is None else max(0, min(answer_len, cutoff_len - prompt_len))


IGNORE_INDEX = -100


def judge_request(row: Mapping[str, Any], system: str, audios: Sequence[np.ndarray], sample_rate: int) -> JudgeRequest:
    """The request a pairwise judge gets for a training row: its audio at the record's `<audio>` places."""
    return JudgeRequest(
        request_id=row["source"],
        system=system,
        user=row["user"].replace(RECORD_AUDIO, AUDIO_SLOT),
        audios=tuple((audio, sample_rate) for audio in audios),
    )


def response_limit_s(processor: Any, max_response_s: float) -> float:
    """Seconds of each response that are used: `max_response_s`, or the processor's audio window where that is
    shorter (Whisper feature extractors keep `n_samples`, 30 s for Qwen2-Audio, and would cut the rest unsaid)."""
    extractor = getattr(processor, "feature_extractor", None)
    n_samples, rate = getattr(extractor, "n_samples", None), getattr(extractor, "sampling_rate", None)
    return min(max_response_s, n_samples / rate) if n_samples and rate else max_response_s


class PairwiseSFTCollator:
    """Turns dataset rows (`TrainingRecord.as_row`) into model inputs with `labels`."""

    def __init__(self, processor: Any, system_prompt: str, max_response_s: float, cutoff_len: int | None = None):
        self.processor = processor
        # Longest example in tokens (`answer_length`); the records whose answer was cut to fit.
        self.cutoff_len = cutoff_len
        self.answers_cut: set[str] = set()
        self.tokenizer = processor.tokenizer
        self.system_prompt = system_prompt
        extractor = getattr(processor, "feature_extractor", None)
        if extractor is None:
            raise TrainingError(
                f"{type(processor).__name__} has no audio feature extractor: the backbone is no audio LLM"
            )
        self.sampling_rate = int(extractor.sampling_rate)
        self.max_response_s = response_limit_s(processor, max_response_s)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            raise TrainingError(f"the tokenizer of {type(processor).__name__} has no pad token")

    def prompt_text(self, request: JudgeRequest) -> str:
        return self.processor.apply_chat_template(
            build_conversation(request), add_generation_prompt=True, tokenize=False
        )

    def target_text(self, request: JudgeRequest, output: str) -> str:
        """The answer as the chat template writes an assistant turn: the output and the end-of-turn text."""
        messages = [*build_conversation(request), {"role": "assistant", "content": output}]
        full = self.processor.apply_chat_template(messages, tokenize=False)
        prompt = self.prompt_text(request)
        if not full.startswith(prompt) or not full[len(prompt) :].startswith(output):
            raise TrainingError(
                f"the chat template of {type(self.processor).__name__} does not write an assistant turn as the "
                "generation prompt followed by the answer; the answer cannot be separated from the prompt"
            )
        return full[len(prompt) :]

    def request(self, row: Mapping[str, Any]) -> JudgeRequest:
        audios = [self.load_audio(path) for path in row["audios"]]
        return judge_request(row, self.system_prompt, audios, self.sampling_rate)

    def load_audio(self, path: str) -> np.ndarray:
        waveform, _ = read_audio(path, self.sampling_rate)
        return waveform[: int(round(self.max_response_s * self.sampling_rate))]

    def _encode_prompts(self, requests: Sequence[JudgeRequest]) -> Any:
        return self.processor(
            text=[self.prompt_text(request) for request in requests],
            audio=[audio for request in requests for audio, _ in request.audio_items],
            sampling_rate=self.sampling_rate,
            padding=True,
            return_tensors="pt",
        )

    def prompt_inputs(self, rows: Sequence[Mapping[str, Any]]) -> Any:
        """The model inputs of the rows' prompts alone (the judge's request up to its generation prompt)."""
        return self._encode_prompts([self.request(row) for row in rows])

    def prompt_length(self, row: Mapping[str, Any]) -> int:
        """Tokens of one row's prompt, audio tokens included."""
        return int(self.prompt_inputs([row])["attention_mask"].sum())

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        requests = [self.request(row) for row in rows]
        encoded = self._encode_prompts(requests)
        sequences, label_rows = [], []
        for row_index, (row, request) in enumerate(zip(rows, requests, strict=True)):
            mask = encoded["attention_mask"][row_index].bool()
            prompt_ids = encoded["input_ids"][row_index][mask].tolist()
            target_ids = self.tokenizer(self.target_text(request, row["output"]), add_special_tokens=False)["input_ids"]
            if self.cutoff_len is not None and len(prompt_ids) >= self.cutoff_len:
                raise TrainingError(
                    f"{row['source']}: its prompt has {len(prompt_ids)} tokens, not under cutoff_len {self.cutoff_len}"
                )
            kept = answer_length(len(prompt_ids), len(target_ids), self.cutoff_len)
            if kept < len(target_ids):
                self.answers_cut.add(row["source"])
            target_ids = target_ids[:kept]
            sequences.append(prompt_ids + target_ids)
            label_rows.append([IGNORE_INDEX] * len(prompt_ids) + target_ids)
        width = max(len(sequence) for sequence in sequences)
        # Right padding: every row starts at position 0, as the prompt does at judging time.
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for index, (sequence, label_row) in enumerate(zip(sequences, label_rows, strict=True)):
            input_ids[index, : len(sequence)] = torch.tensor(sequence)
            labels[index, : len(label_row)] = torch.tensor(label_row)
            attention_mask[index, : len(sequence)] = 1
        batch = {key: value for key, value in encoded.items() if key not in ("input_ids", "attention_mask")}
        # The processor's own count of audio tokens is no model input.
        batch.pop("num_audio_tokens", None)
        return {**batch, "input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
