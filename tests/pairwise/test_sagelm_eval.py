"""The `sagelm_compatible` evaluation on SageLM's own test sets (tests/fixtures/sagelm_release: its 728 semantic and
410 acoustic records as released, a judge's answers per seed, and what SageLM's evaluation scripts print for
them): every split the scripts print equals the metrics, seed by seed; the default evaluation counts the nine
acoustic records the scripts' aspect pattern drops."""

import json
import lzma
from pathlib import Path

import polars as pl
import pytest

from lalm_judge.cli.pairwise import main
from lalm_judge.core.tables import PAIRWISE_PREDICTIONS
from lalm_judge.pairwise.metrics import (
    PairwiseMetricSettings,
    compute_pairwise_stage,
    estimate_cell,
    metrics_rows,
    validate_predictions,
)
from lalm_judge.pairwise.sagelm import import_sagelm
from lalm_judge.pairwise.sagelm_eval import (
    format_by_file_names,
    sagelm_compatible_view,
    script_aspect,
    script_verdict,
)
from lalm_judge.report.pairwise import render_pairwise_html

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sagelm_release"
SETS = ("semantic", "acoustic")
SEEDS = (42, 123, 1234)
# Every column SageLM's scripts print, and where the metrics hold it: (scope, group).
SPLITS = {
    ("semantic", "Helpfulness"): ("aspect", "helpfulness"),
    ("semantic", "Honesty"): ("aspect", "honesty"),
    ("semantic", "Instruction_following"): ("aspect", "instruction_following"),
    ("semantic", "Truthfulness"): ("aspect", "truthfulness"),
    ("acoustic", "Emotion"): ("aspect", "emotion"),
    ("acoustic", "Gender"): ("aspect", "gender"),
    ("acoustic", "Character"): ("aspect", "character"),
    ("acoustic", "Implicit_Emotion"): ("aspect", "implicit_emotion"),
    ("acoustic", "Mixed"): ("aspect", "gender_emotion"),
    ("acoustic", "Emotion_TTS"): ("style_format", "emotion/explicit_tts"),
    ("acoustic", "Emotion_QA"): ("style_format", "emotion/explicit_dialogue"),
    ("acoustic", "Gender_TTS"): ("style_format", "gender/explicit_tts"),
    ("acoustic", "Gender_QA"): ("style_format", "gender/explicit_dialogue"),
    ("acoustic", "Character_TTS"): ("style_format", "character/explicit_tts"),
    ("acoustic", "Character_QA"): ("style_format", "character/explicit_dialogue"),
}
SETTINGS = PairwiseMetricSettings(n_boot=1, seed=0)


def script_output(name: str, seed: int) -> dict[str, dict[str, str]]:
    """What a script printed: column -> {'accuracy': '59.34%', 'agreement': ...}, from each header line and the
    'Accuracy:' and 'Agreement:' lines below it."""
    lines = (FIXTURES / f"eval_{name}_seed{seed}.txt").read_text().splitlines()
    printed: dict[str, dict[str, str]] = {}
    for index, line in enumerate(lines):
        if not line.startswith("Accuracy:"):
            continue
        header = [c.rstrip(":") for c in lines[index - 1].split("\t") if c and c != "Type"]
        for metric, values in (("accuracy", line), ("agreement", lines[index + 1])):
            for column, value in zip(header, values.split("\t")[1:]):
                printed.setdefault(column, {})[metric] = value
    return printed


