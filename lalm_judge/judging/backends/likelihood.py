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
from lalm_judge.judging.backends.hf import load_model, resolve_device

TIE_MARGIN = 0.5
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
        self.margin = float(spec.options.get("tie_margin", TIE_MARGIN))

    def describe(self) -> dict[str, str]:
        return {"model": self.spec.model, "model_revision": self.model_revision}

    def log_probability(self, prefix: str, text: str) -> tuple[float, int]:
        """(log P(text | prefix) in nats, number of text tokens)."""
        prefix_ids = self.tokenizer(prefix, add_special_tokens=False)["input_ids"]
        text_ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prefix_ids + text_ids], device=self.model.device)
        with torch.inference_mode():
            logprobs = torch.log_softmax(self.model(ids).logits[0].float(), dim=-1)
        positions = torch.arange(len(prefix_ids) - 1, len(prefix_ids) + len(text_ids) - 1)
        return float(logprobs[positions, torch.tensor(text_ids)].sum()), len(prefix_ids) + len(text_ids)

    def pmi(self, query: str, response: str) -> tuple[float, int]:
        conditional, n_with = self.log_probability(QUESTION_PREFIX.format(query=query), f" {response}")
        alone, n_alone = self.log_probability(ANSWER_PREFIX, f" {response}")
        return conditional - alone, n_with + n_alone

    def generate(self, requests: list[JudgeRequest]) -> list[JudgeOutput]:
        outputs = []
        for request in requests:
            started = time.perf_counter()
            speakers = tuple(speaker for speaker, _ in request.transcript)
            if speakers != PAIRWISE_TRANSCRIPT:
                raise ValueError(
                    f"likelihood judge {self.spec.name!r}: request {request.request_id} is no pairwise text request "
                    "(it compares the instruction's two responses; use it for the pairwise track's text cells)"
                )
            query, first, second = (text for _, text in request.transcript)
            (score1, tokens1), (score2, tokens2) = self.pmi(query, first), self.pmi(query, second)
            outputs.append(
                JudgeOutput(
                    text=likelihood_answer((score1, score2), self.margin),
                    latency_s=time.perf_counter() - started,
                    n_input_tokens=tokens1 + tokens2,
                    n_output_tokens=0,
                    extra={"pmi": [round(score1, 4), round(score2, 4)]},
                )
            )
        return outputs
