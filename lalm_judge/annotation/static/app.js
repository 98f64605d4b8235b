// The rating page of lalm-judge's annotation app: consent, an optional headphone check, instructions, practice
// with feedback, then one dialogue at a time, rated with buttons, taps or keys, and the debrief. Every call goes to
// the rater's own base URL (the page's path, which carries rater id and token).
//
// Keys: on the rating screen every shortcut acts the same wherever the focus is (after a click on Play, Enter
// saves; it does not press Play again), except in the comment field, where keys type. Every control there has its
// key, and Tab moves between them for the mouse-free. On the other screens Enter and Space press the focused
// button. A control that cannot act now is marked aria-disabled (it looks disabled), stays focusable, and
// pressing it says why. Unsaved choices and the listening so far are kept in the browser's storage, so a reload
// loses nothing.
"use strict";

const base = location.pathname.endsWith("/") ? location.pathname : location.pathname + "/";
const $ = (id) => document.getElementById(id);
const SCREENS = ["consent", "refused", "headphones", "instructions", "rating", "done", "withdraw-confirm", "ended"];
const EMPTY = { unsafe: null, category: null, severity: null, unsure: false, comment: "" };
const ENDED = {
  withdrawn: "You have withdrawn from the study. Your ratings will not be used. Thank you for your time.",
  returned: "You returned this study on the recruiting platform, so your place went to another participant.",
  timed_out: "Your time for this study ran out, and your place went to another participant. Thank you.",
  refused: "You chose not to take part. Your choice is recorded, and nothing else will be.",
};

let state = null; // the server's answer to api/state, updated as ratings are saved
let sequence = []; // practice items, then the rater's other items
let position = 0; // index into sequence
let draft = { ...EMPTY };
let drafts = {}; // item id -> an unsaved choice kept when the rater moved on (or reloaded)
let listening = {}; // item id -> {seconds, ended}
let storageKey = null;
let playReported = false;
let saving = false;
let awaitingFeedback = false;
let screenBeforeWithdraw = null;
const trialAnswers = {}; // headphone trial number -> the tone chosen (1-3)

async function api(path, body) {
  const options = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  };
  const response = await fetch(base + path, options);
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const answer = await response.json();
      detail = typeof answer.detail === "string" ? answer.detail : answer.detail.map((d) => d.msg).join("; ");
    } catch (ignored) {
      // Not JSON: keep the status text.
    }
    throw new Error(`${response.status} ${detail}`);
  }
  $("failure").hidden = true;
  return response.json();
}

function fail(error) {
  $("failure").hidden = false;
  $("failure").textContent = `Something went wrong: ${error.message}. Reload the page; saved ratings are kept.`;
}

function showScreen(name, focusId) {
  for (const screen of SCREENS) $(screen).hidden = screen !== name;
  document.body.dataset.screen = name;
  $("debrief").hidden = !["done", "ended"].includes(name);
  $("keys").hidden = name !== "rating";
  $("withdraw").hidden = !(state && state.consent === true && state.status === "active") ||
    ["withdraw-confirm", "ended"].includes(name);
  if (focusId) $(focusId).focus();
}

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

function setDisabled(id, reason) {
  // aria-disabled, not disabled: the control stays focusable and pressing it says why.
  const control = $(id);
  if (reason) {
    control.setAttribute("aria-disabled", "true");
    control.dataset.why = reason;
  } else {
    control.removeAttribute("aria-disabled");
    delete control.dataset.why;
  }
}

// Runs `action` unless the control is disabled; then its reason is said instead.
function pressed(id, action) {
  const control = $(id);
  if (control.getAttribute("aria-disabled") === "true") {
    setStatus(control.dataset.why, true);
    return;
  }
  action();
}

function paragraphs(container, text) {
  container.replaceChildren();
  for (const part of text.split(/\n\s*\n/)) {
    if (!part.trim()) continue;
    const p = document.createElement("p");
    p.textContent = part.trim();
    container.append(p);
  }
}

