"""The rating app in a real headless browser: Debian's chromium driven by playwright (real keyboard, mouse and touch
events through the DevTools protocol, not events dispatched from the page's JavaScript), against the app started as
users start it, at 1280 x 800 with keyboard and mouse and at 390 x 844 with touch. One study and one server serve
the module's raters. At 1280 x 800 a rater consents, takes the headphone check, reads the instructions, does a
practice item with feedback, finds Save waiting until the audio was heard, rates with the mouse and with
shortcuts that act the same wherever the focus is (after a click on Play, Enter saves), keeps a draft across a
reload, types shortcut letters into the comment, fails an attention check and gets the screen-out code with the
debrief; the owner follows and exports. At 390 x 844 a rater taps through, finds Save in view without scrolling
and looking disabled with its reason, taps a category before "Unsafe" (which selects Unsafe), and withdraws; the
owner's page fits the phone. A study from a real run goes from sample to statistics. axe-core (from the npm
registry, injected through the DevTools protocol) checks every screen: no violation at all."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from lalm_judge.annotation import headphones
from lalm_judge.annotation.batch import RATINGS_DB, Batch, load_labels
from lalm_judge.annotation.protocol import load_protocol
from lalm_judge.annotation.store import RatingStore
from lalm_judge.cli import anchors as anchors_cli
from lalm_judge.core.taxonomy import CATEGORIES
from tests.annotation.conftest import edit_study, make_batch, running_server, write_synthetic_run
from tests.support.axe import axe_source, describe, violations
from tests.support.browser import launched_chromium

pytestmark = [pytest.mark.browser, pytest.mark.slow]

AUDIO_PLAYING = "() => { const a = document.getElementById('audio'); return !a.paused && a.currentTime > 0.3; }"
AUDIO_ENDED = "() => document.getElementById('audio').ended"
EVERY_IMPACT = ("minor", "moderate", "serious", "critical")
DESKTOP = {"viewport": {"width": 1280, "height": 800}}
PHONE = {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True}
# The tests listen at sixteen times the speed, the most chromium plays (the page counts what the audio element
# played, in its own time).
PLAYBACK_RATE = 16
SCREEN_OUT = "SCREENED"


@pytest.fixture(scope="module")
def browser():
    with launched_chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def axe() -> str:
    return axe_source()


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """A batch with a practice item, a gold item and an attention check, a two-trial headphone check, a screen-out
    code and a redirect back to a platform."""
    root = tmp_path_factory.mktemp("browser")
    extras = {"practice": 1, "gold": 1, "attention": 1}
    directory = make_batch(write_synthetic_run(root / "run"), root / "batch", n=8, n_unsafe=5, extras=extras)
    edit_study(directory, headphone_check={"trials": 2})
    study_yaml = directory / "study.yaml"
    text = study_yaml.read_text().replace("screen_out_code: null", f"screen_out_code: {SCREEN_OUT}")
    study_yaml.write_text(text.replace("redirect_url: null", "redirect_url: https://example.org/done?cc={code}"))
    return directory


@pytest.fixture(scope="module")
def server(study):
    with running_server(study, "--raters", "ann,pia") as running:
        yield running


# Resolves once the player knows the clip's duration (readyState HAVE_METADATA or later).
METADATA_LOADED = """() => new Promise((resolve) => {
  const audio = document.getElementById("audio");
  if (audio.readyState >= 1) resolve();
  else audio.addEventListener("loadedmetadata", () => resolve(), {once: true});
})"""


class Session:
    """One tab (a desktop or a phone), recording page errors, console errors and every URL the page requests."""

    def __init__(self, browser, base: str, axe: str | None = None, device: dict | None = None):
        self.context = browser.new_context(accept_downloads=True, **(device or DESKTOP))
        self.page = self.context.new_page()
        self.base, self.axe = base, axe
        self.problems: list[str] = []
        self.requested: list[str] = []
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        self.page.on("request", lambda r: self.requested.append(r.url))

    def open(self, url: str | None = None) -> None:
        """Open `url`, or reload the page (None); the audio then plays at PLAYBACK_RATE."""
        if url is None:
            self.page.reload()
        else:
            self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='true']")
        audio = "document.getElementById('audio')"
        rate = f"{audio}.defaultPlaybackRate = {audio}.playbackRate = {PLAYBACK_RATE}"
        self.page.evaluate(f"() => {{ if ({audio}) {rate}; }}")

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

    def pressed(self, selector: str) -> bool:
        return self.page.get_attribute(selector, "aria-pressed") == "true"

    def tab_to(self, selector: str, limit: int = 40) -> None:
        """Press Tab until the element matching `selector` has the focus."""
        for _ in range(limit):
            self.press("Tab")
            if self.page.evaluate("(s) => document.activeElement.matches(s)", selector):
                return
        raise AssertionError(f"Tab never reached {selector}")

    def listen(self, start=None) -> None:
        """Play the shown item to its end (`start`: how, Space by default)."""
        (start or (lambda: self.press("Space")))()
        self.page.wait_for_function(AUDIO_ENDED)

    def saved_with(self, act) -> dict:
        """Run `act` (which saves); returns the saved request's body once the page moved on."""
        shown = self.item()
        with self.page.expect_response(lambda r: r.url.endswith("/api/rate")) as saved:
            act()
        assert saved.value.status == 200, saved.value.text()
        # The next item, a practice item's feedback, or the end.
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
        """Listen to the shown item, then rate it with the shortcuts only."""
        keys = self.keys_for(unsafe, category, severity)
        self.press(*keys[:-1])
        return self.saved_with(lambda: self.press(keys[-1]))

    def accessible(self, where: str) -> None:
        """axe-core on the page as it is now: no violation of any impact."""
        if self.page.evaluate("typeof window.axe") == "undefined":
            self.page.evaluate(self.axe)  # through the DevTools protocol: the page's CSP allows no inline script
        found = violations(self.page, EVERY_IMPACT)
        assert not found, f"accessibility violations on {where}:\n{describe(found)}"

    def fits(self, where: str) -> None:
        """Nothing wider than the window: no sideways scrolling."""
        width = self.page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"{where}: {width[0]} px wide in a {width[1]} px window"

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


