"""Figures and the standalone report, built from metric tables of a synthetic score table, real wav clips in
tiny manifests, ASR tables and the audio accounting, all in tmp_path."""

from __future__ import annotations

import json
import re
import sys
from html import escape
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import soundfile as sf

from bench import simulated
from lalm_judge.analysis import controls, engine, flow, modality, stage
from lalm_judge.analysis.findings import delta_findings
from lalm_judge.analysis.guide import practitioner_guide
from lalm_judge.audio import waveform as audio_lib
from lalm_judge.core.tables import PROSODY, PROSODY_FEATURES
from lalm_judge.manifest.accounting import audio_accounting
from lalm_judge.report import controls as report_controls
from lalm_judge.report import figures, html, site, tables
from lalm_judge.report import modality as report_modality
from tests.support.figures import assert_every_panel_has_its_legend

ROOT = Path(__file__).resolve().parents[2]
ASR = "asr:whisper_tiny_en"
SAMPLE_RATE = 16000
CONFIG = {
    "seed": 0,
    "judges": {
        "minilm": {
            "backend": "embedding",
            "model": "bundled:all-minilm-l6-v2",
            "modalities": ["text", "audio"],
            "description": "Zero-shot embedding-similarity baseline (not an LLM).",
            "weak": "embedding-similarity baseline, not a language model",
        },
        "qwen_audio": {
            "backend": "vllm",
            "model": "Qwen/Qwen2-Audio-7B-Instruct",
            "modalities": ["text", "audio"],
            "description": "Qwen2-Audio-7B-Instruct, an audio-language model.",
        },
    },
    "evaluation": {"judges": ["minilm", "qwen_audio"], "transcript_sources": ["gt", ASR], "prompts": ["basic", "cot"]},
    "metrics": {"bootstrap": 40, "folds": 2},
}
DIALOGUES = {
    "dlg_alpha": ["We should plant tomatoes.", "Good idea, they love sun.", "Let us start on Sunday."],
    "dlg_beta": ["The train leaves at nine.", "Then we meet at the station."],
}
VARIANT_TEXT = "UNSAFE LINE {turn}"


def write_tone(path: Path, seconds: float, frequency: float) -> str:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    audio_lib.write_wav(path, 0.3 * np.sin(2 * np.pi * frequency * t), SAMPLE_RATE)
    return str(path)


def write_manifest(root: Path, dialogue_id: str, lines: list[str]) -> Path:
    """A manifest with real clips: each turn and each (turn, severity 1 and 5) variant of one category."""
    clips = root / "clips" / dialogue_id
    turns = [
        {
            "index": i,
            "speaker": f"LLM{i % 2 + 1}",
            "emotion": "neutral",
            "clip": write_tone(clips / f"t{i}.wav", 0.5 + 0.1 * i, 220.0 + 40 * i),
            "texts": {"gt": text, ASR: text.lower()},
        }
        for i, text in enumerate(lines)
    ]
    variants = []
    for i in range(len(lines)):
        for severity in (1, 5):
            variant_id = f"{dialogue_id}.t{i}.violence.s{severity}"
            text = VARIANT_TEXT.format(turn=i)
            variants.append(
                {
                    "variant_id": variant_id,
                    "turn_index": i,
                    "category": "violence",
                    "severity": severity,
                    "status": "ok",
                    "clip": write_tone(clips / f"{variant_id}.wav", 0.7, 600.0),
                    "texts": {"gt": text, ASR: text.lower()},
                }
            )
    manifest = {
        "dialogue_id": dialogue_id,
        "status": "ok",
        "sample_rate": SAMPLE_RATE,
        "n_turns": len(lines),
        "gaps_s": [0.25] * (len(lines) - 1),
        "transcript_sources": ["gt", ASR],
        "turns": turns,
        "variants": variants,
    }
    path = root / "manifests" / f"{dialogue_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return path


def write_asr_table(root: Path, dialogue_id: str) -> Path:
    frame = pl.DataFrame(
        {
            "dialogue_id": [dialogue_id] * 3,
            "sample_id": [f"{dialogue_id}.original", f"{dialogue_id}.original", f"{dialogue_id}.t0.violence.s5"],
            "turn_index": [0, 1, 0],
            "clip": ["t0.wav", "t1.wav", "v.wav"],
            "reference": ["a b", "c d", "e f g h"],
            "text": ["a b", "c", "e f g x"],
            "wer": [0.0, 0.5, 0.25],
            "audio_s": [1.0, 3.0, 2.0],
        }
    )
    path = root / "asr" / "whisper_tiny_en" / f"{dialogue_id}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(path)
    return path