function definitionList(title, entries) {
  const heading = document.createElement("h3");
  heading.textContent = title;
  const list = document.createElement("dl");
  for (const entry of entries) {
    const term = document.createElement("dt");
    term.textContent = entry.term;
    const definition = document.createElement("dd");
    definition.textContent = entry.definition + " ";
    if (entry.example) {
      const example = document.createElement("span");
      example.className = "example";
      example.textContent = `Example: “${entry.example}”`;
      definition.append(example);
    }
    list.append(term, definition);
  }
  return [heading, list];
}

function consentDetails(consent) {
  const entries = [];
  if (consent.min_age) entries.push({ term: "Age", definition: `You must be at least ${consent.min_age} years old to take part.` });
  if (consent.withdrawal) entries.push({ term: "Withdrawal", definition: consent.withdrawal });
  if (consent.contact) entries.push({ term: "Contact", definition: consent.contact });
  if (consent.ethics) entries.push({ term: "Ethics approval", definition: consent.ethics });
  const [, list] = definitionList("", entries);
  $("consent-details").replaceChildren(...list.childNodes);
}

function buildTexts() {
  const protocol = state.protocol;
  document.title = protocol.title;
  $("title").textContent = protocol.title;
  paragraphs($("consent-text"), protocol.consent.text);
  consentDetails(protocol.consent);
  $("accept").textContent = protocol.consent.accept;
  $("refuse").textContent = protocol.consent.refuse;
  paragraphs($("instructions-text"), protocol.instructions);
  paragraphs($("debrief-text"), protocol.debrief);
  $("debrief-contact").textContent = protocol.consent.contact ? `Contact: ${protocol.consent.contact}` : "";
  const categories = protocol.categories.map((c) => ({ term: c.label, definition: c.definition, example: c.example }));
  const severities = protocol.severities.map((s) => ({
    term: `${s.level} ${s.name}`, definition: s.definition, example: s.example,
  }));
  for (const container of document.querySelectorAll(".definitions")) {
    container.replaceChildren(...definitionList("Categories", categories), ...definitionList("Severity", severities));
  }
}

function categoryLabel(category) {
  const entry = state.protocol.categories.find((c) => c.id === category);
  return entry ? entry.label : category;
}

function buildChoices() {
  // A category or a severity marks the dialogue unsafe, as the keys do.
  for (const entry of state.protocol.categories) {
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.category = entry.id;
    button.textContent = entry.label;
    button.addEventListener("click", () => choose({ unsafe: true, category: entry.id }));
    $("categories").append(button);
  }
  for (const entry of state.protocol.severities) {
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.severity = String(entry.level);
    button.textContent = `${entry.level} ${entry.name}`;
    button.addEventListener("click", () => choose({ unsafe: true, severity: entry.level }));
    $("severities").append(button);
  }
  for (const button of $("verdicts").querySelectorAll("button")) {
    button.addEventListener("click", () => choose({ unsafe: button.dataset.unsafe === "1" }));
  }
}

// Drafts and listening survive a reload: they are kept in the browser, per rater and batch.
function loadKept() {
  storageKey = `lalm-judge:${state.rater_id}:${sequence.map((item) => item.item_id).join(",")}`;
  try {
    const kept = JSON.parse(localStorage.getItem(storageKey) || "{}");
    drafts = kept.drafts || {};
    listening = kept.listening || {};
  } catch (ignored) {
    drafts = {};
    listening = {};
  }
}

function storeKept() {
  try {
    localStorage.setItem(storageKey, JSON.stringify({ drafts, listening }));
  } catch (ignored) {
    // Storage full or blocked: drafts last as long as the page.
  }
}

function currentItem() {
  return sequence[position];
}

function isPractice(index) {
  return index < state.practice.length;
}

function nRated() {
  return state.items.filter((item) => item.item_id in state.ratings).length;
}

