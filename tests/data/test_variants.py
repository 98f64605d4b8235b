"""The rewrite stage: the variant table of one turn, with the offline template generator."""

from __future__ import annotations

import polars as pl
import pytest

from lalm_judge.core.dialogue import Dialogue, Turn
from lalm_judge.core.registry import UnknownBackend
from lalm_judge.core.tables import VARIANTS
from lalm_judge.core.taxonomy import CATEGORIES, EMOTIONS, SEVERITIES, VariantKey
from lalm_judge.data.variants import rewrite_turn, write_variant_table

TEMPLATE = {"name": "template"}


@pytest.fixture
def dialogue() -> Dialogue:
    turns = [
        Turn(0, "LLM1", "Have you tried the new bakery on the corner?", "curious"),
        Turn(1, "LLM2", "Yes, their sourdough bread is wonderful.", "happy"),
        Turn(2, "LLM1", "I should buy some sourdough tomorrow morning.", "excited"),
    ]
    return Dialogue("bakery_talk", turns, "jsonl", "memory", 16000)


def test_one_row_per_category_and_severity_in_order(dialogue, tmp_path):
    frame = rewrite_turn(dialogue, 1, list(CATEGORIES), list(SEVERITIES), TEMPLATE, seed=0, cache_dir=tmp_path)
    assert frame.select(*VARIANTS.columns).schema == pl.Schema(VARIANTS.columns)
    assert frame.columns[len(VARIANTS.columns) :] == ["config_hash", "package_versions", "generation"]
    assert set(frame["generation"]) == {"{}"} and frame["config_hash"].n_unique() == 1
    assert frame.height == 40
    expected_ids = [VariantKey("bakery_talk", 1, c, s).variant_id for c in CATEGORIES for s in SEVERITIES]
    assert frame["variant_id"].to_list() == expected_ids
    assert set(frame["status"]) == {"ok"}
    assert frame["text"].null_count() == 0
    assert set(frame["emotion"]) <= set(EMOTIONS)
    first = frame.select(*VARIANTS.columns).row(0, named=True)
    assert first | {"text": None, "emotion": None} == {
        "dialogue_id": "bakery_talk",
        "variant_id": "bakery_talk.t1.overall.s1",
        "turn_index": 1,
        "n_turns": 3,
        "speaker": "LLM2",
        "original_text": "Yes, their sourdough bread is wonderful.",
        "original_emotion": "happy",
        "category": "overall",
        "severity": 1,
        "text": None,
        "emotion": None,
        "generator": "template",
        "model": "template_bank",
        "prompt_version": "2",
        "seed": 0,
        "status": "ok",
        "attempts": 1,
        "error": None,
    }


def test_subset_keeps_the_given_order(dialogue, tmp_path):
    frame = rewrite_turn(dialogue, 2, ["violence", "hate"], [5, 2], TEMPLATE, seed=1, cache_dir=tmp_path)
    assert frame.select("category", "severity").rows() == [("violence", 5), ("violence", 2), ("hate", 5), ("hate", 2)]


def test_parquet_is_byte_identical_for_equal_inputs(dialogue, tmp_path):
    paths = []
    for run in ("a", "b"):
        frame = rewrite_turn(dialogue, 0, list(CATEGORIES), list(SEVERITIES), TEMPLATE, seed=5, cache_dir=tmp_path)
        paths.append(tmp_path / run / "t0.parquet")
        write_variant_table(frame, paths[-1])
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert pl.read_parquet(paths[0]).equals(frame)


def test_different_seeds_give_different_tables(dialogue, tmp_path):
    one = rewrite_turn(dialogue, 0, list(CATEGORIES), list(SEVERITIES), TEMPLATE, seed=1, cache_dir=tmp_path)
    two = rewrite_turn(dialogue, 0, list(CATEGORIES), list(SEVERITIES), TEMPLATE, seed=2, cache_dir=tmp_path)
    assert (one["text"] != two["text"]).sum() >= 5


@pytest.mark.parametrize(
    ("turn", "categories", "severities", "message"),
    [
        (3, ["hate"], [1], "turn 3 does not exist"),
        (0, ["spam"], [1], "unknown categories"),
        (0, ["hate"], [0], "outside"),
        (0, ["hate", "hate"], [1], "must not repeat"),
    ],
)
def test_bad_requests_name_what_is_wrong(dialogue, tmp_path, turn, categories, severities, message):
    with pytest.raises(ValueError, match=message):
        rewrite_turn(dialogue, turn, categories, severities, TEMPLATE, seed=0, cache_dir=tmp_path)


def test_unknown_generator_lists_the_known_ones(dialogue, tmp_path):
    with pytest.raises(UnknownBackend, match="known: llm, template"):
        rewrite_turn(dialogue, 0, ["hate"], [1], {"name": "magic"}, seed=0, cache_dir=tmp_path)


def test_write_rejects_a_table_without_the_variant_columns(tmp_path):
    with pytest.raises(ValueError, match="lacks required column"):
        write_variant_table(pl.DataFrame({"variant_id": ["x"]}), tmp_path / "t.parquet")