def answers(name: str, seed: int) -> list[str]:
    with lzma.open(FIXTURES / f"predictions_{name}_seed{seed}.jsonl.xz", "rt", encoding="utf-8") as handle:
        return [json.loads(line)["predict"] for line in handle]


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """SageLM's records as item rows (audio not needed by the metrics) and the judge's predictions: the first
    seed's answer as `prediction`, every seed's in `samples`, as the judge stage records a sampled judge."""
    folder = tmp_path_factory.mktemp("sagelm_release")
    files = []
    for name in SETS:
        target = folder / f"test_{name}.json"
        target.write_bytes(lzma.decompress((FIXTURES / f"test_{name}.json.xz").read_bytes()))
        files.append(target)
    items, _ = import_sagelm(files, folder / "audio")
    by_file = {str(path): {seed: answers(name, seed) for seed in SEEDS} for name, path in zip(SETS, files)}
    given = [by_file[row["source_file"]] for row in items.iter_rows(named=True)]
    per_seed = [[file[seed][row] for seed in SEEDS] for file, row in zip(given, items["source_row"])]
    predictions = items.select("item_id", "aspect", "label", "task_format", "style").with_columns(
        prediction=pl.Series([texts[0] for texts in per_seed]),
        n_samples=pl.lit(len(SEEDS)),
        samples=pl.Series([json.dumps([{"seed": s, "answer": t} for s, t in zip(SEEDS, texts)]) for texts in per_seed]),
    )
    return items, validate_predictions(predictions)


def values(cell) -> dict[tuple[str, str, str], float]:
    return {(r["scope"], r["group"], r["metric"]): r["value"] for r in metrics_rows(cell, {})}


@pytest.fixture(scope="module")
def compatible(release):
    items, predictions = release
    view = sagelm_compatible_view(predictions, items)
    return view, values(estimate_cell(view.frame, SETTINGS))


@pytest.mark.parametrize(("split", "where"), SPLITS.items(), ids=[f"{s}-{c}" for s, c in SPLITS])
def test_each_split_equals_what_sagelm_s_script_prints_seed_by_seed(compatible, split, where):
    name, column = split
    _, got = compatible
    for seed in SEEDS:
        printed = script_output(name, seed)[column]
        for metric in ("accuracy", "agreement"):
            value = got[(*where, f"{metric}_seed_{seed}")]
            assert f"{100 * value:.2f}%" == printed[metric], (seed, metric)
    # The single-answer metrics are the first seed's run (SageLM's first seed).
    first = script_output(name, SEEDS[0])[column]
    assert f"{100 * got[(*where, 'accuracy')]:.2f}%" == first["accuracy"]


def test_the_scripts_drop_nine_acoustic_records_which_the_default_evaluation_counts(release, compatible):
    items, predictions = release
    view, got = compatible
    assert view.n_rows == 728 + 410 and view.frame.height == 728 + 401 and not view.not_sagelm
    dropped = items.join(
        pl.DataFrame(list(view.dropped), schema=["item_id", "aspect"], orient="row"), on=["item_id", "aspect"]
    )
    assert dropped.height == 9 and dropped["query"].str.contains("**", literal=True).all()
    expected = ["character", "emotion", "emotion", "emotion", "gender", "gender", "gender", "gender_emotion"]
    assert sorted(dropped["aspect"].to_list()) == [*expected, "gender_emotion"]
    default = values(estimate_cell(predictions, SETTINGS))
    counted = {aspect: n for aspect, n in predictions.group_by("aspect").len().iter_rows()}
    assert counted["gender"] == 100 and counted["gender_emotion"] == 83  # every record under its own aspect
    # Where the dropped records differ from the rest, the two evaluations differ, and only the default counts them.
    assert default[("aspect", "gender", "accuracy_seed_42")] != got[("aspect", "gender", "accuracy_seed_42")]