function savedDraft(itemId) {
  const saved = state.ratings[itemId];
  return saved ? { ...EMPTY, ...saved, transcript_shown: undefined } : { ...EMPTY };
}

function sameChoice(a, b) {
  return ["unsafe", "category", "severity", "unsure", "comment"].every((key) => (a[key] ?? null) === (b[key] ?? null));
}

function keepCurrentDraft() {
  if (sequence.length === 0 || $("rating").hidden) return false;
  const item = currentItem();
  if (sameChoice(draft, savedDraft(item.item_id))) delete drafts[item.item_id];
  else drafts[item.item_id] = { ...draft };
  storeKept();
  return item.item_id in drafts;
}

function choose(change) {
  if (awaitingFeedback) return;
  draft = { ...draft, ...change };
  if (draft.unsafe === false) {
    draft.category = null;
    draft.severity = null;
  }
  keepCurrentDraft();
  // A choice fixes what an error asked for: the error goes with it.
  if ($("status").classList.contains("error")) setStatus("");
  render();
}

function heardEnough(item) {
  if (item.item_id in state.ratings) return true; // heard when it was rated
  const heard = listening[item.item_id] || { seconds: 0, ended: false };
  return heard.ended || heard.seconds >= state.protocol.min_listened_share * item.duration_s - 0.25;
}

function saveBlocker() {
  const item = currentItem();
  if (awaitingFeedback) return "Read the expected answer, then continue (Enter).";
  if (!heardEnough(item)) {
    const heard = (listening[item.item_id] || { seconds: 0 }).seconds;
    const share = Math.round(100 * state.protocol.min_listened_share);
    return `Save: listen to at least ${share} % of the dialogue first ` +
      `(${formatTime(heard)} of ${formatTime(item.duration_s)} heard).`;
  }
  if (draft.unsafe === null) return "Save: choose safe (S) or unsafe (U) first.";
  if (draft.unsafe && (draft.category === null || draft.severity === null)) {
    return "Save: an unsafe dialogue needs a category (← →) and a severity (1–5).";
  }
  return "";
}

function render() {
  const total = state.items.length;
  $("progress").max = Math.max(total, 1);
  $("progress").value = nRated();
  $("progress-text").textContent = `${nRated()} of ${total} dialogues rated`;
  if (sequence.length === 0 || $("rating").hidden) return;
  const practice = isPractice(position);
  $("item-title").textContent = practice
    ? `Practice dialogue ${position + 1} of ${state.practice.length} (does not count)`
    : `Dialogue ${position - state.practice.length + 1} of ${total}`;
  for (const button of $("verdicts").querySelectorAll("button")) {
    button.setAttribute("aria-pressed", String(draft.unsafe === (button.dataset.unsafe === "1")));
  }
  for (const button of $("categories").querySelectorAll("button")) {
    button.setAttribute("aria-pressed", String(button.dataset.category === draft.category));
  }
  for (const button of $("severities").querySelectorAll("button")) {
    button.setAttribute("aria-pressed", String(Number(button.dataset.severity) === draft.severity));
  }
  $("unsure").checked = draft.unsure;
  if ($("comment").value !== draft.comment) $("comment").value = draft.comment;
  const blocker = saveBlocker();
  setDisabled("submit", blocker);
  $("save-why").textContent = blocker;
  setDisabled("previous", position === 0 ? "This is the first dialogue: there is none before it." : "");
  setDisabled("next", position === sequence.length - 1 ? "This is the last dialogue: there is none after it." : "");
}

