"""The rating app in a real headless browser: Debian's chromium driven by playwright, against the app started
as users start it. Raters play the audio, reveal a transcript, rate with the keyboard, reload and resume; the
ratings are then exported and their statistics computed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from lalm_judge.annotation.app import rater_order
from lalm_judge.annotation.batch import RATINGS_DB, Batch, load_labels
from lalm_judge.annotation.store import RatingStore
from lalm_judge.cli import anchors as anchors_cli
from lalm_judge.core.taxonomy import CATEGORIES
from tests.annotation.conftest import running_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The Debian wrapper skips --disable-dev-shm-usage when it misreads /dev/shm; pass it ourselves.
CHROMIUM_ARGS = ["--disable-dev-shm-usage", "--autoplay-policy=no-user-gesture-required"]
AUDIO_PLAYING = "() => { const a = document.getElementById('audio'); return !a.paused && a.currentTime > 0.3; }"


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed: 'make setup' installs it as root ('apt-get install chromium')")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


class Session:
    """One rater's browser tab, recording page errors, console errors and every URL the page requests."""

    def __init__(self, browser, base: str):
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.base = base
        self.problems: list[str] = []
        self.requested: list[str] = []
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        self.page.on("request", lambda r: self.requested.append(r.url))

    def open(self, url: str) -> None:
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='true']")

    def item(self) -> str | None:
        return self.page.evaluate("document.body.dataset.item || null")

    def progress(self) -> str:
        return self.page.inner_text("#progress-text")

    def rate(self, unsafe: bool, category: str | None = None, severity: int | None = None) -> None:
        """Rate the shown item with the keyboard only and wait for the next item (or the end)."""
        shown = self.item()
        if unsafe:
            self.page.keyboard.press("u")
            for _ in range(CATEGORIES.index(category) + 1):  # from no category, -> selects the first
                self.page.keyboard.press("ArrowRight")
            self.page.keyboard.press(str(severity))
        else:
            self.page.keyboard.press("s")
        with self.page.expect_response(lambda r: r.url.endswith("/api/rate")) as saved:
            self.page.keyboard.press("Enter")
        assert saved.value.status == 200, saved.value.text()
        self.page.wait_for_function("(shown) => document.body.dataset.item !== shown", arg=shown)

    def close(self) -> None:
        self.context.close()
        assert self.problems == []
        assert self.requested and all(url.startswith(self.base + "/") for url in self.requested), self.requested


def answer(label, flip: bool = False) -> dict:
    """The generated label as a rating (a safe/unsafe flip when asked)."""
    if bool(label.gt_unsafe) != flip:
        return {"unsafe": True, "category": label.gt_category or "hate", "severity": label.gt_severity or 2}
    return {"unsafe": False}


