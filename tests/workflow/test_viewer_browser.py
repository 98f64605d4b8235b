"""The sample viewers in a real headless browser (Debian's chromium driven by playwright), opened from file://
as users open them, on the finished test workflows: the safety track's (tests/config/test.yaml: the demo's
stages, judges and controls on two demo dialogues) and the pairwise track's (tests/config/pairwise.yaml).

From the report's tables to the samples: filter to one status, open a sample with the keyboard, play its dialogue
from the changed turn, read every cell's raw answer and score as the score tables hold them, switch to its masked
version; for a pairwise item, hear the responses in both orders and read every cell's answers in both orders.
Every page passes axe-core without a serious or critical violation, logs no error and requests nothing but files.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from lalm_judge.core.tables import PAIRWISE_PREDICTIONS, SCORES
from tests.support.axe import assert_accessible
from tests.support.browser import RecordedTab, launched_chromium

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.workflow]

READY = "body[data-ready='true']"
# The view is drawn for the address shown (after a filter, a link or a version changed it).
DRAWN = "() => document.body.dataset.ready === 'true' && document.body.dataset.shown === location.hash"
PLAYING = "(id) => { const a = document.getElementById(id); return !a.paused && a.currentTime > 0.2; }"
ANSWERS = """() => [...document.querySelectorAll('#answers tbody tr')].map(
    (tr) => ({cell: tr.dataset.cell, cells: [...tr.children].map((td) => td.textContent)}))"""
HEADERS = "() => [...document.querySelectorAll('#answers thead th')].map((th) => th.textContent)"


@pytest.fixture(scope="module")
def browser():
    with launched_chromium() as launched:
        yield launched


class Tab(RecordedTab):
    """A tab on a report and its viewer (file:// only)."""

    def follow(self, selector: str) -> None:
        """Click a link of the report into the viewer and wait until the view is drawn."""
        self.page.click(selector)
        self.page.wait_for_selector(READY)
        self.drawn()

    def drawn(self) -> None:
        self.page.wait_for_function(DRAWN)

    def choose(self, name: str, value: str) -> None:
        """Choose a filter's value and wait for the list drawn with it."""
        self.page.select_option(f"select[name='{name}']", value)
        self.drawn()

    def answers(self) -> dict[str, dict[str, str]]:
        headers = self.page.evaluate(HEADERS)
        return {row["cell"]: dict(zip(headers, row["cells"])) for row in self.page.evaluate(ANSWERS)}

    def open_first(self, view: str) -> str:
        """Open the list's first row with the keyboard (focus its link, Enter); return its name."""
        first = self.page.locator("#list-view tbody a").first
        name = first.inner_text()
        first.focus()
        self.page.keyboard.press("Enter")
        self.page.wait_for_selector(f"#{view}-view[data-{view}='{name}']")
        self.drawn()
        return name

    def close(self) -> None:
        self.close_checked(lambda url: url.startswith("file://"))


def shown_score(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def shown_answer(raw: str | None) -> str:
    if raw is None:
        return "–"
    return raw if raw.strip() else f"(blank: {len(raw)} whitespace character{'s' if len(raw) != 1 else ''})"


def score_rows(workdir: Path, sample: str, condition: str) -> dict[str, dict]:
    """The score rows of one sample under one condition, by the viewer's cell name."""
    tables = sorted((workdir / "results" / "scores").glob(f"*/shard*/*/*/{condition}.parquet"))
    rows = SCORES.read(tables).filter(pl.col("variant_id") == sample)
    return {
        f"{r['judge']}/{r['modality']}-{r['transcript_source']}/{r['prompt']}/{r['condition']}": r
        for r in rows.iter_rows(named=True)
    }


def check_answers(tab: Tab, expected: dict[str, dict]) -> None:
    shown = tab.answers()
    assert set(shown) == set(expected)
    for cell, row in expected.items():
        assert shown[cell]["Score"] == shown_score(row["score"]), cell
        assert shown[cell]["Status"] == row["parse_status"], cell
        assert shown[cell]["Raw answer"] == shown_answer(row["raw_output"]), cell


def test_safety_viewer_from_the_report_to_a_sample_and_its_masked_version(finished_run, browser):
    workdir, configfile = finished_run
    control_dialogue = yaml.safe_load(Path(configfile).read_text())["controls"]["dialogues"][0]
    tab = Tab(browser)
    page = tab.page
    page.goto((workdir / "results" / "report" / "index.html").as_uri())  # the report, as users open it
    # The metrics table links each cell to its samples; take the MiniLM audio cell (a cascade: it has controls).
    tab.follow("#cells a[href*='judge=minilm'][href*='modality=audio'][href*='condition=clean']")
    assert (
        page.input_value("select[name='judge']") == "minilm" and page.input_value("select[name='modality']") == "audio"
    )
    assert_accessible(page, "the sample list")

    # Filter to one status: every row shown has it, and they are all the cell's rows with it (pages of 50).
    cell = "minilm/audio-none/basic/clean"
    judge, label = cell.split("/", 1)  # its tables: one per shard, in the folder of the judge's job of that shard
    table = SCORES.read(sorted((workdir / "results" / "scores" / judge).glob(f"shard*/{label}.parquet")))
    tab.choose("status", "ok")
    statuses = page.locator("#list-view tbody td:nth-child(7)").all_inner_texts()
    expected = table.filter(pl.col("parse_status") == "ok").height
    assert statuses == ["ok"] * min(expected, 50)
    assert page.inner_text("#list-view caption") == f"{expected} rows from 1 judge cell"

    # Narrow to severity 5 of a dialogue the controls were run on, largest drop first, and open the first sample
    # with the keyboard.
    tab.choose("dialogue", control_dialogue)
    tab.choose("severity", "5")
    tab.choose("sort", "drop_desc")
    sample = tab.open_first("sample")
    assert page.evaluate("document.activeElement.id") == "sample-title"
    turn = int(sample.split(".")[1][1:])
    assert page.get_attribute(f"#player li[data-turn='{turn}']", "class") == "changed"

    # C plays the dialogue from the changed turn: the variant's own clip, really advancing.
    page.keyboard.press("c")
    page.wait_for_function(PLAYING, arg="player-audio")
    assert page.get_attribute("#player", "data-turn") == str(turn)
    assert page.evaluate("document.getElementById('player-audio').src").endswith(f"/{sample}.wav")
    page.keyboard.press("p")
    page.wait_for_function("document.getElementById('player-audio').paused")

    # Every cell's raw answer, score and status, as the score tables hold them.
    check_answers(tab, score_rows(workdir, sample, "clean"))
    assert_accessible(page, f"the sample page of {sample}")

    # Switch to the masked version with the arrow keys of the version choice.
    page.focus("#versions input:checked")
    for _ in range(page.locator("#versions input").count()):
        if page.get_attribute("#sample-view", "data-version").startswith("masked/"):
            break
        page.keyboard.press("ArrowRight")
        tab.drawn()
    assert page.get_attribute("#sample-view", "data-version") == f"masked/{sample}"
    check_answers(tab, score_rows(workdir, sample, "masked"))
    page.click("#player .from-changed")
    page.wait_for_function(PLAYING, arg="player-audio")
    masked = page.evaluate("document.getElementById('player-audio').src")
    assert masked.endswith(f"/samples/audio/masked/{sample.split('.')[0]}/{sample}.mp3")
    assert_accessible(page, f"the masked version of {sample}")
    tab.close()


def test_pairwise_viewer_shows_an_item_in_both_orders(finished_pairwise_run, browser):
    workdir, _, _ = finished_pairwise_run
    tab = Tab(browser)
    page = tab.page
    page.goto((workdir / "results" / "pairwise" / "report" / "index.html").as_uri())
    tab.follow("#aspects a[href*='judge=tiny_qwen2_audio'][href*='aspect=helpfulness']")
    assert page.input_value("select[name='aspect']") == "helpfulness"
    assert_accessible(page, "the item list")

    predictions = PAIRWISE_PREDICTIONS.read(
        sorted((workdir / "results" / "pairwise" / "predictions").rglob("*.parquet"))
    )
    keys = ("judge", "modality", "transcript_source", "prompt", "aspect")
    listed = predictions.filter(*(pl.col(k) == page.input_value(f"select[name='{k}']") for k in keys))
    status = listed["verdict_swapped_status"].sort()[0]
    tab.choose("order", "verdict_swapped")
    tab.choose("status", status)
    shown = page.locator("#list-view tbody td:nth-child(8)").all_inner_texts()
    expected = listed.filter(pl.col("verdict_swapped_status") == status).height
    assert shown == [status] * min(expected, 50)
    assert page.inner_text("#list-view caption") == f"{expected} row{'s' if expected != 1 else ''} from 1 judge cell"

    item = tab.open_first("item")

    # 2 plays the responses swapped, as the judge heard the second request: response 2 first.
    page.keyboard.press("2")
    page.wait_for_function(PLAYING, arg="order-21-audio")
    assert page.get_attribute("#order-21", "data-turn") == "1"
    items = pl.read_parquet(workdir / "results" / "pairwise" / "items.parquet").filter(pl.col("item_id") == item)
    assert page.evaluate("document.getElementById('order-21-audio').src").endswith(items["response2_audio"][0])
    page.keyboard.press("p")
    page.wait_for_function("document.getElementById('order-21-audio').paused")

    # Every cell's answers in both orders, with the verdicts read from them.
    rows = page.evaluate(ANSWERS)
    headers = page.evaluate(HEADERS)
    # The list's link keeps its aspect; the item page shows every aspect on request.
    expected = predictions.filter((pl.col("item_id") == item) & (pl.col("aspect") == "helpfulness"))
    assert len(rows) == expected.height
    shown_rows = {(r["cell"], dict(zip(headers, r["cells"]))["Aspect"]): dict(zip(headers, r["cells"])) for r in rows}
    for row in expected.iter_rows(named=True):
        cell = f"{row['judge']}/{row['modality']}-{row['transcript_source']}/{row['prompt']}"
        shown_row = shown_rows[(cell, row["aspect"])]
        assert shown_row["Answer (1, 2)"] == shown_answer(row["prediction"])
        assert shown_row["Answer (2, 1)"] == shown_answer(row["prediction_swapped"])
        assert shown_row["Status (1, 2)"] == row["verdict_status"]
        assert shown_row["Status (2, 1)"] == row["verdict_swapped_status"]
        assert shown_row["Verdict (2, 1)"] == (row["verdict_swapped"] or "–")
    assert_accessible(page, f"the item page of {item}")
    tab.choose("f-item-aspect", "")
    assert len(page.evaluate(ANSWERS)) == predictions.filter(pl.col("item_id") == item).height
    tab.close()
