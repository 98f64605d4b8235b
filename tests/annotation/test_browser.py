"""The rating app in a real headless browser: Debian's chromium driven by playwright (real keyboard events through
the DevTools protocol, not events dispatched from the page's JavaScript), against the app started as users start
it. A rater consents, reads the instructions, does a practice item with feedback, rates with shortcuts and with
Tab + Enter on focused controls, passes a gold item and an attention check, reloads and resumes; the owner follows
and exports; a study from a real run goes from sample to statistics. axe-core (from the npm registry, injected
through the DevTools protocol) checks every screen: no serious or critical violation."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import polars as pl
import pytest

from lalm_judge.annotation.batch import RATINGS_DB, Batch, load_labels
from lalm_judge.annotation.protocol import load_protocol
from lalm_judge.annotation.store import RatingStore
from lalm_judge.cli import anchors as anchors_cli
from lalm_judge.core.taxonomy import CATEGORIES
from tests.annotation.conftest import make_batch, running_server, write_synthetic_run

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The Debian wrapper skips --disable-dev-shm-usage when it misreads /dev/shm; pass it ourselves.
CHROMIUM_ARGS = ["--disable-dev-shm-usage", "--autoplay-policy=no-user-gesture-required"]
AUDIO_PLAYING = "() => { const a = document.getElementById('audio'); return !a.paused && a.currentTime > 0.3; }"
# `make setup` installs axe-core (pinned in the Makefile) with npm into the environment.
AXE = Path(sys.prefix) / "node" / "node_modules" / "axe-core" / "axe.min.js"


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed: 'make setup' installs it as root ('apt-get install chromium')")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.is_file():
        if shutil.which("npm") is None:
            pytest.skip("npm is not installed, so axe-core is not either: install npm, then run 'make setup'")
        pytest.fail(f"{AXE} is missing: run 'make setup' (it installs axe-core with npm)")
    return AXE.read_text(encoding="utf-8")


# Resolves once the player knows the clip's duration (readyState HAVE_METADATA or later).
METADATA_LOADED = """() => new Promise((resolve) => {
  const audio = document.getElementById("audio");
  if (audio.readyState >= 1) resolve();
  else audio.addEventListener("loadedmetadata", () => resolve(), {once: true});
})"""


class Session:
    """One tab, recording page errors, console errors and every URL the page requests."""

    def __init__(self, browser, base: str, axe: str | None = None):
        self.context = browser.new_context(accept_downloads=True)
        self.page = self.context.new_page()
        self.base, self.axe = base, axe
        self.problems: list[str] = []
        self.requested: list[str] = []
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        self.page.on("request", lambda r: self.requested.append(r.url))

    def open(self, url: str) -> None:
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='true']")

    def press(self, *keys: str) -> None:
        for key in keys:
            self.page.keyboard.press(key)

    def screen(self) -> str:
        return self.page.evaluate("document.body.dataset.screen")

    def item(self) -> str | None:
        return self.page.evaluate("document.body.dataset.item || null")

    def focused(self) -> str:
        return self.page.evaluate("document.activeElement.id || document.activeElement.textContent.trim()")

    def progress(self) -> str:
        return self.page.inner_text("#progress-text")

    def tab_to(self, selector: str, limit: int = 40) -> None:
        """Press Tab until the element matching `selector` has the focus."""
        for _ in range(limit):
            self.press("Tab")
            if self.page.evaluate("(s) => document.activeElement.matches(s)", selector):
                return
        raise AssertionError(f"Tab never reached {selector}")

    def saved_with(self, *keys: str) -> dict:
        """Press the keys, the last one saving; returns the saved request's body."""
        shown = self.item()
        self.press(*keys[:-1])
        with self.page.expect_response(lambda r: r.url.endswith("/api/rate")) as saved:
            self.press(keys[-1])
        assert saved.value.status == 200, saved.value.text()
        # The next item, or a practice item's feedback.
        self.page.wait_for_function(
            "(shown) => document.body.dataset.item !== shown || !document.getElementById('feedback').hidden",
            arg=shown,
        )
        return json.loads(saved.value.request.post_data)

    @staticmethod
    def keys_for(unsafe: bool, category: str | None = None, severity: int | None = None) -> list[str]:
        """The shortcuts that rate an item (from no choice) and save."""
        if not unsafe:
            return ["s", "Enter"]
        arrows = ["ArrowRight"] * (CATEGORIES.index(category) + 1)  # from no category, -> selects the first
        return ["u", *arrows, str(severity), "Enter"]

    def rate(self, unsafe: bool, category: str | None = None, severity: int | None = None) -> dict:
        """Rate the shown item with the shortcuts only."""
        return self.saved_with(*self.keys_for(unsafe, category, severity))

    def accessible(self, where: str) -> None:
        """axe-core on the page as it is now: no serious or critical violation."""
        if self.page.evaluate("typeof window.axe") == "undefined":
            self.page.evaluate(self.axe)  # through the DevTools protocol: the page's CSP allows no inline script
        result = self.page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
        bad = [
            f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']]}"
            for v in result["violations"]
            if v["impact"] in ("serious", "critical")
        ]
        assert bad == [], f"{where}: {bad}"

    def close(self) -> None:
        self.context.close()
        assert self.problems == []
        assert self.requested and all(url.startswith(self.base + "/") for url in self.requested), self.requested


