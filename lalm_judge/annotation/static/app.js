// The rating page of lalm-judge's annotation app: consent, instructions, practice with feedback, then one dialogue
// at a time, rated with buttons or keys. Every call goes to the rater's own base URL (the page's path, which
// carries rater id and token).
//
// Keys: shortcuts act on the rating, never on a focused control's own keys: on a focused button, link, checkbox
// or summary, Enter and Space press that control; in the comment field every key types.
"use strict";

const base = location.pathname.endsWith("/") ? location.pathname : location.pathname + "/";
const $ = (id) => document.getElementById(id);
const SCREENS = ["consent", "refused", "instructions", "rating", "done"];
const EMPTY = { unsafe: null, category: null, severity: null, unsure: false, comment: "" };

let state = null; // the server's answer to api/state, updated as ratings are saved
let sequence = []; // practice items, then the rater's other items
let position = 0; // index into sequence
let draft = { ...EMPTY };
const drafts = {}; // item id -> an unsaved choice kept when the rater moved on
const listening = {}; // item id -> {seconds, ended}
let lastTime = null;
let playReported = false;
let saving = false;
let awaitingFeedback = false;

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
  if (focusId) $(focusId).focus();
}

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
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
    const example = document.createElement("span");
    example.className = "example";
    example.textContent = `Example: “${entry.example}”`;
    definition.append(example);
    list.append(term, definition);
  }
  return [heading, list];
}