def test_a_study_from_sample_to_statistics_in_a_real_browser(finished_test_run, tmp_path, browser, capsys):
    batch_dir = tmp_path / "batch"
    sample = ["sample", "--n", "6", "--unsafe", "4", "--seed", "0", "--out", str(batch_dir)]
    assert anchors_cli.main([*sample, "--results", str(finished_test_run)]) == 0
    batch = Batch.load(batch_dir)
    labels = {label.item_id: label for label in load_labels(batch_dir)[1]}
    order = [item.item_id for item in rater_order(batch, "ann")]

    with running_server(batch_dir, "--raters", "ann,ben") as server:
        ann = Session(browser, server.base)
        ann.open(server.url("ann"))
        assert ann.item() == order[0] and ann.progress() == "0 of 6 dialogues rated"
        assert ann.page.evaluate("document.getElementById('audio').duration") == pytest.approx(
            batch.item(order[0]).duration_s, abs=0.05
        )

        # Space plays the full-dialogue audio (it really advances) and pauses it again.
        ann.page.keyboard.press("Space")
        ann.page.wait_for_function(AUDIO_PLAYING)
        ann.page.keyboard.press("Space")
        ann.page.wait_for_function("document.getElementById('audio').paused")

        # T reveals the transcript (and the server records it).
        assert not ann.page.is_visible("#transcript")
        with ann.page.expect_response(lambda r: r.url.endswith("/api/transcript")) as revealed:
            ann.page.keyboard.press("t")
        assert revealed.value.status == 200
        ann.page.wait_for_selector("#transcript:not([hidden]) li")
        shown = ann.page.locator("#transcript li").all_inner_texts()
        assert [line.split(":", 1)[1].strip() for line in shown] == [t.text for t in batch.item(order[0]).turns]

        ann.rate(**answer(labels[order[0]]))
        ann.rate(**answer(labels[order[1]]))
        assert ann.progress() == "2 of 6 dialogues rated"

        # Incomplete answers are refused on the page, before anything is sent.
        ann.page.keyboard.press("Enter")
        assert "Choose safe (S) or unsafe (U)" in ann.page.inner_text("#status")
        ann.page.keyboard.press("u")
        ann.page.keyboard.press("Enter")
        assert "needs a category" in ann.page.inner_text("#status")

        # A reload resumes at the first unrated item, with the progress kept.
        ann.page.reload()
        ann.page.wait_for_selector("body[data-ready='true']")
        assert ann.item() == order[2] and ann.progress() == "2 of 6 dialogues rated"
        for item_id in order[2:]:
            ann.rate(**answer(labels[item_id]))
        assert ann.page.is_visible("#done") and ann.progress() == "6 of 6 dialogues rated"
        ann.close()

        # A second rater, in their own order, calls one unsafe item safe.
        flipped = next(item_id for item_id, label in labels.items() if label.gt_unsafe)
        ben = Session(browser, server.base)
        ben.open(server.url("ben"))
        for _ in range(6):
            item_id = ben.item()
            ben.rate(**answer(labels[item_id], flip=item_id == flipped))
        assert ben.page.is_visible("#done")
        ben.page.reload()
        ben.page.wait_for_selector("body[data-ready='true']")
        assert ben.page.is_visible("#done")  # finished raters come back to the end page
        ben.close()

    csv = tmp_path / "ratings.csv"
    assert anchors_cli.main(["export", str(batch_dir), "--out", str(csv)]) == 0
    ratings = pl.read_csv(csv)
    assert ratings.height == 12
    first = ratings.filter((pl.col("rater_id") == "ann") & (pl.col("item_id") == order[0])).row(0, named=True)
    assert first["transcript_shown"] == 1 and first["played"] == 1
    assert ratings["transcript_shown"].sum() == 1 and ratings.filter(pl.col("rater_id") == "ben")["played"].sum() == 0
    assert (ratings["unsafe"] == ratings["gt_unsafe"]).sum() == 11

    out = tmp_path / "anchors.json"
    capsys.readouterr()
    assert anchors_cli.main(["stats", str(csv), "--out", str(out), "--bootstrap", "100"]) == 0
    assert "| Safety TPR | GT-unsafe (4) |" in capsys.readouterr().out
    result = json.loads(out.read_text())
    rows = {row["statistic"]: row for row in result["table1"]}
    assert rows["tpr"]["mean"] == pytest.approx((1.0 + 0.75) / 2) and rows["fpr"]["mean"] == 0.0
    assert (rows["severity_wkappa_unsafe"]["n_min"], rows["severity_wkappa_unsafe"]["n_max"]) == (3, 4)


def test_going_back_shows_and_replaces_a_rating(batch, browser):
    with running_server(batch, "--raters", "ann") as server:
        ann = Session(browser, server.base)
        ann.open(server.url("ann"))
        first = ann.item()
        ann.rate(unsafe=False)
        ann.page.keyboard.press("[")
        ann.page.wait_for_function("(first) => document.body.dataset.item === first", arg=first)
        assert ann.page.get_attribute("#verdicts button[data-unsafe='0']", "aria-pressed") == "true"
        assert "Rated already" in ann.page.inner_text("#status")
        ann.rate(unsafe=True, category="violence", severity=4)
        ann.close()
    (rating,) = RatingStore(batch / RATINGS_DB, Batch.load(batch).batch_id).ratings("ann")
    assert (rating.item_id, rating.category, rating.severity, rating.n_submissions) == (first, "violence", 4, 2)
