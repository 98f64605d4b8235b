import json

import polars as pl
import pytest

from lalm_judge.core.tables import PREFERENCE_COMPLETIONS, PREFERENCE_RATINGS
from lalm_judge.preference.source import (
    SourceError,
    drop_reason,
    looks_code,
    looks_math,
    looks_non_english,
    read_items,
    select_items,
)
from tests.support.workflow import ROOT

SAMPLE = ROOT / "data" / "preference_demo" / "ultrafeedback.jsonl"


def item(instruction, responses=("A fine answer.", "Another answer."), ratings=(4, 2)):
    return {
        "source": "test",
        "instruction": instruction,
        "completions": [
            {
                "model": f"m{i}",
                "response": response,
                "annotations": {
                    "helpfulness": {"Rating": str(rating), "Rationale": "r", "Rationale For Rating": f"why {i}"},
                    "honesty": {"Rating": "N/A", "Rationale": "unrated"},
                },
            }
            for i, (response, rating) in enumerate(zip(responses, ratings))
        ],
    }


def test_the_sample_is_read_with_ratings_and_rationales():
    items = read_items(SAMPLE)
    assert len(items) == 8 and all(len(i.completions) == 4 for i in items)
    first = items[0].completions[0]
    rating, rationale = first.ratings["helpfulness"]
    assert rating == 5 and rationale == "It gives a practical method with the key steps."  # "Rationale For Rating"
    assert first.ratings["honesty"] == (5, "It is confident and correct.")  # honesty has only "Rationale"


def test_json_parquet_and_folders_are_read_alike(tmp_path):
    records = [item("What is a good name for a cat?"), item("How far is the moon?")]
    (tmp_path / "a.json").write_text(json.dumps(records[:1]))
    pl.DataFrame(records[1:]).write_parquet(tmp_path / "b.parquet")
    items = read_items(tmp_path)
    assert [i.instruction for i in items] == ["What is a good name for a cat?", "How far is the moon?"]
    assert items[1].completions[1].ratings["helpfulness"] == (2, "why 1")
    assert items[1].completions[1].ratings["honesty"] == (None, "unrated")  # N/A is unrated


def test_bad_ratings_name_the_line(tmp_path):
    bad = item("Q?")
    bad["completions"][0]["annotations"]["helpfulness"]["Rating"] = "7"
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(SourceError, match=r"s.jsonl:1 completions\[0\] annotations.helpfulness: rating 7"):
        read_items(path)


@pytest.mark.parametrize(
    ("text", "math"),
    [
        ("Solve for x: 3x + 7 = 22.", True),
        ("What is 12 * 4?", True),
        (r"Simplify $\frac{a}{b}$.", True),
        ("Find the derivative of the curve.", True),
        ("Water the plants every 2-3 days and add 1/2 cup of food.", False),
        ("The 2 + 2 rule of thumb", True),
        ("Give one tip for falling asleep faster.", False),
    ],
)
def test_math_rules(text, math):
    assert looks_math(text) is math


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("```python\nprint(1)\n```", True),
        ("def square(x): return x * x", True),
        ("Write a Python function that squares a number.", True),
        ("SELECT name FROM users WHERE id = 1", True),
        ("Describe a function of the liver in the body.", False),
        ("Import duties rose last year; shops raised prices.", False),
    ],
)
def test_code_rules(text, code):
    assert looks_code(text) is code


@pytest.mark.parametrize(
    ("text", "foreign"),
    [
        ("Quelle est la meilleure saison pour visiter la Bretagne ?", True),
        ("Какая сегодня погода в Москве?", True),
        ("今天天气怎么样", True),
        ("Suggest a name for a small bakery by the sea.", False),
        ("Paris, Lyon, Nice", False),  # too short to judge by function words
    ],
)
def test_language_rules(text, foreign):
    assert looks_non_english(text) is foreign


def test_filters_look_at_responses_too_and_only_those_asked_for():
    from lalm_judge.preference.source import PreferenceItem, _completion

    plain = PreferenceItem("x", "s", "Tell me about squares.", (_completion({"response": "x = 5 * 5"}, "w"),), "o")
    assert drop_reason(plain) == "math"
    assert drop_reason(plain, drop=["code", "non_english"]) is None


def test_selection_writes_speakable_completions_and_counts_every_drop(tmp_path):
    records = [
        item("Name a calm colour.", ("**Blue**, like the sea.", "- green\n- grey")),
        item("Only one answer here?", ("Yes.", "```\ncode\n```")),  # code: dropped
        item("Anything?", ("Fine.", "")),  # one empty response: too few completions
    ]
    source = tmp_path / "s.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = select_items(
        {"path": str(source), "max_items": None, "drop": ["math", "code", "non_english"]},
        tmp_path / "c.parquet",
        tmp_path / "r.parquet",
        tmp_path / "s.json",
        shards=3,
    )
    assert report["items_dropped"] == {"math": 0, "code": 1, "non_english": 0, "too_few_completions": 1}
    assert report["items_kept"] == 1 and report["completions_kept"] == 2
    completions = PREFERENCE_COMPLETIONS.read(tmp_path / "c.parquet")
    assert completions["text"].to_list() == ["Blue, like the sea.", "green. grey."]
    assert completions["shard"].n_unique() == 1 and 0 <= completions["shard"][0] < 3
    ratings = PREFERENCE_RATINGS.read(tmp_path / "r.parquet")
    assert ratings.filter(pl.col("aspect") == "honesty")["rating"].null_count() == 2
    assert json.loads((tmp_path / "s.json").read_text()) == report