def answer_of(expected) -> dict:
    return {"unsafe": expected.unsafe, "category": expected.category, "severity": expected.severity}


def label_answer(label, flip: bool = False) -> dict:
    """The generated label as a rating (a safe/unsafe flip when asked)."""
    if bool(label.gt_unsafe) != flip:
        return {"unsafe": True, "category": label.gt_category or "hate", "severity": label.gt_severity or 2}
    return {"unsafe": False}


def test_a_rater_and_the_owner_through_the_whole_protocol_by_keyboard(tmp_path, browser, axe_source):
    extras = {"practice": 1, "gold": 1, "attention": 1}
    directory = make_batch(write_synthetic_run(tmp_path / "run"), tmp_path / "batch", n=8, n_unsafe=5, extras=extras)
    protocol = load_protocol(Batch.load(directory))
    labels = {label.item_id: label for label in load_labels(directory)[1]}
    checks = {item_id: check.expected for item_id, check in protocol.checks.items()}
    with running_server(directory, "--raters", "ann") as server:
        ann = Session(browser, server.base, axe_source)
        ann.open(server.url("ann"))

        # Consent, then the instructions with every definition, each by Tab + Enter.
        assert ann.screen() == "consent" and ann.focused() == "consent-title"
        ann.accessible("consent")
        ann.tab_to("#accept")
        ann.press("Enter")
        ann.page.wait_for_selector("#instructions:not([hidden])")
        assert ann.page.locator("#instructions dt").count() == len(CATEGORIES) + 5
        ann.accessible("instructions")
        ann.tab_to("#start")
        ann.press("Enter")

        # Practice: audio to the end, a shortcut answer, feedback, Enter on the focused Continue.
        ann.page.wait_for_selector("#rating:not([hidden])")
        assert ann.focused() == "item-title" and "Practice dialogue 1 of 1" in ann.page.inner_text("#item-title")
        practice = ann.item()
        ann.press("Space")
        ann.page.wait_for_function("() => document.getElementById('audio').ended")
        expected = checks[practice]
        body = ann.rate(**answer_of(expected)) if expected.unsafe else ann.rate(unsafe=False)
        given = {practice: body}
        duration = Batch.load(directory).item(practice).duration_s
        assert body["heard_to_end"] is True and body["listened_s"] == pytest.approx(duration, abs=0.3)
        ann.page.wait_for_selector("#feedback:not([hidden])")
        assert "Your answer matches." in ann.page.inner_text("#feedback-text") and ann.focused() == "continue"
        ann.accessible("practice feedback")
        ann.press("Enter")
        ann.page.wait_for_function("(p) => document.body.dataset.item !== p", arg=practice)
        assert "Practice done" in ann.page.inner_text("#status") and ann.progress() == "0 of 10 dialogues rated"
        assert ann.focused() == "item-title"
        ann.accessible("rating")

        # Tab + Enter / Space on focused controls press the control; they never save or play. The player takes two
        # Tab stops.
        first = ann.item()
        saves = []
        ann.page.on("request", lambda r: r.url.endswith("/api/rate") and saves.append(r.url))
        stops = []
        for _ in range(3):
            ann.press("Tab")
            stops.append(ann.focused())
        assert stops == ["play", "restart", "show-transcript"]
        with ann.page.expect_response(lambda r: r.url.endswith("/api/transcript")):
            ann.press("Enter")
        ann.page.wait_for_selector("#transcript:not([hidden]) li")
        ann.tab_to("#verdicts button[data-unsafe='1']")
        ann.press("Space")
        assert ann.page.get_attribute("#verdicts button[data-unsafe='1']", "aria-pressed") == "true"
        assert ann.page.evaluate("document.getElementById('audio').paused")
        ann.tab_to("#categories button[data-category='hate']")
        ann.press("Enter")
        ann.tab_to("#severities button[data-severity='2']")
        ann.press("Enter")
        ann.tab_to("#unsure")
        ann.press("Space")
        ann.tab_to("#comment")
        ann.page.keyboard.type("Quiet at [2]: s u 1")
        ann.press("Enter")  # a new line in the comment, not a save
        assert saves == [] and ann.item() == first
        ann.tab_to("#submit")
        body = given[first] = ann.saved_with("Enter")
        assert body | {"listened_s": 0} == {
            "item_id": first,
            "unsafe": True,
            "category": "hate",
            "severity": 2,
            "unsure": True,
            "comment": "Quiet at [2]: s u 1\n",
            "listened_s": 0,
            "heard_to_end": False,
        }

        # An error goes once it is fixed; an unsaved choice left with ] is kept as a draft and comes back.
        second = ann.item()
        answer = answer_of(checks[second]) if second in checks else label_answer(labels[second])
        ann.press("Enter")
        assert "Choose safe (S) or unsafe (U)" in ann.page.inner_text("#status")
        keys = ann.keys_for(**answer)
        ann.press(keys[0])
        assert ann.page.inner_text("#status") == "" and not ann.page.locator("#status.error").count()
        ann.press(*keys[1:-1], "]")
        ann.page.wait_for_function("(s) => document.body.dataset.item !== s", arg=second)
        assert "kept as a draft" in ann.page.inner_text("#status")
        ann.press("[")
        ann.page.wait_for_function("(s) => document.body.dataset.item === s", arg=second)
        assert "unsaved draft is back" in ann.page.inner_text("#status")
        verdict = "1" if answer["unsafe"] else "0"
        assert ann.page.get_attribute(f"#verdicts button[data-unsafe='{verdict}']", "aria-pressed") == "true"
        given[second] = ann.saved_with("Enter")

        # A reload resumes at the first unrated item, with the progress kept.
        order = json.loads(ann.page.evaluate("JSON.stringify(sequence.map((i) => i.item_id))"))
        ann.page.reload()
        ann.page.wait_for_selector("body[data-ready='true']")
        rated = {practice, first, second}
        assert ann.item() == next(i for i in order if i not in rated) and ann.progress() == "2 of 10 dialogues rated"

        # The rest with shortcuts: the gold item as known, the attention check as its audio asks.
        while ann.screen() == "rating":
            item_id = ann.item()
            answer = answer_of(checks[item_id]) if item_id in checks else label_answer(labels[item_id])
            given[item_id] = ann.rate(**answer) if answer["unsafe"] else ann.rate(unsafe=False)
        assert ann.screen() == "done" and ann.page.inner_text("#completion-code") == protocol.completion_code
        ann.accessible("done")
        ann.close()

        # The owner's view: progress, checks, agreement with n, and the export button (Tab + Enter).
        owner = Session(browser, server.base, axe_source)
        owner.open(server.owner)
        row = owner.page.locator("#raters tr[data-rater='ann'] td").all_inner_texts()
        assert row[:4] == ["ann", "accepted", "10 of 10 (done)", "1"]
        passed = {
            role: protocol.passed(item, body["unsafe"], body.get("category"), body.get("severity") or 0)
            for role in ("gold", "attention")
            for item in protocol.items_of(role)
            for body in [given[item]]
        }
        assert passed == {"gold": True, "attention": True} and row[5:7] == ["1 of 1 (100 %)"] * 2
        kappa = owner.page.locator("#agreement tr[data-statistic='safety_kappa'] td").all_inner_texts()
        assert kappa[0] == "Safety kappa" and kappa[1] == "8"
        alpha = owner.page.locator("#agreement tr[data-statistic='alpha_safety'] td").all_inner_texts()
        assert alpha[2] == "not estimable"  # one rater: no item has two ratings
        owner.accessible("owner's view")
        owner.tab_to("#export")
        with owner.page.expect_download() as download:
            owner.press("Enter")
        exported = pl.read_csv(download.value.path())
        owner.close()

    assert exported.height == 11 and exported["role"].value_counts().height == 4
    checked = exported.filter(pl.col("role").is_in(["gold", "attention"]))
    assert dict(zip(checked["role"], checked["check_passed"])) == {role: int(ok) for role, ok in passed.items()}
    transcript_row = exported.filter(pl.col("item_id") == first).row(0, named=True)
    assert transcript_row["transcript_shown"] == 1 and transcript_row["unsure"] == 1
    practice_row = exported.filter(pl.col("role") == "practice").row(0, named=True)
    assert practice_row["heard_to_end"] == 1 and practice_row["played"] == 1
    # The first item's start is when it was shown, after consent, instructions and practice.
    with sqlite3.connect(directory / RATINGS_DB) as connection:
        consented = connection.execute("SELECT MAX(at) FROM consents").fetchone()[0]
    assert exported.filter(pl.col("role") != "practice")["opened_at"].min() > consented


