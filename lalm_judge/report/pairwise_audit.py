"""The pairwise report's audit section: per judge cell and audit condition the cue preference (the shift in the
probability of choosing the changed response), its value with the changed response shown first and second, the
flip rate, the Tie share (on identical pairs the only right verdict), each with its 95 % interval, a verdict per
row (flagged when the headline test rejects its no-effect value after Holm's correction over the run's cells and
conditions) with its adjusted p-value, and one figure of the headline measures.
Read from the metrics stage's audit table (`lalm_judge.pairwise.audit_metrics`); empty without conditions."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from lalm_judge.pairwise.audit_metrics import audit_verdict  # noqa: E402
from lalm_judge.report.figures import save_figure  # noqa: E402
from lalm_judge.report.html import html_table, paragraph, section  # noqa: E402
from lalm_judge.report.tables import MISSING, interval_text  # noqa: E402

AUDIT_FIGURE = "audit_cue_preference"
NAVIGATION_ENTRY = ("audit", "Surface-cue audit")
SHOWN = (
    ("cue_preference", "cue preference"),
    ("cue_preference_first", "changed shown first"),
    ("cue_preference_second", "changed shown second"),
    ("flip_rate", "flip rate"),
    ("tie_share", "Tie share"),
)
CELL = ("judge", "modality", "transcript_source", "prompt")


def _cell(row: dict[str, Any]) -> str:
    return f"{row['judge']} · {row['modality']}-{row['transcript_source']} · {row['prompt']}"


def audit_display(audit: pl.DataFrame) -> pl.DataFrame:
    """One row per (cell, condition): the verdict, n, items and every measure as 'value [low, high]'."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for record in audit.iter_rows(named=True):
        row = rows.setdefault(
            (_cell(record), record["condition"]), {"cell": _cell(record), "condition": record["condition"]}
        )
        row[record["measure"]] = interval_text(record["value"], record["ci_low"], record["ci_high"], record["status"])
        if record["flagged"] is not None:
            adjusted = MISSING if record["p_adjusted"] is None else f"{record['p_adjusted']:.3g}"
            row.update(
                verdict=audit_verdict(record), p_holm=adjusted, n=str(record["n"]), n_items=str(record["n_items"])
            )
    columns = ["cell", "condition", "verdict", "p_holm", "n", "n_items", *[name for name, _ in SHOWN]]
    frame = pl.DataFrame(
        [{c: row.get(c, MISSING) for c in columns} for row in rows.values()], schema=dict.fromkeys(columns, pl.String)
    )
    return frame.rename({**dict(SHOWN), "p_holm": "Holm-adjusted p"})


def plot_audit(audit: pl.DataFrame, stem: str | os.PathLike) -> list[Path]:
    """The headline measure of every (cell, condition) with its interval: cue preference (0 = no effect) and,
    on identical pairs, the Tie share (1 = always abstains), in two panels."""
    headline = audit.filter(pl.col("flagged").is_not_null())
    figure, axes = plt.subplots(1, 2, figsize=(9, max(2.5, 0.35 * headline.height + 1.5)), sharey=True)
    labels = [f"{_cell(r)} | {r['condition']}" for r in headline.iter_rows(named=True)]
    y = np.arange(len(labels))
    for axis, measure, reference, title in (
        (axes[0], "cue_preference", 0.0, "cue preference (shift toward the changed response)"),
        (axes[1], "tie_share", 1.0, "Tie share on identical pairs"),
    ):
        mask = (headline["measure"] == measure).to_numpy()
        value = headline["value"].fill_null(np.nan).to_numpy()[mask]
        low = headline["ci_low"].fill_null(np.nan).to_numpy()[mask]
        high = headline["ci_high"].fill_null(np.nan).to_numpy()[mask]
        error = np.nan_to_num(np.abs(np.vstack([value - low, high - value])))
        colors = ["tab:red" if f else "tab:blue" for f in headline["flagged"].to_numpy()[mask]]
        axis.errorbar(value, y[mask], xerr=error, fmt="none", ecolor="grey", capsize=2)
        axis.scatter(value, y[mask], c=colors, zorder=3)
        axis.axvline(reference, color="black", linewidth=0.8)
        axis.set_title(title, fontsize="small")
    axes[0].set_xlim(-1.05, 1.05)
    axes[1].set_xlim(-0.05, 1.05)
    axes[0].set_yticks(y, labels, fontsize="x-small")
    return save_figure(figure, stem)


def audit_section(audit: pl.DataFrame, figure: str | None) -> str:
    """The section's HTML: what it measures, the figure (red: flagged) and the table."""
    intro = paragraph(
        "One response of each pair changed in a surface property only (pairwise.conditions: louder, padded with "
        "silence, faster, repeated, another voice, or the same clip as both responses), once response 1 and once "
        "response 2, each judged in both orders. Cue preference: the shift in the probability of choosing the "
        "changed response against the clean verdicts of the same items and orders (0 = no effect); flagged when its "
        "bootstrap test rejects 0 at 5 % after Holm's correction over every cell and condition of the run (one "
        "family), surviving the swap when its intervals with the changed response shown first and shown second "
        "both exclude 0. On identical pairs Tie is the only right verdict: flagged when the test rejects a Tie "
        "share of 1 (the share among readable answers; a cell without any has no readable verdict). Intervals and "
        "tests: bootstrap over items (docs/metrics.md, Pairwise audit)."
    )
    if audit.height == 0:
        return section(*NAVIGATION_ENTRY, intro, paragraph("This run has no audit conditions (pairwise.conditions)."))
    image = ""
    if figure:
        image = (
            f'<figure id="figure-{figure}"><img src="figures/{figure}.png" alt="surface-cue audit">'
            "<figcaption><strong>Surface-cue audit.</strong> Headline measure per judge cell and condition with its "
            f'95 % interval; red = flagged. <a href="figures/{html.escape(figure)}.svg">SVG</a></figcaption></figure>'
        )
    return section(*NAVIGATION_ENTRY, intro, image, html_table(audit_display(audit)))