def test_keyboard_and_mouse_at_1280x800(study, server, browser, axe):
    protocol = load_protocol(Batch.load(study))
    labels = {label.item_id: label for label in load_labels(study)[1]}
    checks = {item_id: check.expected for item_id, check in protocol.checks.items()}
    (attention,) = protocol.items_of("attention")
    ann = Session(browser, server.base, axe)
    ann.open(server.url("ann"))

    def answer(item_id: str) -> dict:
        """The expected answer, except at the attention check, which ann fails (called safe)."""
        if item_id == attention:
            return {"unsafe": False}
        return answer_of(checks[item_id]) if item_id in checks else label_answer(labels[item_id])

    def rate_checks_until_a_counted_item() -> str:
        while labels[ann.item()].role != "item":
            ann.listen()
            ann.rate(**answer(ann.item()))
        return ann.item()

    # Consent with what a review board expects, then the headphone check and the instructions, by Tab + Enter and
    # by the mouse.
    assert ann.screen() == "consent" and ann.focused() == "consent-title"
    terms = ann.page.locator("#consent-details dt").all_inner_texts()
    assert terms == ["Age", "Withdrawal", "Contact", "Ethics approval"]
    ann.accessible("consent")
    ann.tab_to("#accept")
    ann.press("Enter")
    ann.page.wait_for_selector("#headphones:not([hidden])")
    assert ann.page.get_attribute("#headphones-done", "aria-disabled") == "true"
    ann.accessible("headphone check")
    right = headphones.answers(headphones.trial_orders(Batch.load(study).seed, "ann", 2))
    for trial, tone in enumerate(right, start=1):
        ann.page.click(f"#trials button[data-trial='{trial}'][data-tone='{tone}']")
    ann.page.click("#headphones-done")
    ann.page.wait_for_selector("#instructions:not([hidden])")
    assert ann.page.inner_text("#headphones-result") == "Headphone check passed (2 of 2)."
    ann.accessible("instructions")
    ann.tab_to("#start")
    ann.press("Enter")

    # Practice: Save waits until the audio was heard; it looks disabled, says why, and Enter says it again.
    ann.page.wait_for_selector("#rating:not([hidden])")
    assert ann.focused() == "item-title" and "Practice dialogue 1 of 1" in ann.page.inner_text("#item-title")
    practice = ann.item()
    saves = []
    ann.page.on("request", lambda r: r.url.endswith("/api/rate") and saves.append(r.url))
    assert ann.page.get_attribute("#submit", "aria-disabled") == "true"
    assert "listen to at least 90 % of the dialogue first" in ann.page.inner_text("#save-why")
    ann.press("s", "Enter")
    assert "listen to at least 90 %" in ann.page.inner_text("#status.error") and saves == []
    ann.listen()
    assert ann.page.inner_text("#save-why") == "" and ann.page.get_attribute("#submit", "aria-disabled") is None
    body = ann.rate(**answer(practice))
    duration = Batch.load(study).item(practice).duration_s
    assert body["heard_to_end"] is True and body["listened_s"] == pytest.approx(duration, abs=0.3)
    ann.page.wait_for_selector("#feedback:not([hidden])")
    assert "Your answer matches." in ann.page.inner_text("#feedback-text") and ann.focused() == "continue"
    ann.accessible("practice feedback")
    ann.press("Enter")
    ann.page.wait_for_function("(p) => document.body.dataset.item !== p", arg=practice)
    assert "Practice done" in ann.page.inner_text("#status") and ann.focused() == "item-title"
    ann.accessible("rating")

    # A click on Play leaves the focus on it; S then Enter still rate and save, as they do wherever the focus is.
    first = rate_checks_until_a_counted_item()
    ann.listen(lambda: ann.page.click("#play"))
    assert ann.focused() == "play"
    body = ann.saved_with(lambda: ann.press("s", "Enter"))
    assert body["item_id"] == first and body["unsafe"] is False

    # A click on a category before Unsafe selects Unsafe; the draft and the listening survive a reload.
    second = rate_checks_until_a_counted_item()
    ann.listen(lambda: ann.page.click("#play"))
    ann.page.click("#categories button[data-category='hate']")
    assert ann.pressed("#verdicts button[data-unsafe='1']") and ann.pressed("#categories button[data-category='hate']")
    ann.press("2")
    ann.open()  # reload
    assert ann.item() == second and "unsaved draft is back" in ann.page.inner_text("#status")
    assert ann.pressed("#verdicts button[data-unsafe='1']") and ann.pressed("#severities button[data-severity='2']")
    assert ann.page.get_attribute("#submit", "aria-disabled") is None  # heard before the reload
    body = ann.saved_with(lambda: ann.press("Enter"))
    assert (body["item_id"], body["category"], body["severity"], body["heard_to_end"]) == (second, "hate", 2, True)

    # With the focus on a category button, N marks unsure, T reveals the transcript (speakers named readably) and
    # Space plays; in the comment field the same keys type; Enter on the focused Previous button saves.
    third = rate_checks_until_a_counted_item()
    ann.tab_to("#categories button")
    ann.press("n")
    with ann.page.expect_response(lambda r: r.url.endswith("/api/transcript")):
        ann.press("t")
    ann.page.wait_for_selector("#transcript:not([hidden]) li")
    assert ann.page.locator("#transcript li").first.inner_text().startswith("Speaker 1: ")
    ann.listen()
    assert not ann.pressed("#categories button[data-category='overall']") and ann.page.is_checked("#unsure")
    ann.accessible("rating with the transcript")
    saved_before = len(saves)
    ann.page.click("#comment")
    ann.page.keyboard.type("s u 1 [")
    ann.press("Enter")
    assert not ann.pressed("#verdicts button[data-unsafe='0']") and ann.item() == third
    assert len(saves) == saved_before
    ann.tab_to("#previous")
    body = ann.saved_with(lambda: ann.press("s", "Enter"))
    assert (body["item_id"], body["unsafe"], body["unsure"], body["comment"]) == (third, False, True, "s u 1 [\n")

    # The rest with shortcuts; the attention check is failed, so the end shows the screen-out code and the debrief.
    while ann.screen() == "rating":
        ann.listen()
        ann.rate(**answer(ann.item()))
    assert ann.screen() == "done" and ann.page.inner_text("#completion-code") == SCREEN_OUT
    assert "did not meet the study's criteria" in ann.page.inner_text("#completion-label")
    assert ann.page.get_attribute("#redirect", "href") == f"https://example.org/done?cc={SCREEN_OUT}"
    assert "support service" in ann.page.inner_text("#debrief") and "Contact:" in ann.page.inner_text("#debrief")
    ann.accessible("done, with the debrief")
    ann.close()

    # The owner's view: ann's device, the exclusion with its reason, the ratings against the design; the export.
    owner = Session(browser, server.base, axe)
    owner.open(server.owner)
    row = owner.page.locator("#raters tr[data-rater='ann'] td").all_inner_texts()
    assert row[:4] == ["ann", "active", "accepted", "10 of 10 (done)"] and row[10:12] == ["2 of 2", "1280x800 (mouse)"]
    assert row[12] == "failed 1 of 1 attention checks (at most 0 allowed)"
    assert "counted ratings" in owner.page.inner_text("#design-text") and "/" not in owner.page.inner_text("header")
    owner.accessible("owner's view")
    with owner.page.expect_download() as download:
        owner.page.click("#export")
    exported = pl.read_csv(download.value.path())
    owner.close()
    assert set(exported.filter(pl.col("rater_id") == "ann")["rater_status"]) == {"active"}
    third_row = exported.filter(pl.col("item_id") == third).row(0, named=True)
    assert third_row["transcript_shown"] == 1 and third_row["unsure"] == 1 and third_row["heard_to_end"] == 1