def test_the_scripts_readings_by_hand():
    instruction = (
        "Below are two responses for a given task. The task is defined by the Instruction. Evaluate in terms of "
        "**gender instruction following** and indicate a better response using 1, 2 or Tie.\n### Instruction:\n"
        "Say **hello** in a deep voice.\n\n### Response 1:\n<audio>\n\n### Response 2:\n<audio>\n\n"
    )
    audios = ("Audio/stage2/Gender/flan-17-1-audio1.wav", "Audio/stage2/Gender/flan-17-2-audio2.wav")
    assert script_aspect("gender", instruction, audios, 5) is None  # the greedy match ends at the query's '**'
    plain = instruction.replace("**hello**", "hello")
    assert script_aspect("gender", plain, audios, 5) == "gender"
    emotion = plain.replace("gender instruction", "emotion instruction")
    assert script_aspect("emotion", emotion, ("Audio/Implicit-Emotion/a-1-1.wav",) * 2, 0) == "implicit_emotion"
    assert script_aspect("truthfulness", "any", audios, 6) == "instruction_following"  # by position, in fours
    assert (
        format_by_file_names(audios) == "explicit_dialogue" and format_by_file_names(audios[:1] * 2) == "explicit_tts"
    )
    assert [script_verdict(a) for a in ("1\nbecause", "Tie", "The first", "2", " 1", "", None, "**1**")] == [
        "1",
        "Tie",
        "Tie",
        "2",
        None,
        None,
        None,
        None,
    ]


def test_the_metrics_stage_writes_the_compatible_evaluation_beside_the_default_and_the_report_shows_both(release):
    items, predictions = release
    cell = {"judge": "omni", "modality": "audio", "transcript_source": "none", "prompt": "sagelm"}
    frame = PAIRWISE_PREDICTIONS.frame(predictions.with_columns(**{k: pl.lit(v) for k, v in cell.items()}).to_dicts())
    tables = compute_pairwise_stage([frame], SETTINGS, items=items)
    (document,) = tables.documents
    compatible = document["sagelm_compatible"]
    assert (compatible["n_rows"], compatible["n_counted"], compatible["n_dropped"]) == (1138, 1129, 9)
    assert compatible["aspects"]["gender"]["n"] == 97 and document["aspects"]["gender"]["n"] == 100
    rows = tables.sagelm_compatible.filter((pl.col("scope") == "aspect") & (pl.col("metric") == "accuracy_seed_123"))
    printed = script_output("acoustic", 123)
    for column, aspect in (("Emotion", "emotion"), ("Mixed", "gender_emotion")):
        value = rows.filter(pl.col("group") == aspect)["value"].item()
        assert f"{100 * value:.2f}%" == printed[column]["accuracy"]
    page = render_pairwise_html(tables, {}, {}, "figure")
    assert "<h3>Acoustic aspects (SageLM&#x27;s scripts)</h3>" in page
    assert "1129 of 1138 rows counted: 9 rows of SageLM records its scripts count under no aspect." in page
    # Without SageLM records (project-made items) there is nothing to count the scripts' way.
    project = compute_pairwise_stage([frame], SETTINGS, items=items.with_columns(source_instruction=pl.lit(None)))
    assert project.sagelm_compatible.height == 0 and "sagelm_compatible" not in project.documents[0]


def test_the_metrics_command_adds_the_compatible_evaluation_given_the_item_table(release, tmp_path, capsys):
    items, predictions = release
    items.write_parquet(tmp_path / "items.parquet")
    predictions.write_parquet(tmp_path / "predictions.parquet")
    out = tmp_path / "metrics.json"
    arguments = ["metrics", str(tmp_path / "predictions.parquet"), "--out", str(out), "--bootstrap", "5"]
    assert main([*arguments, "--items", str(tmp_path / "items.parquet")]) == 0
    document = json.loads(out.read_text())
    printed = script_output("semantic", 42)["Honesty"]["agreement"]
    assert f"{100 * document['sagelm_compatible']['aspects']['honesty']['agreement']['value']:.2f}%" == printed
    assert "sagelm_compatible: 1129 of 1138 rows counted as SageLM's scripts count them (9 under no aspect)" in (
        capsys.readouterr().out
    )
    project_items = items.with_columns(source_instruction=pl.lit(None, pl.String))
    project_items.write_parquet(tmp_path / "project.parquet")
    assert main([*arguments, "--items", str(tmp_path / "project.parquet")]) == 2
    assert "the item table holds no SageLM records" in capsys.readouterr().err
