import json

import polars as pl
import pytest

from lalm_judge.cli import provenance as provenance_cli
from lalm_judge.core.files import with_provenance
from lalm_judge.core.provenance import provenance_report


def scores(judges=("a", "b"), rows_per_judge=3) -> pl.DataFrame:
    frame = pl.DataFrame(
        {
            "judge": [j for j in judges for _ in range(rows_per_judge)],
            "prompt": ["basic"] * (len(judges) * rows_per_judge),
            "model": [f"model-{j}" for j in judges for _ in range(rows_per_judge)],
            "prompt_version": ["2"] * (len(judges) * rows_per_judge),
            "score": [0.5] * (len(judges) * rows_per_judge),
        }
    )
    return with_provenance(frame, config_hash="abc", seed=0, generation='{"max_new_tokens":8}')


def test_a_table_made_one_way_is_consistent_and_shows_its_provenance():
    report = provenance_report(scores(), "scores.parquet")
    assert report.consistent and [g.identity for g in report.groups] == [
        {"judge": "a", "prompt": "basic"},
        {"judge": "b", "prompt": "basic"},
    ]
    text = "\n".join(report.lines())
    assert "prompt_version     2" in text and "seed               0" in text  # shared by every row
    assert "judge=a, prompt=basic (3 rows): model=model-a" in text  # differs between judges, as it may


def test_rows_of_one_judge_made_another_way_are_flagged_with_their_rows():
    table = scores().with_columns(
        package_versions=pl.when(pl.int_range(pl.len()) == 4).then(pl.lit("torch==9")).otherwise("package_versions")
    )
    report = provenance_report(table, "scores.parquet")
    assert not report.consistent
    assert [(g.identity["judge"], g.differing) for g in report.groups] == [("a", []), ("b", ["package_versions"])]
    assert "DIFFERS judge=b, prompt=basic: package_versions takes 2 values" in "\n".join(report.lines())
    assert "'torch==9' (1 row from row 4)" in "\n".join(report.lines())


def test_a_table_without_run_provenance_is_flagged():
    report = provenance_report(pl.DataFrame({"judge": ["a"], "score": [0.1]}), "bare.parquet")
    assert report.missing == ("config_hash", "seed", "package_versions") and not report.consistent


def test_the_command_prints_reports_and_says_by_its_status(tmp_path, capsys):
    scores().write_parquet(tmp_path / "shard0.parquet")
    scores().with_columns(pl.lit("3").alias("prompt_version")).write_parquet(tmp_path / "shard1.parquet")
    paths = [str(tmp_path / "shard0.parquet"), str(tmp_path / "shard1.parquet")]
    assert provenance_cli.main(paths) == 0, "each shard on its own is consistent"
    assert capsys.readouterr().out.count("provenance is the same in every row of each group") == 2
    assert provenance_cli.main([*paths, "--together", "--json"]) == 1
    [report] = json.loads(capsys.readouterr().out)
    assert report["n_rows"] == 12 and [g["differing"] for g in report["groups"]] == [["prompt_version"]] * 2


@pytest.mark.parametrize("content", [b"", b"not parquet"])
def test_an_unreadable_table_is_exit_status_2(tmp_path, capsys, content):
    (tmp_path / "bad.parquet").write_bytes(content)
    assert provenance_cli.main([str(tmp_path / "bad.parquet")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_served_model_is_shown_and_a_second_one_in_a_cell_is_flagged(tmp_path, capsys):
    """Rows without an answer (an item skipped for its length) have no served model and are not another way."""
    served = pl.Series(["gpt-4o-2024-08-06", None, "gpt-4o-2024-08-06"] * 2)
    scores().with_columns(served_model=served).write_parquet(tmp_path / "scores.parquet")
    assert provenance_cli.main([str(tmp_path / "scores.parquet")]) == 0
    assert "served_model       gpt-4o-2024-08-06" in capsys.readouterr().out
    rerouted = served.scatter(5, "gpt-4o-2024-11-20")
    report = provenance_report(scores().with_columns(served_model=rerouted), "scores.parquet")
    assert [g.differing for g in report.groups] == [[], ["served_model"]]