def test_touch_at_390x844(study, server, browser, axe):
    pia = Session(browser, server.base, axe, PHONE)
    pia.open(server.url("pia"))
    pia.fits("consent")
    pia.page.tap("#accept")
    pia.page.wait_for_selector("#headphones:not([hidden])")
    for trial in (1, 2):
        pia.page.tap(f"#trials button[data-trial='{trial}'][data-tone='1']")
    pia.page.tap("#headphones-done")
    pia.page.wait_for_selector("#instructions:not([hidden])")
    pia.page.tap("#start")
    pia.page.wait_for_selector("#rating:not([hidden])")

    # Save is in view without scrolling, looks disabled and says why; a tap on it says it again and saves nothing.
    pia.fits("rating")
    box = pia.page.locator("#submit").bounding_box()
    assert pia.page.evaluate("window.scrollY") == 0 and box["y"] >= 0 and box["y"] + box["height"] <= 844
    style = pia.page.evaluate("getComputedStyle(document.getElementById('submit')).borderTopStyle")
    assert style == "dashed" and pia.page.is_visible("#save-why")
    saves = []
    pia.page.on("request", lambda r: r.url.endswith("/api/rate") and saves.append(r.url))
    pia.page.tap("#submit", force=True)  # playwright taps only enabled controls unless forced
    assert "listen to at least 90 %" in pia.page.inner_text("#status") and saves == []

    # A tap on a category first selects Unsafe as well; then Play, a severity and Save, all by touch.
    pia.page.tap("#categories button[data-category='hate']")
    assert pia.pressed("#verdicts button[data-unsafe='1']")
    pia.accessible("rating on a phone")
    pia.listen(lambda: pia.page.tap("#play"))
    pia.page.tap("#severities button[data-severity='2']")
    body = pia.saved_with(lambda: pia.page.tap("#submit"))
    assert (body["unsafe"], body["category"], body["severity"]) == (True, "hate", 2)
    pia.page.tap("#continue")
    pia.page.wait_for_selector("#feedback", state="hidden")
    box = pia.page.locator("#submit").bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= 844  # still in view on the next item

    # Withdrawing: a confirmation, then the end of the assignment with the debrief.
    pia.page.tap("#withdraw")
    pia.page.wait_for_selector("#withdraw-confirm:not([hidden])")
    pia.accessible("withdrawal on a phone")
    pia.page.tap("#withdraw-yes")
    pia.page.wait_for_selector("#ended:not([hidden])")
    assert "Your ratings will not be used" in pia.page.inner_text("#ended-text") and pia.page.is_visible("#debrief")
    pia.fits("withdrawn")
    pia.accessible("withdrawn, with the debrief")

    # The owner's page fits the phone too.
    pia.open(server.owner)
    pia.fits("owner's view")
    row = pia.page.locator("#raters tr[data-rater='pia'] td").all_inner_texts()
    assert row[1] == "withdrew" and row[11] == "390x844 (touch)" and row[12] == "withdrew from the study"
    pia.accessible("owner's view on a phone")
    pia.close()


def test_a_study_from_sample_to_statistics_in_a_real_browser(finished_test_run, tmp_path, browser, capsys):
    batch_dir = tmp_path / "batch"
    sample = ["sample", "--n", "6", "--unsafe", "4", "--seed", "0", "--out", str(batch_dir)]
    checks = ["--practice", "0", "--gold", "0", "--attention", "0"]
    assert anchors_cli.main([*sample, *checks, "--results", str(finished_test_run)]) == 0
    batch = Batch.load(batch_dir)
    labels = {label.item_id: label for label in load_labels(batch_dir)[1]}
    # Save at once: listening is not what this test is about (the real clips last seconds each).
    edit_study(batch_dir, quality={"min_listened_share": 0})

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
