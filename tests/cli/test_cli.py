"""The `lalm-judge` entry point, run as users run it (a subprocess of the installed console script)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.simulated import simulate_scores

ROOT = Path(__file__).resolve().parents[2]


def lalm_judge(*args: str) -> subprocess.CompletedProcess:
    script = shutil.which("lalm-judge", path=str(Path(sys.executable).parent))
    assert script, "the lalm-judge console script is not installed in this environment"
    return subprocess.run([script, *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_help_lists_every_command():
    result = lalm_judge("--help")
    assert result.returncode == 0
    for command in ("score", "metrics", "anchors", "validate-config", "export", "import"):
        assert command in result.stdout


def test_unknown_command_is_an_error():
    result = lalm_judge("judge-everything")
    assert result.returncode == 2 and "unknown command 'judge-everything'" in result.stderr


def test_export_and_import_report_what_is_missing(tmp_path):
    result = lalm_judge("export", "--format", "hf", "--out", str(tmp_path / "ds"), "--results", str(tmp_path / "none"))
    assert result.returncode == 2 and "no usable sample in the manifests of" in result.stderr
    result = lalm_judge("import", "--format", "hf", str(tmp_path), "--out", str(tmp_path / "corpus"))
    assert result.returncode == 2 and "holds no parquet files" in result.stderr
    assert not (tmp_path / "ds").exists() and not (tmp_path / "corpus").exists()


def test_validate_config_reports_the_bad_key(tmp_path):
    assert lalm_judge("validate-config", "configs/paper.yaml").returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "config.yaml").read_text().replace("severities: [1, 3, 5]", "severities: [1, 9]"))
    result = lalm_judge("validate-config", str(bad))
    assert result.returncode == 2 and "variants.severities.1" in result.stderr


@pytest.mark.slow
def test_metrics_on_a_table_it_did_not_produce(tmp_path):
    """A score table written by hand-rolled code (the simulator), not by the judge stage."""
    table = tmp_path / "external_scores.parquet"
    simulate_scores(n_dialogues=12, seed=3).write_parquet(table)
    result = lalm_judge("metrics", str(table), "--out", str(tmp_path / "m"), "--bootstrap", "50", "--folds", "3")
    assert result.returncode == 0, result.stderr
    for name in ("cells", "position_bias", "prompt_selection", "pareto", "categories"):
        assert (tmp_path / "m" / f"{name}.parquet").exists()
