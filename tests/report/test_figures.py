"""Each figure function writes a non-empty PNG and SVG from metric tables of a synthetic score table."""

from __future__ import annotations

import pytest

from bench import simulated
from lalm_judge.analysis import engine, inputs, stage
from lalm_judge.report import figures


@pytest.fixture(scope="module")
def tables() -> stage.MetricTables:
    scores = simulated.simulate_scores(n_dialogues=8, turn_counts=(2, 3), seed=4)
    return stage.compute_metrics(inputs.validate_scores(scores), engine.MetricSettings(n_boot=30, seed=0, n_folds=2))


@pytest.mark.parametrize(
    "draw",
    [
        lambda t, stem: figures.plot_sensitivity(t.cells, t.pareto, stem),
        lambda t, stem: figures.plot_pareto(t.pareto, stem),
        lambda t, stem: figures.plot_prompt_strategies(t.cells, stem),
        lambda t, stem: figures.plot_severity_curves(t.severity_curve, stem),
        lambda t, stem: figures.plot_position_bias(t.position_bias, stem),
        lambda t, stem: figures.plot_categories(t.categories, stem),
    ],
    ids=["sensitivity", "pareto", "prompts", "severity", "position_bias", "categories"],
)
def test_figure_writes_png_and_svg(tables, tmp_path, draw):
    paths = draw(tables, tmp_path / "figure")
    assert sorted(path.suffix for path in paths) == [".png", ".svg"]
    for path in paths:
        assert path.stat().st_size > 1000
    assert paths[0].read_bytes().startswith(b"\x89PNG")
    assert b"<svg" in paths[1].read_bytes()
