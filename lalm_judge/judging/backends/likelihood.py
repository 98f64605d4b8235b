"""The `likelihood` judge backend: a text LLM that compares two responses by scoring them, not by writing a verdict.

For a pairwise text request (its `transcript` holds the instruction and the two responses as shown, speakers
`base.PAIRWISE_TRANSCRIPT`), each response r to the instruction q is scored by its pointwise mutual information
with the question under the model,

    PMI(r; q) = log P(r | "Question: q\\nAnswer:") - log P(r | "Answer:")        (nats, summed over r's tokens),

how much more probable the question makes the response than it is on its own: a response that answers the
question gains from it, a fluent but off-topic one does not. The response with the higher PMI is the better one;
within `options.tie_margin` (default TIE_MARGIN nats) of each other they tie. The answer is the verdict on the
first line and a sentence with both scores, so the common verdict parser applies. It is order-free (the swapped
order gives the same verdict), hears no audio and reads no aspect: a weak but real LLM judge for CPU machines
(SmolLM2-135M in the offline demo), not a model of what SageLM judges. It serves the pairwise track's text cells
only.

Options: `device`, `num_threads`, `gguf_file` and the `bundled:` models as for the `transformers` backend (the model
loads through its loader, `hf.load_model`), `tie_margin`.
"""

from __future__ import annotations

import time

import torch

from lalm_judge.judging.backends.base import PAIRWISE_TRANSCRIPT, JudgeOutput, JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.hf import load_model, resolve_device, served_checkpoint

TIE_MARGIN = 0.5
# Sequences per forward pass.
BATCH = 16
QUESTION_PREFIX = "Question: {query}\nAnswer:"
ANSWER_PREFIX = "Answer:"


def likelihood_answer(scores: tuple[float, float], margin: float = TIE_MARGIN) -> str:
    """The verdict line and what it rests on."""
    first, second = scores
    shown = f"PMI {first:.2f} against {second:.2f} nats"
    if abs(first - second) < margin:
        return f"Tie\nThe question makes Response 1 and Response 2 about equally more probable ({shown})."
    better, worse = (1, 2) if first > second else (2, 1)
    return f"{better}\nThe question makes Response {better} more probable than Response {worse} ({shown})."


class LikelihoodBackend:
    """Loads the text model once; `generate` scores each request's two responses."""

    def __init__(self, spec: JudgeSpec):
        self.spec = spec
        if spec.options.get("num_threads"):
            torch.set_num_threads(int(spec.options["num_threads"]))
        loaded = load_model(spec, resolve_device(spec.options.get("device", "auto")))
        self.model, self.tokenizer, self.model_revision = loaded.model, loaded.processor, loaded.revision
        self.served = served_checkpoint(spec, loaded)
        self.margin = float(spec.options.get("tie_margin", TIE_MARGIN))
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self._memo: dict[tuple[str, str], tuple[float, int]] = {}

    def describe(self) -> dict[str, str]:
        return {"model": self.spec.model, "model_revision": self.model_revision}

    def log_probability(self, prefix: str, text: str) -> tuple[float, int]:
        """(log P(text | prefix) in nats, number of tokens of prefix and text)."""
        return self.log_probabilities([(prefix, text)])[0]

    def log_probabilities(self, pairs: list[tuple[str, str]]) -> list[tuple[float, int]]:
        """`log_probability` of many (prefix, text) pairs: each distinct one computed once (and kept for the rest of
        the job: both orders of a request and every prompt of the pair share them), in right-padded batches."""
        todo = [pair for pair in dict.fromkeys(pairs) if pair not in self._memo]
        for start in range(0, len(todo), BATCH):
            self._memo.update(zip(todo[start : start + BATCH], self._score_batch(todo[start : start + BATCH])))
        return [self._memo[pair] for pair in pairs]

    def _score_batch(self, pairs: list[tuple[str, str]]) -> list[tuple[float, int]]:
        encoded = [
            (
                self.tokenizer(prefix, add_special_tokens=False)["input_ids"],
                self.tokenizer(text, add_special_tokens=False)["input_ids"],
            )
            for prefix, text in pairs
        ]
        width = max(len(prefix) + len(text) for prefix, text in encoded)
        ids = torch.full((len(encoded), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, (prefix, text) in enumerate(encoded):
            ids[row, : len(prefix) + len(text)] = torch.tensor(prefix + text)
            mask[row, : len(prefix) + len(text)] = 1
        with torch.inference_mode():
            logits = self.model(input_ids=ids.to(self.model.device), attention_mask=mask.to(self.model.device)).logits
        logprobs = torch.log_softmax(logits.float(), dim=-1).cpu()
        scores = []
        for row, (prefix, text) in enumerate(encoded):
            positions = torch.arange(len(prefix) - 1, len(prefix) + len(text) - 1)
            scores.append((float(logprobs[row, positions, torch.tensor(text)].sum()), len(prefix) + len(text)))
        return scores

    def pmi(self, query: str, response: str) -> tuple[float, int]:
        return self.pmis([(query, response)])[0]

    def pmis(self, pairs: list[tuple[str, str]]) -> list[tuple[float, int]]:
        """(PMI, tokens scored) of each (query, response)."""
        conditional = self.log_probabilities([(QUESTION_PREFIX.format(query=q), f" {r}") for q, r in pairs])
        alone = self.log_probabilities([(ANSWER_PREFIX, f" {r}") for _, r in pairs])
        return [(c - a, n_c + n_a) for (c, n_c), (a, n_a) in zip(conditional, alone, strict=True)]

    def generate(self, requests: list[JudgeRequest]) -> list[JudgeOutput]:
        started = time.perf_counter()
        for request in requests:
            if tuple(speaker for speaker, _ in request.transcript) != PAIRWISE_TRANSCRIPT:
                raise ValueError(
                    f"likelihood judge {self.spec.name!r}: request {request.request_id} is no pairwise text request "
                    "(it compares the instruction's two responses; use it for the pairwise track's text cells)"
                )
        texts = [tuple(text for _, text in request.transcript) for request in requests]
        scores = self.pmis([(query, response) for query, *responses in texts for response in responses])
        latency = (time.perf_counter() - started) / max(1, len(requests))
        outputs = []
        for index in range(len(requests)):
            (score1, tokens1), (score2, tokens2) = scores[2 * index], scores[2 * index + 1]
            outputs.append(
                JudgeOutput(
                    text=likelihood_answer((score1, score2), self.margin),
                    latency_s=latency,
                    n_input_tokens=tokens1 + tokens2,
                    n_output_tokens=0,
                    finish_reason="stop",  # the verdict is complete: nothing is generated that a limit could cut
                    extra={"pmi": [round(score1, 4), round(score2, 4)], **self.served},
                )
            )
        return outputs