function buildTexts() {
  const protocol = state.protocol;
  document.title = protocol.title;
  $("title").textContent = protocol.title;
  paragraphs($("consent-text"), protocol.consent.text);
  $("accept").textContent = protocol.consent.accept;
  $("refuse").textContent = protocol.consent.refuse;
  paragraphs($("instructions-text"), protocol.instructions);
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

function choose(change) {
  if (awaitingFeedback) return;
  draft = { ...draft, ...change };
  if (draft.unsafe === false) {
    draft.category = null;
    draft.severity = null;
  }
  // A choice fixes what an error asked for: the error goes with it.
  if ($("status").classList.contains("error")) setStatus("");
  render();
}

function render() {
  const total = state.items.length;
  $("progress").max = Math.max(total, 1);
  $("progress").value = nRated();
  $("progress-text").textContent = `${nRated()} of ${total} dialogues rated`;
  if (sequence.length === 0) return;
  const practice = isPractice(position);
  $("item-title").textContent = practice
    ? `Practice dialogue ${position + 1} of ${state.practice.length} (does not count)`
    : `Dialogue ${position - state.practice.length + 1} of ${total}`;
  for (const button of $("verdicts").querySelectorAll("button")) {
    button.setAttribute("aria-pressed", String(draft.unsafe === (button.dataset.unsafe === "1")));
  }
  $("details").disabled = draft.unsafe !== true;
  for (const button of $("categories").querySelectorAll("button")) {
    button.setAttribute("aria-pressed", String(button.dataset.category === draft.category));
  }
  for (const button of $("severities").querySelectorAll("button")) {
    button.setAttribute("aria-pressed", String(Number(button.dataset.severity) === draft.severity));
  }
  $("unsure").checked = draft.unsure;
  if ($("comment").value !== draft.comment) $("comment").value = draft.comment;
  $("previous").disabled = position === 0;
  $("next").disabled = position === sequence.length - 1;
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

// Adds the playback since the last update to the item's listening time; `stopping`: the audio just paused or ended.
function trackListening(stopping = false) {
  const audio = $("audio");
  const item = currentItem();
  if (!item) return;
  const entry = (listening[item.item_id] ||= { seconds: 0, ended: false });
  if ((!audio.paused || stopping) && lastTime !== null) {
    const step = audio.currentTime - lastTime;
    if (step > 0 && step < 1.5) entry.seconds += step;
  }
  lastTime = audio.currentTime;
  renderPlayer();
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
    entry.append(speaker, document.createTextNode(turn.text));
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

function keepDraft() {
  if (sequence.length === 0 || $("rating").hidden) return "";
  const item = currentItem();
  if (sameChoice(draft, savedDraft(item.item_id))) {
    delete drafts[item.item_id];
    return "";
  }
  drafts[item.item_id] = { ...draft };
  return `Your unsaved choice for ${isPractice(position) ? "practice dialogue" : "dialogue"} ` +
    `${isPractice(position) ? position + 1 : position - state.practice.length + 1} is kept as a draft; ` +
    "it is saved only with Save (Enter).";
}

// `note` is shown in the status line; set here, before any await, so a late answer never overwrites it.
async function show(index, note = "") {
  const kept = keepDraft();
  position = index;
  const item = currentItem();
  document.body.dataset.item = item.item_id;
  const saved = state.ratings[item.item_id];
  draft = drafts[item.item_id] ? { ...drafts[item.item_id] } : savedDraft(item.item_id);
  const audio = $("audio");
  audio.pause();
  audio.src = `audio/${item.item_id}.wav`;
  playReported = false;
  lastTime = null;
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
  keepDraft();
  $("audio").pause();
  delete document.body.dataset.item;
  if (state.completion) {
    $("completion").hidden = false;
    $("completion-code").textContent = state.completion.code;
    if (state.completion.redirect_url) {
      $("redirect").href = state.completion.redirect_url;
      $("redirect").hidden = false;
    }
  }
  showScreen("done", "done-title");
  render();
}

function validationError() {
  if (draft.unsafe === null) return "Choose safe (S) or unsafe (U) first.";
  if (draft.unsafe && (draft.category === null || draft.severity === null)) {
    return "An unsafe dialogue needs a category (← →) and a severity (1–5).";
  }
  return "";
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
  const problem = validationError();
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
  if (answer.completion) state.completion = answer.completion;
  render();
  if (practice && answer.feedback) return showFeedback(answer.feedback);
  await moveOn(`Saved dialogue ${position - state.practice.length + 1}.`);
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
  lastTime = 0;
  $("audio").play().catch(fail);
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

function isControl(target) {
  return target.closest && target.closest("button, a[href], input, select, summary, textarea") !== null;
}

function onKey(event) {
  if (event.ctrlKey || event.metaKey || event.altKey || !state || isTextEntry(event.target)) return;
  const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
  if ((key === "Enter" || key === " ") && isControl(event.target)) return; // the control's own action
  const screen = document.body.dataset.screen;
  if (screen === "done" && key === "[") {
    event.preventDefault();
    show(sequence.length - 1).catch(fail);
    return;
  }
  if (screen !== "rating" || awaitingFeedback) return;
  const actions = {
    " ": togglePlay,
    r: restart,
    t: () => revealTranscript().catch(fail),
    s: () => choose({ unsafe: false }),
    u: () => choose({ unsafe: true }),
    ArrowLeft: () => cycleCategory(-1),
    ArrowRight: () => cycleCategory(1),
    Enter: () => submit().catch(fail),
    "[": () => position > 0 && show(position - 1).catch(fail),
    "]": () => position < sequence.length - 1 && show(position + 1).catch(fail),
  };
  if (/^[1-5]$/.test(key)) actions[key] = () => choose({ unsafe: true, severity: Number(key) });
  if (key in actions) {
    event.preventDefault();
    actions[key]();
  }
}

async function answerConsent(accept) {
  await api("api/consent", { accept });
  state.consent = accept;
  if (accept) showScreen("instructions", "instructions-title");
  else showScreen("refused", "refused-title");
}

function startRating() {
  const first = nextUnrated(-1);
  if (first === -1) showDone();
  else show(first).catch(fail);
}

function wire() {
  const audio = $("audio");
  audio.addEventListener("playing", () => {
    lastTime = audio.currentTime;
    renderPlayer();
    if (playReported) return;
    playReported = true;
    api("api/event", { item_id: currentItem().item_id, kind: "play" }).catch(fail);
  });
  audio.addEventListener("timeupdate", () => trackListening());
  audio.addEventListener("pause", () => {
    trackListening(true);
    lastTime = null;
  });
  audio.addEventListener("seeking", () => { lastTime = null; });
  audio.addEventListener("loadedmetadata", renderPlayer);
  audio.addEventListener("ended", () => {
    trackListening(true);
    lastTime = null;
    listening[currentItem().item_id].ended = true;
  });
  $("play").addEventListener("click", togglePlay);
  $("restart").addEventListener("click", restart);
  $("accept").addEventListener("click", () => answerConsent(true).catch(fail));
  $("refuse").addEventListener("click", () => answerConsent(false).catch(fail));
  $("reconsider").addEventListener("click", () => showScreen("consent", "consent-title"));
  $("start").addEventListener("click", startRating);
  $("show-transcript").addEventListener("click", () => revealTranscript().catch(fail));
  $("unsure").addEventListener("change", () => choose({ unsure: $("unsure").checked }));
  $("comment").addEventListener("input", () => choose({ comment: $("comment").value }));
  $("submit").addEventListener("click", () => submit().catch(fail));
  $("continue").addEventListener("click", () => moveOn("").catch(fail));
  $("previous").addEventListener("click", () => show(position - 1).catch(fail));
  $("next").addEventListener("click", () => show(position + 1).catch(fail));
  $("review").addEventListener("click", () => show(0).catch(fail));
  document.addEventListener("keydown", onKey);
  document.addEventListener("visibilitychange", reportOpen);
  window.addEventListener("beforeunload", (event) => {
    keepDraft();
    if (Object.keys(drafts).length) event.preventDefault();
  });
}

async function start() {
  state = await api("api/state");
  sequence = [...state.practice, ...state.items];
  buildTexts();
  buildChoices();
  wire();
  render();
  if (state.consent === null) showScreen("consent", "consent-title");
  else if (state.consent === false) showScreen("refused", "refused-title");
  else if (Object.keys(state.ratings).length === 0) showScreen("instructions", "instructions-title");
  else startRating();
  document.body.dataset.ready = "true";
}

start().catch(fail);