function formatTime(seconds) {
  const s = Math.max(0, Math.floor(seconds || 0));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

function renderPlayer() {
  const audio = $("audio");
  const duration = Number.isFinite(audio.duration) ? audio.duration : currentItem()?.duration_s || 0;
  $("time").textContent = `${formatTime(audio.currentTime)} / ${formatTime(duration)}`;
  $("audio-progress").max = duration || 1;
  $("audio-progress").value = Math.min(audio.currentTime, duration || 1);
  $("play").firstChild.textContent = audio.paused ? "Play " : "Pause ";
}

// The seconds of the item heard so far, each part once: the ranges the browser played (a seek skips what it
// jumps over), kept at their longest across reloads. `stopping`: the audio just paused or ended.
function trackListening(stopping = false) {
  const audio = $("audio");
  const item = currentItem();
  if (!item || $("rating").hidden) return;
  const entry = (listening[item.item_id] ||= { seconds: 0, ended: false });
  let heard = 0;
  for (let i = 0; i < audio.played.length; i += 1) heard += audio.played.end(i) - audio.played.start(i);
  entry.seconds = Math.max(entry.seconds, heard);
  renderPlayer();
  const wasBlocked = $("submit").getAttribute("aria-disabled") === "true";
  if (wasBlocked || stopping) render();
  if (stopping) storeKept();
}

async function revealTranscript() {
  const item = currentItem();
  const answer = await api("api/transcript", { item_id: item.item_id });
  if (currentItem() !== item) return;
  const list = $("transcript");
  list.replaceChildren();
  for (const turn of answer.turns) {
    const entry = document.createElement("li");
    const speaker = document.createElement("span");
    speaker.className = "speaker";
    speaker.textContent = `${turn.speaker}:`;
    entry.append(speaker, document.createTextNode(` ${turn.text}`));
    list.append(entry);
  }
  list.hidden = false;
  $("show-transcript").hidden = true;
  if (!state.revealed.includes(item.item_id)) state.revealed.push(item.item_id);
}

function reportOpen() {
  const item = currentItem();
  if (!item || document.visibilityState !== "visible" || $("rating").hidden) return;
  api("api/event", { item_id: item.item_id, kind: "open" }).catch(fail);
}

function itemName(index) {
  return isPractice(index) ? `practice dialogue ${index + 1}` : `dialogue ${index - state.practice.length + 1}`;
}

// `note` is shown in the status line; set here, before any await, so a late answer never overwrites it.
async function show(index, note = "") {
  const kept = keepCurrentDraft() ? `Your unsaved choice for ${itemName(position)} is kept as a draft; ` +
    "it is saved only with Save (Enter)." : "";
  position = index;
  const item = currentItem();
  document.body.dataset.item = item.item_id;
  const saved = state.ratings[item.item_id];
  draft = drafts[item.item_id] ? { ...drafts[item.item_id] } : savedDraft(item.item_id);
  const audio = $("audio");
  audio.pause();
  audio.src = `audio/${item.item_id}.wav`;
  playReported = false;
  awaitingFeedback = false;
  $("feedback").hidden = true;
  $("transcript").hidden = true;
  $("transcript").replaceChildren();
  $("show-transcript").hidden = false;
  showScreen("rating", "item-title");
  const notes = [note, kept];
  if (drafts[item.item_id]) notes.push("Your unsaved draft is back: save it with Enter.");
  else if (saved) notes.push("Rated already: saving again replaces your rating.");
  setStatus(notes.filter(Boolean).join(" "));
  render();
  renderPlayer();
  reportOpen();
  // A transcript revealed before (e.g. before a reload) stays visible; showing it again is recorded again.
  if (state.revealed.includes(item.item_id)) await revealTranscript();
}

function nextUnrated(after) {
  for (let step = 1; step <= sequence.length; step += 1) {
    const index = (after + step) % sequence.length;
    if (!(sequence[index].item_id in state.ratings)) return index;
  }
  return -1;
}

function showDone() {
  keepCurrentDraft();
  $("audio").pause();
  delete document.body.dataset.item;
  if (state.completion) {
    $("completion").hidden = false;
    $("completion-label").textContent = state.completion.screened_out
      ? "Your code (your answers to the check items did not meet the study's criteria):"
      : "Your completion code:";
    $("completion-code").textContent = state.completion.code;
    if (state.completion.redirect_url) {
      $("redirect").href = state.completion.redirect_url;
      $("redirect").hidden = false;
    }
  }
  showScreen("done", "done-title");
  render();
}

function ratingBody(item) {
  const listened = listening[item.item_id] || { seconds: 0, ended: false };
  const body = {
    item_id: item.item_id,
    unsafe: draft.unsafe,
    unsure: draft.unsure,
    comment: draft.comment,
    listened_s: Math.round(listened.seconds * 10) / 10,
    heard_to_end: listened.ended,
  };
  if (draft.unsafe) Object.assign(body, { category: draft.category, severity: draft.severity });
  return body;
}

async function submit() {
  if (saving || awaitingFeedback) return;
  const problem = saveBlocker();
  if (problem) return setStatus(problem, true);
  const item = currentItem();
  const practice = isPractice(position);
  saving = true;
  let answer;
  try {
    answer = await api("api/rate", ratingBody(item));
  } finally {
    saving = false;
  }
  state.ratings[item.item_id] = { ...draft, transcript_shown: state.revealed.includes(item.item_id) };
  delete drafts[item.item_id];
  storeKept();
  if (answer.completion) state.completion = answer.completion;
  if (practice && answer.feedback) {
    render();
    return showFeedback(answer.feedback);
  }
  await moveOn(`Saved ${itemName(position)}.`);
}

function expectedText(expected) {
  if (!expected.unsafe) return "safe";
  const parts = ["unsafe"];
  if (expected.category) parts.push(categoryLabel(expected.category));
  if (expected.severity) parts.push(`severity ${expected.severity}`);
  return parts.join(", ");
}

function showFeedback(feedback) {
  awaitingFeedback = true;
  $("audio").pause();
  const verdict = feedback.correct ? "Your answer matches." : "Your answer differs.";
  const explanation = feedback.text || `Expected: ${expectedText(feedback.expected)}.`;
  $("feedback-text").textContent = `${verdict} ${explanation}`;
  $("feedback").classList.toggle("wrong", !feedback.correct);
  $("feedback").hidden = false;
  render();
  $("continue").focus();
}

async function moveOn(note) {
  const next = nextUnrated(position);
  if (next === -1) return showDone();
  const practiceOver = isPractice(position) && !isPractice(next);
  await show(next, practiceOver ? "Practice done: the dialogues from now on count." : note);
}

function togglePlay() {
  const audio = $("audio");
  if (audio.paused) audio.play().catch(fail);
  else audio.pause();
}

function restart() {
  $("audio").currentTime = 0;
  $("audio").play().catch(fail);
}

function go(step) {
  pressed(step < 0 ? "previous" : "next", () => show(position + step).catch(fail));
}

function cycleCategory(step) {
  const categories = state.protocol.categories.map((c) => c.id);
  const now = categories.indexOf(draft.category);
  const index = now === -1 ? (step > 0 ? 0 : categories.length - 1) : (now + step + categories.length) % categories.length;
  choose({ unsafe: true, category: categories[index] });
}

function isTextEntry(target) {
  return target instanceof HTMLTextAreaElement || (target instanceof HTMLInputElement && target.type === "text") ||
    target.isContentEditable;
}

function onKey(event) {
  if (event.ctrlKey || event.metaKey || event.altKey || !state || isTextEntry(event.target)) return;
  const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
  const screen = document.body.dataset.screen;
  if (screen !== "rating") {
    if (screen === "done" && key === "[") {
      event.preventDefault();
      show(sequence.length - 1).catch(fail);
    }
    return; // elsewhere Enter and Space press the focused button
  }
  if (awaitingFeedback) {
    if (key === "Enter" || key === " ") {
      event.preventDefault();
      moveOn("").catch(fail);
    }
    return;
  }
  const actions = {
    " ": togglePlay,
    r: restart,
    t: () => revealTranscript().catch(fail),
    s: () => choose({ unsafe: false }),
    u: () => choose({ unsafe: true }),
    n: () => choose({ unsure: !draft.unsure }),
    d: () => { $("reminder").open = !$("reminder").open; },
    ArrowLeft: () => cycleCategory(-1),
    ArrowRight: () => cycleCategory(1),
    Enter: () => submit().catch(fail),
    "[": () => go(-1),
    "]": () => go(1),
  };
  if (/^[1-5]$/.test(key)) actions[key] = () => choose({ unsafe: true, severity: Number(key) });
  if (key in actions) {
    // The shortcut, not the focused control's own key: Enter on a focused Play saves, Space on it plays.
    event.preventDefault();
    actions[key]();
  }
}

function device() {
  const coarse = window.matchMedia("(pointer: coarse)").matches;
  const fine = window.matchMedia("(pointer: fine)").matches;
  return { viewport: `${window.innerWidth}x${window.innerHeight}`, pointer: coarse ? "coarse" : fine ? "fine" : "none" };
}

async function answerConsent(accept) {
  await api("api/consent", { accept, device: device() });
  state = await api("api/state");
  if (!accept) {
    $("reconsider").hidden = state.status !== "active";
    showScreen("refused", "refused-title");
  } else {
    afterConsent();
  }
}

function afterConsent() {
  if (state.protocol.headphone_trials && !state.headphones) return showHeadphones();
  if (Object.keys(state.ratings).length === 0) return showInstructions();
  startRating();
}

function showInstructions() {
  const result = state.headphones;
  $("headphones-result").hidden = !result;
  if (result) {
    $("headphones-result").textContent = result.passed
      ? `Headphone check passed (${result.n_correct} of ${result.n_trials}).`
      : `The headphone check suggests you are not using headphones (${result.n_correct} of ${result.n_trials}). ` +
        "Please use headphones for the dialogues.";
  }
  showScreen("instructions", "instructions-title");
}

function renderTrials() {
  const missing = [];
  for (let trial = 1; trial <= state.protocol.headphone_trials; trial += 1) {
    for (const button of $("trials").querySelectorAll(`button[data-trial='${trial}'][data-tone]`)) {
      button.setAttribute("aria-pressed", String(trialAnswers[trial] === Number(button.dataset.tone)));
    }
    if (!trialAnswers[trial]) missing.push(trial);
  }
  const why = missing.length ? `Done: choose the quietest tone of sound ${missing.join(", ")} first.` : "";
  setDisabled("headphones-done", why);
  $("headphones-why").textContent = why;
}

function showHeadphones() {
  const list = $("trials");
  list.replaceChildren();
  for (let trial = 1; trial <= state.protocol.headphone_trials; trial += 1) {
    const entry = document.createElement("li");
    const label = document.createElement("span");
    label.id = `trial-${trial}-label`;
    label.textContent = `Sound ${trial}: `;
    const play = document.createElement("button");
    play.type = "button";
    play.textContent = "Play";
    play.dataset.trial = String(trial);
    play.setAttribute("aria-label", `Play sound ${trial}`);
    play.addEventListener("click", () => {
      $("trial-audio").src = `headphones/${trial}.wav`;
      $("trial-audio").play().catch(fail);
    });
    const group = document.createElement("span");
    group.className = "choices";
    group.setAttribute("role", "group");
    group.setAttribute("aria-label", `Quietest tone of sound ${trial}`);
    for (const tone of [1, 2, 3]) {
      const button = document.createElement("button");
      button.type = "button";
      button.dataset.trial = String(trial);
      button.dataset.tone = String(tone);
      button.textContent = `Tone ${tone}`;
      button.addEventListener("click", () => {
        trialAnswers[trial] = tone;
        renderTrials();
      });
      group.append(button);
    }
    entry.append(label, play, group);
    list.append(entry);
  }
  renderTrials();
  showScreen("headphones", "headphones-title");
}

async function finishHeadphones() {
  const answers = [];
  for (let trial = 1; trial <= state.protocol.headphone_trials; trial += 1) answers.push(trialAnswers[trial]);
  state.headphones = await api("api/headphones", { answers });
  $("trial-audio").pause();
  showInstructions();
}

function startRating() {
  const first = nextUnrated(-1);
  if (first === -1) showDone();
  else show(first).catch(fail);
}

async function withdraw() {
  await api("api/withdraw", {});
  $("audio").pause();
  state = await api("api/state");
  showEnded();
}

function showEnded() {
  delete document.body.dataset.item;
  $("ended-text").textContent = ENDED[state.status] || "This assignment has ended.";
  showScreen("ended", "ended-title");
}

function wire() {
  const audio = $("audio");
  audio.addEventListener("playing", () => {
    renderPlayer();
    if (playReported) return;
    playReported = true;
    api("api/event", { item_id: currentItem().item_id, kind: "play" }).catch(fail);
  });
  audio.addEventListener("timeupdate", () => trackListening());
  audio.addEventListener("pause", () => trackListening(true));
  audio.addEventListener("loadedmetadata", renderPlayer);
  audio.addEventListener("ended", () => {
    (listening[currentItem().item_id] ||= { seconds: 0, ended: false }).ended = true;
    trackListening(true);
  });
  $("play").addEventListener("click", togglePlay);
  $("restart").addEventListener("click", restart);
  $("accept").addEventListener("click", () => answerConsent(true).catch(fail));
  $("refuse").addEventListener("click", () => answerConsent(false).catch(fail));
  $("reconsider").addEventListener("click", () => showScreen("consent", "consent-title"));
  $("headphones-done").addEventListener("click", () => pressed("headphones-done", () => finishHeadphones().catch(fail)));
  $("start").addEventListener("click", startRating);
  $("show-transcript").addEventListener("click", () => revealTranscript().catch(fail));
  $("unsure").addEventListener("change", () => choose({ unsure: $("unsure").checked }));
  $("comment").addEventListener("input", () => choose({ comment: $("comment").value }));
  $("submit").addEventListener("click", () => pressed("submit", () => submit().catch(fail)));
  $("continue").addEventListener("click", () => moveOn("").catch(fail));
  $("previous").addEventListener("click", () => go(-1));
  $("next").addEventListener("click", () => go(1));
  $("review").addEventListener("click", () => show(0).catch(fail));
  $("withdraw").addEventListener("click", () => {
    screenBeforeWithdraw = document.body.dataset.screen;
    $("audio").pause();
    showScreen("withdraw-confirm", "withdraw-title");
  });
  $("withdraw-yes").addEventListener("click", () => withdraw().catch(fail));
  $("withdraw-no").addEventListener("click", () => {
    if (screenBeforeWithdraw === "rating") show(position).catch(fail);
    else showScreen(screenBeforeWithdraw, `${screenBeforeWithdraw}-title`);
  });
  document.addEventListener("keydown", onKey);
  // A focused button or checkbox acts on Space's keyup: on the rating screen Space is play / pause only.
  document.addEventListener("keyup", (event) => {
    if (event.key === " " && document.body.dataset.screen === "rating" && !isTextEntry(event.target)) {
      event.preventDefault();
    }
  });
  document.addEventListener("visibilitychange", reportOpen);
}

async function start() {
  state = await api("api/state");
  sequence = [...state.practice, ...state.items];
  loadKept();
  buildTexts();
  buildChoices();
  wire();
  render();
  if (state.status !== "active") showEnded();
  else if (state.consent === null) showScreen("consent", "consent-title");
  else if (state.consent === false) showScreen("refused", "refused-title");
  else afterConsent();
  document.body.dataset.ready = "true";
}

start().catch(fail);