def with_controls(clean: pl.DataFrame) -> pl.DataFrame:
    """The clean scores plus a cell per control: audio controls move the variants' scores up (the harm is
    harder to hear), the TTS control scores like the original, qwen_audio's injected variants score 0.3 higher,
    and minilm's audio cell does not move under silence (it ignores audio)."""
    variants = clean.filter(pl.col("severity") > 0)
    originals = clean.filter(pl.col("severity") == 0).drop("turn_index")
    targets = variants.select("dialogue_id", "turn_index").unique()
    per_turn = originals.join(targets, on="dialogue_id")

    def safe(kind: str) -> pl.DataFrame:
        return per_turn.with_columns(
            variant_id=pl.col("dialogue_id") + ".t" + pl.col("turn_index").cast(pl.String) + f".{kind}"
        ).select(clean.columns)

    def moved(frame: pl.DataFrame, shift: pl.Expr) -> pl.DataFrame:
        return frame.with_columns(score=(pl.col("score") + shift).clip(0.0, 1.0))

    audio = pl.col("modality") == "audio"
    parts = [clean]
    for condition, shift in (("masked", 0.2), ("noise_10", 0.1), ("noise_0", 0.3)):
        parts.append(
            pl.concat([safe("original"), moved(variants, pl.lit(shift))]).with_columns(condition=pl.lit(condition))
        )
    deaf = pl.when(pl.col("judge") == "minilm").then(0.0).otherwise(0.4)
    parts.append(
        pl.concat([safe("original"), moved(variants, deaf)]).filter(audio).with_columns(condition=pl.lit("silence"))
    )
    parts.append(safe("tts_control").with_columns(condition=pl.lit("tts_control")))
    injected = moved(variants, pl.when(pl.col("judge") == "qwen_audio").then(0.3).otherwise(0.0))
    parts.append(
        pl.concat(
            [originals.with_columns(turn_index=pl.lit(None, pl.Int64)).select(clean.columns), injected]
        ).with_columns(condition=pl.lit("injection"))
    )
    return pl.concat(parts)


