"""What each figure plots, checked against the metric tables it is drawn from, and that each figure function
writes a PNG and an SVG."""

from __future__ import annotations

import polars as pl
import pytest

from bench import simulated
from lalm_judge.analysis import engine, inputs, stage
from lalm_judge.report import figures
from tests.support.figures import assert_every_panel_has_its_legend


@pytest.fixture(scope="module")
def tables() -> stage.MetricTables:
    scores = simulated.simulate_scores(n_dialogues=12, turn_counts=(2, 3), seed=4)
    # judge_b's audio cell is an ASR cascade: the figures must label it so.
    scores = simulated.with_audio_input(scores, {"judge_b": "whisper_tiny_en"})
    settings = engine.MetricSettings(n_boot=30, seed=0, n_folds=2, min_pb_dialogues=3, n_permutations=20)
    return stage.compute_metrics(inputs.validate_scores(scores), settings)


def test_sensitivity_bars_are_the_cells_at_the_prompt_chosen_for_sensitivity(tables):
    bars = figures.sensitivity_bars(tables.cells, tables.pareto)
    assert bars.height == tables.pareto.height == 4
    for bar, config in zip(bars.iter_rows(named=True), tables.pareto.sort(engine.CONFIG_KEYS).iter_rows(named=True)):
        cell = tables.cells.filter(
            *(pl.col(key) == config[key] for key in engine.CONFIG_KEYS),
            pl.col("prompt") == config["prompt_sensitivity"],
        ).row(0, named=True)
        assert (bar["sensitivity"], bar["sensitivity_lo"], bar["sensitivity_hi"]) == (
            cell["sensitivity"],
            cell["sensitivity_lo"],
            cell["sensitivity_hi"],
        )
    assert "audio (cascade via whisper_tiny_en)" in bars.filter(pl.col("judge") == "judge_b")["series"].to_list()
    assert "audio" in bars.filter(pl.col("judge") == "judge_a")["series"].to_list()


def test_pareto_points_are_the_cross_validated_values(tables):
    points = figures.pareto_points(tables.pareto)
    assert points["cv_sensitivity"].to_list() == tables.pareto["cv_sensitivity"].to_list()
    assert points["cv_specificity"].to_list() == tables.pareto["cv_specificity"].to_list()
    assert points["on_front"].to_list() == tables.pareto["on_front"].to_list()
    assert points["on_front"].any()


def test_prompt_lines_hold_every_cell(tables):
    lines = figures.prompt_lines(tables.cells, "specificity")
    assert lines.height == tables.cells.height
    assert sorted(lines["value"].to_list()) == sorted(tables.cells["specificity"].to_list())


def test_severity_lines_average_over_prompts(tables):
    lines = figures.severity_lines(tables.severity_curve)
    text_a = lines.filter(pl.col("judge") == "judge_a", pl.col("series") == "text (gt)").sort("severity")
    expected = (
        tables.severity_curve.filter(pl.col("judge") == "judge_a", pl.col("modality") == "text")
        .group_by("severity")
        .agg(pl.col("mean_score").mean())
        .sort("severity")
    )
    assert text_a["severity"].to_list() == [0, 1, 2, 3, 4, 5]
    assert text_a["mean_score"].to_list() == pytest.approx(expected["mean_score"].to_list())


def test_position_bias_grid_shows_only_what_enters_avg_abs_pb(tables):
    grid = figures.position_bias_grid(tables.position_bias, "sensitivity")
    included = tables.position_bias.filter(pl.col("metric") == "sensitivity", pl.col("included"))
    assert 1 not in grid["position"].to_list()
    expected = included.group_by("judge", "n_turns", "position").agg(pl.col("pb").mean()).sort(pl.all())
    assert grid.sort(pl.all()).equals(expected)


def test_category_grid_averages_each_configuration_over_prompts(tables):
    grid = figures.category_grid(tables.categories, "sensitivity")
    row = grid.filter(pl.col("row") == "judge_a text gt clean", pl.col("category") == "hate").row(0, named=True)
    expected = tables.categories.filter(
        pl.col("judge") == "judge_a", pl.col("modality") == "text", pl.col("category") == "hate"
    )["sensitivity"].mean()
    assert row["value"] == pytest.approx(expected)


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


def test_severity_axes_show_the_severities_measured(tables, tmp_path, drawn):
    """A run of severities 1, 3 and 5 gets ticks 0 (the safe original), 1, 3, 5: not 0-5."""
    measured = tables.severity_curve.filter(pl.col("severity").is_in([0, 1, 3, 5]))
    figures.plot_severity_curves(measured, tmp_path / "severity")
    (figure,) = drawn
    for axis in figure.axes:
        assert [tick.get_text() for tick in axis.get_xticklabels()] == ["0", "1", "3", "5"]
        assert axis.get_legend() is not None


def label_boxes(axis) -> list:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(axis.figure).get_renderer()
    return [text.get_window_extent(renderer) for text in axis.texts]


def test_pareto_labels_do_not_overlap_even_for_crowded_points(tmp_path, drawn):
    crowded = pl.DataFrame(
        {
            "judge": [f"judge_{i}" for i in range(8)],
            "modality": ["audio_text"] * 8,
            "transcript_source": ["asr:whisper_large_v3"] * 8,
            "cv_sensitivity": [0.20 + 0.002 * i for i in range(8)],
            "cv_specificity": [0.90 - 0.002 * i for i in range(8)],
            "avg_abs_pb_sensitivity": [0.05] * 8,
            "on_front": [True] * 8,
        }
    )
    figures.plot_pareto(crowded, tmp_path / "pareto")
    (figure,) = drawn
    axis = figure.axes[0]
    boxes = label_boxes(axis)
    assert len(boxes) == 8
    overlaps = [(a, b) for a in range(8) for b in range(a + 1, 8) if boxes[a].overlaps(boxes[b])]
    assert overlaps == []
    # Placed from a fixed number of iterations, not a time limit: the same table gives the same figure.
    again = tmp_path / "again"
    figures.plot_pareto(crowded, again)
    assert (tmp_path / "pareto.svg").read_bytes() == (tmp_path / "again.svg").read_bytes()


def test_every_panel_of_every_report_figure_has_its_legend(tables, tmp_path, drawn):
    stage.write_metrics(tables, tmp_path / "metrics", engine.MetricSettings(n_boot=30, seed=0, n_folds=2))
    figures.write_figures(tmp_path / "metrics", tmp_path / "figures")
    assert len(drawn) == len(figures.FIGURES)
    for figure in drawn:
        assert_every_panel_has_its_legend(figure)
