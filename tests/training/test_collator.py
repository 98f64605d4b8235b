"""The collator on the tiny Qwen2-Audio's real processor and chat template: training examples are rendered as
the pairwise judge stage renders its requests, and only the answer is learnt."""

import numpy as np
import pytest
import soundfile as sf
import transformers

from lalm_judge.judging.backends.base import AUDIO_SLOT
from lalm_judge.judging.backends.chat import build_conversation
from lalm_judge.pairwise.items import ASPECTS
from lalm_judge.pairwise.prompts import load_pairwise_prompt
from lalm_judge.pairwise.sagelm import parse_instruction
from lalm_judge.training.collator import IGNORE_INDEX, PairwiseSFTCollator
from lalm_judge.training.records import read_dataset
from lalm_judge.training.settings import DatasetSource
from tests.training.conftest import SAMPLE_RATE

SYSTEM = "You are a helpful assistant."


@pytest.fixture
def processor(qwen2audio_dir):
    return transformers.AutoProcessor.from_pretrained(qwen2audio_dir)


@pytest.fixture
def records(training_data):
    dataset = DatasetSource("semantic", (str(training_data["semantic"]),), str(training_data["audio_root"]))
    return read_dataset(dataset)


def test_a_record_becomes_the_request_the_sagelm_prompt_gives_the_judge(processor, records):
    """The pairwise judge stage renders an item with the `sagelm` prompt; a training record of the same item is
    the same request: same system turn, same user text with the audio slots where the record's <audio> are."""
    collate = PairwiseSFTCollator(processor, SYSTEM, max_response_s=60)
    record = records[1]
    request = collate.request(record.as_row())
    parsed = parse_instruction(record.user)
    aspect_text, query = parsed.aspect_text, parsed.query
    aspect = next(slug for slug, text in ASPECTS.items() if text == aspect_text)
    system, user = load_pairwise_prompt("sagelm").render("audio", aspect=aspect, aspect_text=aspect_text, query=query)
    assert (request.system, request.user) == (system, user)
    assert request.user.count(AUDIO_SLOT) == len(request.audios) == 2
    kinds = [part["type"] for part in build_conversation(request)[1]["content"]]
    assert kinds == ["text", "audio", "text", "audio", "text"]


def test_only_the_answer_and_its_end_of_turn_are_learnt(processor, records):
    collate = PairwiseSFTCollator(processor, SYSTEM, max_response_s=60)
    batch = collate([record.as_row() for record in records[:2]])
    assert batch["input_features"].shape[0] == 4  # two responses per example
    assert "num_audio_tokens" not in batch
    for row, record in enumerate(records[:2]):
        learnt = batch["labels"][row][batch["labels"][row] != IGNORE_INDEX].tolist()
        assert processor.tokenizer.decode(learnt) == record.output + "<|im_end|>\n"
        # The tokens before the answer are exactly what the processor makes of the judge's prompt.
        request = collate.request(record.as_row())
        alone = processor(
            text=[collate.prompt_text(request)],
            audio=[audio for audio, _ in request.audio_items],
            sampling_rate=SAMPLE_RATE,
            return_tensors="pt",
        )
        n_prompt = alone["input_ids"].shape[1]
        assert batch["input_ids"][row][:n_prompt].tolist() == alone["input_ids"][0].tolist()
        assert (batch["labels"][row][:n_prompt] == IGNORE_INDEX).all()
    # Padding (right) is neither attended to nor learnt.
    padded = batch["attention_mask"] == 0
    assert (batch["labels"][padded] == IGNORE_INDEX).all()


def test_the_prompt_is_the_chat_template_of_the_judge(processor, records):
    collate = PairwiseSFTCollator(processor, SYSTEM, 60)
    prompt = collate.prompt_text(collate.request(records[0].as_row()))
    assert prompt.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nBelow are two responses")
    assert prompt.count("<|audio_bos|><|AUDIO|><|audio_eos|>") == 2
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_audio_is_cut_to_the_backbones_window(processor, tmp_path):
    clip = tmp_path / "long.wav"
    sf.write(clip, np.zeros(40 * SAMPLE_RATE, dtype=np.float32), SAMPLE_RATE)
    # Qwen2-Audio's feature extractor keeps 30 s: the shorter of that and max_response_s applies.
    assert len(PairwiseSFTCollator(processor, SYSTEM, 60).load_audio(str(clip))) == 30 * SAMPLE_RATE
    assert len(PairwiseSFTCollator(processor, SYSTEM, 12.5).load_audio(str(clip))) == 12.5 * SAMPLE_RATE