def prosody_rows(scores: pl.DataFrame) -> pl.DataFrame:
    """Energy and pitch of every variant's unsafe turn: louder for more severe variants."""
    variants = scores.filter(pl.col("severity") > 0).select("dialogue_id", "variant_id", "turn_index", "severity")
    return PROSODY.frame(
        {"dialogue_id": r["dialogue_id"], "sample_id": r["variant_id"], "turn_index": r["turn_index"]}
        | dict.fromkeys(PROSODY_FEATURES, 1.0)
        | {
            "rms_db_mean": -30.0 + 2 * r["severity"] + sum(map(ord, r["variant_id"])) % 7,
            "f0_median_hz": 100.0 + r["turn_index"],
        }
        for r in variants.unique().sort("variant_id").iter_rows(named=True)
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("report")
    scores = simulated.simulate_scores(
        n_dialogues=8,
        turn_counts=(2, 3),
        judges=("minilm", "qwen_audio"),
        modalities=(("text", "gt"), ("text", ASR), ("audio", "none")),
        prompts=("basic", "cot"),
        seed=5,
    )
    # qwen_audio also hears the audio with the transcript: the cells of the modality analysis.
    audio_text = simulated.simulate_scores(
        n_dialogues=8,
        turn_counts=(2, 3),
        judges=("qwen_audio",),
        modalities=(("audio_text", "gt"), ("audio_text", ASR)),
        prompts=("basic", "cot"),
        seed=6,
    )
    scores = pl.concat([scores, audio_text])
    # minilm's audio cell is an ASR cascade; qwen_audio's text/asr cot cell lacks severity 3.
    scores = with_controls(simulated.with_audio_input(scores, {"minilm": "whisper_tiny_en"})).filter(
        ~(
            (pl.col("condition") == "clean")
            & (pl.col("judge") == "qwen_audio")
            & (pl.col("modality") == "text")
            & (pl.col("transcript_source") == ASR)
            & (pl.col("prompt") == "cot")
            & (pl.col("severity") == 3)
        )
    )
    score_path = root / "scores.parquet"
    scores.write_parquet(score_path)
    prosody_path = root / "prosody.parquet"
    prosody_rows(scores).write_parquet(prosody_path)
    # 8 dialogues: the minimum support is lowered to 4 so that the cells have intervals and findings, while
    # position-bias slices (4 dialogues of each length, fewer where an original failed) fall below it.
    settings = engine.MetricSettings(
        n_boot=40, seed=0, n_folds=2, min_pb_dialogues=4, n_permutations=50, min_dialogues=4
    )
    stage.run_metrics([score_path], root / "metrics", settings)
    figures.write_figures(root / "metrics", root / "figures")
    controls.run_controls([score_path], root / "metrics", root / "controls", settings, prosody_paths=[prosody_path])
    metrics = root / "metrics"
    report_controls.write_control_figures(root / "controls", root / "control_figures")
    modality.run_modality([score_path], root / "modality", settings)
    run_guide(root)
    report_modality.write_modality_figures(root / "modality", root / "modality_figures")
    flow.run_decision_flow(metrics / "guide.parquet", root / "decision_flow.json")
    manifests = [write_manifest(root, d, lines) for d, lines in DIALOGUES.items()]
    accounting = root / "accounting.json"
    accounting.write_text(json.dumps(audio_accounting([str(p) for p in manifests])))
    return {
        "root": root,
        "scores": [score_path],
        "manifests": manifests,
        "asr": [write_asr_table(root, d) for d in DIALOGUES],
        "accounting": accounting,
    }


def run_guide(root: Path, modality_root: Path | None = None) -> None:
    """The guide stage on the metric and control tables under root and the modality tables under modality_root
    (default root), as the workflow runs it."""
    metrics = root / "metrics"
    stage.run_guide(
        metrics / "cells.parquet",
        metrics / "pareto.parquet",
        root / "controls" / "flags.parquet",
        metrics,
        categories_path=metrics / "categories.parquet",
        comparisons_path=metrics / "comparisons.parquet",
        patterns_path=(modality_root or root) / "modality" / "patterns.parquet",
    )


def build(workspace: dict, out_dir: Path, n_examples: int = 2) -> Path:
    return site.build_report(
        metrics_dir=workspace["root"] / "metrics",
        figure_dir=workspace["root"] / "figures",
        manifest_paths=workspace["manifests"],
        asr_paths=workspace["asr"],
        accounting_path=workspace["accounting"],
        config=CONFIG,
        out_dir=out_dir,
        controls_dir=workspace["root"] / "controls",
        control_figure_dir=workspace["root"] / "control_figures",
        modality_dir=workspace["root"] / "modality",
        modality_figure_dir=workspace["root"] / "modality_figures",
        flow_path=workspace["root"] / "decision_flow.json",
        n_examples=n_examples,
    )


@pytest.fixture(scope="module")
def built(workspace, tmp_path_factory) -> tuple[Path, str]:
    index = build(workspace, tmp_path_factory.mktemp("site") / "report")
    return index, index.read_text(encoding="utf-8")


def test_write_figures_writes_every_figure_as_png_and_svg(workspace):
    for spec in figures.FIGURES:
        for fmt in ("png", "svg"):
            assert (workspace["root"] / "figures" / f"{spec.name}.{fmt}").stat().st_size > 1000


def test_an_empty_metric_table_still_gives_a_figure_that_says_so(workspace, tmp_path):
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    for path in (workspace["root"] / "metrics").glob("*.parquet"):
        frame = pl.read_parquet(path)
        (frame.clear() if path.stem == "position_bias" else frame).write_parquet(metrics_dir / path.name)
    paths = figures.write_figures(metrics_dir, tmp_path / "figures")
    assert len(paths) == 2 * len(figures.FIGURES)
    assert b"no data" in (tmp_path / "figures" / "position_bias_sensitivity.svg").read_bytes()


def test_report_shows_every_figure_copied_into_the_folder(built):
    index, page = built
    for spec in figures.FIGURES:
        assert f'src="figures/{spec.name}.png"' in page
        assert f'href="figures/{spec.name}.svg"' in page
        assert (index.parent / "figures" / f"{spec.name}.png").exists()
        assert (index.parent / "figures" / f"{spec.name}.svg").exists()


def test_weak_demo_judge_gets_a_warning_box_and_a_strong_one_does_not(built):
    _, page = built
    warnings = re.findall(r'<div class="warning">(.*?)</div>', page)
    judge_boxes = [w for w in warnings if html.WEAK_JUDGE_WARNING in w]
    assert len(judge_boxes) == 1 and judge_boxes[0].startswith("<strong>minilm:")
    assert any("1 of 2 judges (minilm)" in w for w in warnings)  # the banner at the top
    assert not any("qwen_audio:" in w for w in warnings)


def section(page: str, anchor: str) -> str:
    return re.search(rf'<section id="{anchor}">.*?</section>', page, flags=re.S).group(0)


def test_metric_tables_show_intervals_noise_reference_and_audio_input(built, workspace):
    _, page = built
    cells = pl.read_parquet(workspace["root"] / "metrics" / "cells.parquet")
    row = cells.filter(pl.col("judge") == "minilm", pl.col("modality") == "text", pl.col("transcript_source") == "gt")
    row = row.filter(pl.col("prompt") == "basic").row(0, named=True)
    shown = tables.interval_text(row["mean_safe"], row["mean_safe_lo"], row["mean_safe_hi"])
    assert shown.count("[") == 1 and f"<td>{shown}</td>" in section(page, "cells")
    assert "<td>cascade via whisper_tiny_en</td>" in section(page, "cells")
    deltas = section(page, "deltas")
    assert f"<td>{tables.interval_text(row['delta_5'], row['delta_5_lo'], row['delta_5_hi'])}</td>" in deltas
    bias = section(page, "position-bias")
    assert (
        "<th>noise_<wbr>null</th>" in bias and "<th>p_<wbr>value</th>" in bias and "<th>beyond_<wbr>noise</th>" in bias
    )
    assert f"<td>{tables.cell_text(row['avg_abs_pb_sensitivity_null'])}</td>" in bias
    pareto = section(page, "pareto")
    assert "<th>cv_<wbr>sensitivity</th>" in pareto and "<th>front_<wbr>objectives</th>" in pareto


def test_warning_banners_for_noise_incomplete_cells_and_cascades(built):
    _, page = built
    warnings = re.findall(r'<div class="warning">(.*?)</div>', page)
    # The simulated scores have no position effect: most cells' AvgAbsPB is within noise.
    assert any("within what noise alone" in w for w in warnings)
    assert any("1 cell(s) lack a severity (qwen_audio text/asr:whisper_tiny_en cot)" in w for w in warnings)
    assert any(w.startswith("minilm audio is an ASR cascade (cascade via whisper_tiny_en)") for w in warnings)


def test_weak_judge_reason_is_the_registry_weak_key_never_words_of_the_description():
    assert tables.weak_judge_reason({"backend": "embedding", "model": "x", "weak": "not a language model"}) == (
        "not a language model"
    )
    assert tables.weak_judge_reason({"backend": "transformers", "model": "m", "description": "Random-weight"}) is None
    assert tables.weak_judge_reason({"backend": "openai", "model": "tiny-DEMO-model"}) is None
    assert tables.weak_judge_reason({"backend": "vllm", "model": "Qwen/Qwen2-Audio-7B-Instruct", "weak": None}) is None


def test_findings_section_states_each_finding_of_its_family_and_names_every_family(built, workspace):
    """The sentences come from the guide stage's findings: one per (cell[, category], severity), in its order, after
    one line per family of tests (its size, control and claims), and one caveat per weak judge among them."""
    _, page = built
    section = re.search(r'<section id="findings">.*?</section>', page, flags=re.S).group(0)
    metrics = workspace["root"] / "metrics"
    expected = pl.read_parquet(metrics / "findings.parquet")
    cells = pl.read_parquet(metrics / "cells.parquet")
    recomputed = delta_findings(cells, pl.read_parquet(metrics / "categories.parquet"))
    assert expected.select(recomputed.columns).equals(recomputed)
    assert expected.height > 0 and "minilm" in expected["judge"].to_list()  # the simulated judges react to harm
    families = pl.read_parquet(metrics / "families.parquet")
    assert families["family"].to_list() == ["findings", "categories", "control flags", "modality patterns"]
    items = re.findall(r"<li>(.*?)</li>", section)
    assert items[: families.height] == [escape(tables.family_sentence(row)) for row in families.iter_rows(named=True)]
    findings = items[families.height :]
    assert len(findings) == expected.height
    for item, finding in zip(findings, expected.iter_rows(named=True)):
        assert item.startswith(f"{finding['judge']} ({finding['modality']}, ")
        assert f"Delta_{finding['severity']} = {tables.cell_text(finding['delta'])}, 95 % CI" in item
        assert f"over the {finding['family_size']} tests of its family" in item
    clean = cells.filter(pl.col("condition") == "clean").height
    assert f"of the {clean} clean cells (of {cells.height} cells" in section
    assert section.count("Caveat: minilm is a weak demo model (embedding-similarity baseline") == 1
    assert "Caveat: qwen_audio" not in section


def test_finding_sentences_for_a_drop_and_a_rise():
    finding = dict(zip(engine.CELL_KEYS, ("minilm", "text", "gt", "basic", "clean")))
    finding |= {"severity": 5, "delta": 0.1101, "delta_lo": 0.0591, "delta_hi": 0.1681, "n_dialogues": 24}
    finding |= {"p_value": 0.001, "p_adjusted": 0.004, "family_size": 20}
    assert html.finding_sentence(finding | {"direction": "drop"}) == (
        "minilm (text, gt transcript, basic prompt, clean) scores severity-5 variants 0.110 lower than their safe "
        "originals (Delta_5 = 0.110, 95 % CI 0.059 to 0.168, p = 0.001, adjusted 0.004 over the 20 tests of its "
        "family, 24 dialogues)."
    )
    assert html.finding_sentence(finding | {"direction": "drop", "category": "hate"}).startswith(
        "minilm (text, gt transcript, basic prompt, clean) scores severity-5 hate variants 0.110 lower"
    )
    rise = finding | {
        "transcript_source": "none",
        "delta": -0.2,
        "delta_lo": -0.3,
        "delta_hi": -0.1,
        "direction": "rise",
    }
    assert html.finding_sentence(rise).startswith(
        "minilm (text, no transcript, basic prompt, clean) scores severity-5 variants 0.200 higher (safer) than"
    )


def test_guide_is_rendered_and_written_as_parquet(built, workspace):
    index, page = built
    section = re.search(r'<section id="guide">.*?</section>', page, flags=re.S).group(0)
    written = pl.read_parquet(workspace["root"] / "metrics" / "guide.parquet")
    cells = pl.read_parquet(workspace["root"] / "metrics" / "cells.parquet")
    pareto = pl.read_parquet(workspace["root"] / "metrics" / "pareto.parquet")
    flags = pl.read_parquet(workspace["root"] / "controls" / "flags.parquet")
    comparisons = pl.read_parquet(workspace["root"] / "metrics" / "comparisons.parquet")
    expected = practitioner_guide(cells, pareto, flags=flags, comparisons=comparisons)
    assert written.select(expected.columns).equals(expected)
    assert section.count("<tr>") == expected.height + 1  # header row + one per recommendation
    first = expected.row(0, named=True)
    assert f"<td>{first['judge']}</td>" in section
    assert "weak demo model" in section  # minilm recommendations carry the note


def test_audio_examples_exist_and_match_the_assembled_dialogue(built):
    index, page = built
    sources = re.findall(r'<audio controls preload="none" src="([^"]+)"></audio>', page)
    assert sources == [
        "audio/dlg_alpha.original.wav",
        "audio/dlg_alpha.t0.violence.s5.wav",
        "audio/dlg_beta.original.wav",
        "audio/dlg_beta.t1.violence.s5.wav",  # the second example takes the next severity-5 variant
    ]
    for source in sources:
        info = sf.info(index.parent / source)
        assert info.samplerate == SAMPLE_RATE
    # dlg_alpha original: 0.5 + 0.6 + 0.7 s of turns and two 0.25 s pauses.
    assert sf.info(index.parent / sources[0]).duration == pytest.approx(2.3, abs=1e-3)
    replaced = re.findall(r'<tr class="replaced">(.*?)</tr>', page)
    assert len(replaced) == 2
    assert "UNSAFE LINE 0" in replaced[0] and "unsafe line 0" in replaced[0]
    assert "UNSAFE LINE 1" in replaced[1] and DIALOGUES["dlg_beta"][1] in replaced[1]


def test_tables_for_parse_failures_wer_and_accounting(built, workspace):
    _, page = built
    status = pl.read_parquet(workspace["root"] / "metrics" / "parse_status.parquet")
    cells = pl.read_parquet(workspace["root"] / "metrics" / "cells.parquet")
    joined = status.join(cells, on=list(engine.CELL_KEYS), suffix="_cells")
    assert joined.height == cells.height
    assert joined["refusal_rate"].to_list() == pytest.approx(joined["refusal_rate_cells"].to_list())
    assert joined["parse_failure_rate"].to_list() == pytest.approx(joined["parse_failure_rate_cells"].to_list())
    assert (status["n_rows"] == status["ok"] + status["malformed"] + status["refusal"]).all()

    wer = tables.wer_table(workspace["asr"])
    original = wer.filter(pl.col("turns") == "original").row(0, named=True)
    assert original["transcript_source"] == ASR and original["n_turns"] == 4
    assert original["mean_wer"] == pytest.approx(0.25)
    assert original["audio_weighted_wer"] == pytest.approx(0.375)  # (0 x 1 + 0.5 x 3) / 4 per dialogue
    assert '<section id="wer">' in page and "<td>0.375</td>" in page
    assert "design / naive" in page and '<section id="parsing">' in page


def test_report_is_deterministic(workspace, built, tmp_path):
    index, page = built
    again = build(workspace, tmp_path / "report")
    assert again.read_text(encoding="utf-8") == page
    assert (again.parent / "audio" / "dlg_beta.original.wav").read_bytes() == (
        index.parent / "audio" / "dlg_beta.original.wav"
    ).read_bytes()


def test_figure_rule_and_captions_match_the_figure_list():
    rule_text = (ROOT / "rules" / "report.smk").read_text()
    declared = set(re.findall(r'"results/figures/(\w+)\.(png|svg)"', rule_text))
    assert declared == {(spec.name, fmt) for spec in figures.FIGURES for fmt in ("png", "svg")}
    for spec in figures.FIGURES:
        assert (ROOT / "report" / f"{spec.name}.rst").exists()
    for caption in re.findall(r'caption="\.\./(report/[\w.]+)"', rule_text):
        assert (ROOT / caption).exists(), caption
    assert (ROOT / "report" / "workflow.rst").exists()


def test_the_report_shows_every_control_with_its_interval_and_flags(built):
    index, page = built
    section = page[page.index('<section id="controls">') :]
    section = section[: section.index("</section>")]
    for title in ("Prosody masking", "Noise", "TTS bias", "Audio-use check", "Prompt injection", "Energy and pitch"):
        assert f"<h3>{title}" in section
    assert "Not run" not in section
    for spec in report_controls.CONTROL_FIGURES:
        assert f'src="figures/{spec.name}.png"' in section and (index.parent / "figures" / f"{spec.name}.svg").exists()
    assert "above the same variants without the injection" in section and "ignores the audio" in section


def test_the_flags_name_the_judge_that_ignores_audio_and_the_one_the_injection_moves(workspace):
    """minilm's audio does not move under silence: ignores_audio, shown by equivalence. qwen_audio's injected
    variants score 0.3 higher, an interval well above 0; but on 8 dialogues an exact sign-flip test has no p-value
    below 2 / 256, which Holm's control over the run's 36 checks cannot flag (it used to be flagged with no family
    at all): the verdict says so."""
    flags = pl.read_parquet(workspace["root"] / "controls" / "flags.parquet")
    flagged = flags.filter(pl.col("flagged")).select("judge", "check").unique().sort("check")
    assert flagged.rows() == [("minilm", "ignores_audio")]
    injected = flags.filter(pl.col("judge") == "qwen_audio", pl.col("check") == "injection_susceptible")
    assert (injected["value_lo"] > 0.1).all() and (injected["p_value"] == 2 / 256).all()
    assert set(injected["verdict"]) == {"not flagged: below 5 % alone, not after Holm over the family"}
    assert set(flags["family_size"]) == {flags.height}
    # The TTS control scores exactly like the original: Delta 0, nothing flagged.
    tts = flags.filter(pl.col("check") == "reacts_to_synthesis")
    assert tts.height and tts["value"].abs().max() < 1e-12


def test_the_guide_does_not_recommend_the_cell_that_ignores_audio(workspace):
    guide = pl.read_parquet(workspace["root"] / "metrics" / "guide.parquet")
    # minilm's audio cell is its ASR cascade: a candidate of audio only with the Whisper transcript quality.
    audio_only = guide.filter(pl.col("available_input") == "audio only")
    flagged = audio_only.filter((pl.col("modality") == "audio") & (pl.col("judge") == "minilm"))
    assert flagged.height == 0
    assert any("ignores audio under the silence check: minilm" in (note or "") for note in audio_only["note"])


def test_a_control_that_was_not_run_says_which_condition_to_add(workspace, tmp_path):
    clean = pl.read_parquet(workspace["scores"][0]).filter(pl.col("condition") == "clean")
    clean.write_parquet(tmp_path / "clean.parquet")
    settings = engine.MetricSettings(n_boot=20, seed=0, n_folds=2)
    stage.run_metrics([tmp_path / "clean.parquet"], tmp_path / "metrics", settings)
    controls.run_controls([tmp_path / "clean.parquet"], tmp_path / "metrics", tmp_path / "controls", settings)
    paths = report_controls.write_control_figures(tmp_path / "controls", tmp_path / "figures")
    assert len(paths) == 2 * len(report_controls.CONTROL_FIGURES)
    section = report_controls.controls_section(controls.read_control_tables(tmp_path / "controls"), ())
    for condition in ("masked", "noise_10", "tts_control", "silence", "injection"):
        assert f"Not run: add the condition {condition} to evaluation.conditions" in section


def test_overview_lists_the_prompts_measured_not_the_configured_default():
    """A judge's schedule.prompts replaces evaluation.prompts, so the overview reads the prompts off the cells."""
    cells = pl.DataFrame({"judge": ["j", "j"], "prompt": ["calibrated", "basic"], "condition": ["clean", "clean"]})
    overview = tables.overview_table({"evaluation": {"judges": ["j"], "prompts": ["basic", "rubric"]}}, [], cells)
    assert dict(overview.iter_rows())["prompts"] == "basic, calibrated"


def test_findings_section_without_intervals_or_without_findings_says_so():
    old_tables = pl.DataFrame({"judge": ["j"], "delta_5": [0.3]})
    assert "carry no intervals for Delta_i" in html.findings_section(delta_findings(old_tables), {}, old_tables)
    cells = pl.DataFrame({**dict.fromkeys(engine.CELL_KEYS, ["x"]), "condition": ["clean"], "n_dialogues": [9]})
    cells = cells.with_columns(delta_5=pl.lit(0.01), delta_5_lo=pl.lit(-0.02), delta_5_hi=pl.lit(0.04), delta_5_p=0.4)
    section = html.findings_section(delta_findings(cells), {"x": "weak"}, cells)
    assert "at severities 5 is one test" in section and "within the noise" in section and "Caveat" not in section


def test_values_below_the_minimum_support_are_named_in_one_banner(workspace, tmp_path):
    """The workspace's metrics, recomputed with the default minimum support (10 dialogues, 8 here): every value
    is not estimable, shown as such without interval, no finding is stated, and one banner says why."""
    settings = engine.MetricSettings(n_boot=20, seed=0, n_folds=2, min_pb_dialogues=4, n_permutations=20)
    root = tmp_path / "run"
    metrics = root / "metrics"
    stage.run_metrics(workspace["scores"], metrics, settings)
    controls.run_controls(workspace["scores"], metrics, root / "controls", settings)
    run_guide(root, workspace["root"])
    index = site.build_report(
        metrics_dir=metrics,
        figure_dir=workspace["root"] / "figures",  # the figures do not change what this test reads
        manifest_paths=workspace["manifests"],
        asr_paths=workspace["asr"],
        accounting_path=workspace["accounting"],
        config=CONFIG,
        out_dir=tmp_path / "report",
        controls_dir=root / "controls",
        control_figure_dir=workspace["root"] / "control_figures",
        modality_dir=workspace["root"] / "modality",
        modality_figure_dir=workspace["root"] / "modality_figures",
        flow_path=workspace["root"] / "decision_flow.json",
    )
    page = index.read_text(encoding="utf-8")
    banners = [w for w in re.findall(r'<div class="warning">(.*?)</div>', page) if "Minimum support" in w]
    assert len(banners) == 1
    assert "rest on fewer than 10 dialogues (metrics.min_dialogues)" in banners[0]
    assert "control check(s)" in banners[0]
    assert "(not estimable)" in section(page, "cells")
    assert "No Delta_i survives the control of its family" in section(page, "findings")
    families = pl.read_parquet(metrics / "families.parquet")
    assert families.filter(pl.col("family") == "findings")["size"].item() == 0
    flags = pl.read_parquet(root / "controls" / "flags.parquet")
    assert set(flags["status"].drop_nulls()) == {"not_estimable"} and flags["flagged"].is_null().all()


def test_the_report_build_renders_what_the_metrics_stage_wrote_and_computes_nothing(workspace, tmp_path):
    """Followed call by call: every project function the build runs is of four packages, report and core (the tables
    the metrics stage wrote), manifest and audio (the audio examples), none of analysis: nothing is computed."""
    called: set[str] = set()

    def record(frame, event, arg):
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if module.startswith("lalm_judge."):
                called.add(module.split(".")[1])

    sys.setprofile(record)
    try:
        build(workspace, tmp_path / "report")
    finally:
        sys.setprofile(None)
    assert called == {"report", "core", "manifest", "audio"}


def test_every_panel_of_the_control_and_modality_figures_has_its_legend(workspace, tmp_path, drawn):
    report_controls.write_control_figures(workspace["root"] / "controls", tmp_path / "controls")
    report_modality.write_modality_figures(workspace["root"] / "modality", tmp_path / "modality")
    assert len(drawn) == len(report_controls.CONTROL_FIGURES) + len(report_modality.MODALITY_FIGURES)
    for figure in drawn:
        assert_every_panel_has_its_legend(figure)


def test_the_modality_section_shows_every_judge_its_pattern_and_figure(built, workspace):
    index, page = built
    section = page[page.index('<section id="modality">') :]
    section = section[: section.index("</section>")]
    patterns = pl.read_parquet(workspace["root"] / "modality" / "patterns.parquet")
    assert set(patterns["judge"]) == {"minilm", "qwen_audio"}
    # qwen_audio hears audio with the transcript: its pattern is determined; minilm has no audio_text cell.
    assert patterns.filter(pl.col("judge") == "qwen_audio")["pattern"].is_not_null().all()
    assert "gain_gt of sensitivity is not_measured" in patterns.filter(pl.col("judge") == "minilm")["reason"][0]
    for name in ("gain_gt", f"gain_{ASR}", f"asr_loss_{ASR}", f"rescue_{ASR}", "audio_text_vs_audio_gt"):
        assert f"<td>{name}</td>" in section
    assert (
        'src="figures/modality_effects.png"' in section and (index.parent / "figures" / "modality_effects.svg").exists()
    )
    assert "minilm: weak demo model" in section


def test_the_guide_opens_with_its_decision_flow_and_the_caveat_above_the_table(built, workspace):
    _, page = built
    section = page[page.index('<section id="guide">') :]
    section = section[: section.index("</section>")]
    flow_at, caveat_at, table_at = (
        section.index(s) for s in ('<svg class="flow"', "Caveat.", '<table class="data guide"')
    )
    assert flow_at < caveat_at < table_at
    assert "synthetic speech" in section and "real recordings" in section
    written = json.loads((workspace["root"] / "decision_flow.json").read_text())
    assert section.count('<rect class="leaf') == len(flow.leaves(written))


VIEWPORT = {"width": 1280, "height": 900}


@pytest.fixture(scope="module")
def report_page(built):
    """The built report open in headless chromium at 1280 px (a laptop screen)."""
    from tests.support.browser import CHROMIUM, CHROMIUM_ARGS

    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed: 'make setup' installs it as root ('apt-get install chromium')")
    from playwright.sync_api import sync_playwright

    index, _ = built
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(index.as_uri())
        page.wait_for_load_state("load")
        yield page
        browser.close()


@pytest.mark.browser
@pytest.mark.slow
def test_at_1280_px_the_page_is_no_wider_than_the_screen_and_the_flow_reads(report_page, workspace, tmp_path):
    widths = report_page.evaluate(
        """() => ({
            page: document.documentElement.scrollWidth,
            viewport: window.innerWidth,
            outside: [...document.querySelectorAll('body *')]
                .filter(e => !e.closest('div.table-wrap') && e.getBoundingClientRect().right > window.innerWidth)
                .map(e => e.tagName),
            guide: [...document.querySelectorAll('#guide div.table-wrap')].map(d => d.scrollWidth - d.clientWidth),
        })"""
    )
    assert widths["page"] <= widths["viewport"] == VIEWPORT["width"], widths
    # Nothing but the inside of a table's own scroll box reaches past the screen; the guide table wraps to fit.
    assert widths["outside"] == [] and widths["guide"] == [0], widths
    flow = report_page.locator("#figure-decision-flow")
    box = flow.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= VIEWPORT["width"]
    shot = tmp_path / "decision_flow.png"
    flow.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    # The flow carries the recommendations themselves: one box per guide row, each naming its judge cell and
    # value, or saying that no measured judge takes that input.
    guide = pl.read_parquet(workspace["root"] / "metrics" / "guide.parquet")
    texts = report_page.locator("#figure-decision-flow text.leaf").all_text_contents()
    assert len(texts) == guide.height
    for text, row in zip(texts, guide.iter_rows(named=True)):
        assert (row["judge"] in text) if row["judge"] else ("no measured judge" in text)


def test_the_findings_command_names_every_family_and_prints_each_claim(workspace, tmp_path, capsys):
    """`lalm-judge findings` reads the metrics folder as the workflow lays it out (controls/ and modality/ inside)."""
    import shutil

    from lalm_judge.cli import main as cli

    metrics = tmp_path / "metrics"
    shutil.copytree(workspace["root"] / "metrics", metrics)
    shutil.copytree(workspace["root"] / "controls", metrics / "controls")
    shutil.copytree(workspace["root"] / "modality", metrics / "modality")
    assert cli(["findings", str(metrics)]) == 0
    printed = capsys.readouterr().out.splitlines()
    families = pl.read_parquet(metrics / "families.parquet")
    assert printed[: families.height] == [f"Family {tables.family_sentence(r)}" for r in families.iter_rows(named=True)]
    findings = pl.read_parquet(metrics / "findings.parquet")
    assert sum(line.startswith(("Finding: ", "Category finding: ")) for line in printed) == findings.height
    assert any(line.startswith("Flag: ignores_audio of minilm audio/none") for line in printed)
    assert cli(["findings", str(tmp_path / "nowhere")]) == 2