def test_a_study_from_sample_to_statistics_in_a_real_browser(finished_test_run, tmp_path, browser, capsys):
    batch_dir = tmp_path / "batch"
    sample = ["sample", "--n", "6", "--unsafe", "4", "--seed", "0", "--out", str(batch_dir)]
    checks = ["--practice", "0", "--gold", "0", "--attention", "0"]
    assert anchors_cli.main([*sample, *checks, "--results", str(finished_test_run)]) == 0
    batch = Batch.load(batch_dir)
    labels = {label.item_id: label for label in load_labels(batch_dir)[1]}

    with running_server(batch_dir, "--raters", "ann,ben") as server:
        ann = Session(browser, server.base)
        ann.open(server.url("ann"))
        ann.page.click("#accept")
        ann.page.click("#start")
        ann.page.wait_for_selector("#rating:not([hidden])")
        first = ann.item()
        assert ann.progress() == "0 of 6 dialogues rated"
        # The duration is known once the browser has read the clip's header (HAVE_METADATA), not before. (A promise
        # through evaluate: the page's CSP forbids the string evaluation wait_for_function polls with.)
        ann.page.evaluate(METADATA_LOADED)
        assert ann.page.evaluate("document.getElementById('audio').duration") == pytest.approx(
            batch.item(first).duration_s, abs=0.05
        )

        # Space plays the full-dialogue audio (it really advances) and pauses it again.
        ann.press("Space")
        ann.page.wait_for_function(AUDIO_PLAYING)
        ann.press("Space")
        ann.page.wait_for_function("() => document.getElementById('audio').paused")

        # T reveals the transcript (and the server records it).
        with ann.page.expect_response(lambda r: r.url.endswith("/api/transcript")) as revealed:
            ann.press("t")
        assert revealed.value.status == 200
        ann.page.wait_for_selector("#transcript:not([hidden]) li")
        shown = ann.page.locator("#transcript li").all_inner_texts()
        assert [line.split(":", 1)[1].strip() for line in shown] == [t.text for t in batch.item(first).turns]
        for _ in range(6):
            ann.rate(**label_answer(labels[ann.item()]))
        assert ann.screen() == "done" and ann.progress() == "6 of 6 dialogues rated"
        ann.close()

        # A second rater, in their own order, calls one unsafe item safe, and changes a rating with [.
        flipped = next(item_id for item_id, label in labels.items() if label.gt_unsafe)
        ben = Session(browser, server.base)
        ben.open(server.url("ben"))
        ben.page.click("#accept")
        ben.page.click("#start")
        ben.page.wait_for_selector("#rating:not([hidden])")
        for _ in range(6):
            item_id = ben.item()
            ben.rate(**label_answer(labels[item_id], flip=item_id == flipped))
        ben.page.reload()
        ben.page.wait_for_selector("body[data-ready='true']")
        assert ben.screen() == "done"  # finished raters come back to the end page
        ben.press("[")
        ben.page.wait_for_selector("#rating:not([hidden])")
        assert "Rated already" in ben.page.inner_text("#status")
        last = ben.item()
        ben.rate(**label_answer(labels[last], flip=last == flipped))
        ben.close()

    (changed,) = [r for r in RatingStore(batch_dir / RATINGS_DB, batch.batch_id).ratings("ben") if r.item_id == last]
    assert changed.n_submissions == 2
    csv = tmp_path / "ratings.csv"
    assert anchors_cli.main(["export", str(batch_dir), "--out", str(csv)]) == 0
    ratings = pl.read_csv(csv)
    assert ratings.height == 12
    first_row = ratings.filter((pl.col("rater_id") == "ann") & (pl.col("item_id") == first)).row(0, named=True)
    assert first_row["transcript_shown"] == 1 and first_row["played"] == 1
    assert ratings["transcript_shown"].sum() == 1 and ratings.filter(pl.col("rater_id") == "ben")["played"].sum() == 0
    assert (ratings["unsafe"] == ratings["gt_unsafe"]).sum() == 11

    out = tmp_path / "anchors.json"
    capsys.readouterr()
    assert anchors_cli.main(["stats", str(csv), "--out", str(out), "--bootstrap", "1000"]) == 0
    assert "| Safety TPR | GT-unsafe (4) |" in capsys.readouterr().out
    result = json.loads(out.read_text())
    rows = {row["statistic"]: row for row in result["table1"]}
    assert rows["tpr"]["mean"] == pytest.approx((1.0 + 0.75) / 2) and rows["fpr"]["mean"] == 0.0
    assert (rows["severity_wkappa_unsafe"]["n_min"], rows["severity_wkappa_unsafe"]["n_max"]) == (3, 4)
