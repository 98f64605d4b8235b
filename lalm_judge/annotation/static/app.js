// The rating page of lalm-judge's annotation app: one dialogue at a time, rated with buttons or keys.
// Every call goes to the rater's own base URL (the page's path, which carries rater id and token).
"use strict";

const SEVERITY_NAMES = { 1: "very mild", 2: "mild", 3: "moderate", 4: "serious", 5: "severe" };
const base = location.pathname.endsWith("/") ? location.pathname : location.pathname + "/";
const $ = (id) => document.getElementById(id);

let state = null; // the server's answer to api/state, updated as ratings are saved
let position = 0; // index into state.items
let draft = { unsafe: null, category: null, severity: null };
let playReported = false;
let saving = false;

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
      detail = typeof answer.detail === "string" ? answer.detail : JSON.stringify(answer.detail);
    } catch (ignored) {
      // Not JSON: keep the status text.
    }
    throw new Error(`${response.status} ${detail}`);
  }
  return response.json();
}

function currentItem() {
  return state.items[position];
}

function nRated() {
  return Object.keys(state.ratings).length;
}

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

function fail(error) {
  $("failure").hidden = false;
  $("failure").textContent = `Something went wrong: ${error.message}. Reload the page; saved ratings are kept.`;
}

function label(category) {
  return category.replace(/_/g, "-");
}

function buildChoices() {
  for (const category of state.categories) {
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.category = category;
    button.textContent = label(category);
    button.addEventListener("click", () => choose({ unsafe: true, category }));
    $("categories").append(button);
  }
  for (const severity of state.severities) {
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.severity = String(severity);
    button.textContent = `${severity} ${SEVERITY_NAMES[severity] || ""}`.trim();
    button.addEventListener("click", () => choose({ unsafe: true, severity }));
    $("severities").append(button);
  }
  for (const button of $("verdicts").querySelectorAll("button")) {
    button.addEventListener("click", () => choose({ unsafe: button.dataset.unsafe === "1" }));
  }
}

function choose(change) {
  draft = { ...draft, ...change };
  if (draft.unsafe === false) {
    draft.category = null;
    draft.severity = null;
  }
  render();
}

function render() {
  const total = state.items.length;
  $("progress").max = total;
  $("progress").value = nRated();
  $("progress-text").textContent = `${nRated()} of ${total} dialogues rated`;
  $("item-title").textContent = `Dialogue ${position + 1} of ${total}`;
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
  $("previous").disabled = position === 0;
  $("next").disabled = position === total - 1;
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

// `note` is shown in the status line; set here, before any await, so a late answer never overwrites it.
async function show(index, note = "") {
  position = index;
  const item = currentItem();
  document.body.dataset.item = item.item_id;
  const saved = state.ratings[item.item_id];
  draft = saved
    ? { unsafe: saved.unsafe, category: saved.category, severity: saved.severity }
    : { unsafe: null, category: null, severity: null };
  const audio = $("audio");
  audio.pause();
  audio.src = `audio/${item.item_id}.wav`;
  playReported = false;
  $("transcript").hidden = true;
  $("transcript").replaceChildren();
  $("show-transcript").hidden = false;
  $("done").hidden = true;
  $("rating").hidden = false;
  setStatus([note, saved ? "Rated already: saving again replaces your rating." : ""].filter(Boolean).join(" "));
  render();
  await api("api/event", { item_id: item.item_id, kind: "open" });
  // A transcript revealed before (e.g. before a reload) stays visible; showing it again is recorded again.
  if (currentItem() === item && state.revealed.includes(item.item_id)) await revealTranscript();
}

function nextUnrated(after) {
  const total = state.items.length;
  for (let step = 1; step <= total; step += 1) {
    const index = (after + step) % total;
    if (!(state.items[index].item_id in state.ratings)) return index;
  }
  return -1;
}

function showDone() {
  $("audio").pause();
  $("rating").hidden = true;
  $("done").hidden = false;
  delete document.body.dataset.item;
  render();
}

async function submit() {
  if (saving) return;
  if (draft.unsafe === null) return setStatus("Choose safe (S) or unsafe (U) first.", true);
  if (draft.unsafe && (draft.category === null || draft.severity === null)) {
    return setStatus("An unsafe dialogue needs a category (← →) and a severity (1–5).", true);
  }
  const item = currentItem();
  const body = draft.unsafe
    ? { item_id: item.item_id, unsafe: true, category: draft.category, severity: draft.severity }
    : { item_id: item.item_id, unsafe: false };
  saving = true;
  try {
    await api("api/rate", body);
  } finally {
    saving = false;
  }
  state.ratings[item.item_id] = {
    unsafe: draft.unsafe,
    category: draft.category,
    severity: draft.severity,
    transcript_shown: state.revealed.includes(item.item_id),
  };
  const next = nextUnrated(position);
  if (next === -1) showDone();
  else await show(next, `Saved dialogue ${state.items.indexOf(item) + 1}.`);
}

function togglePlay() {
  const audio = $("audio");
  if (audio.paused) audio.play().catch(fail);
  else audio.pause();
}

function cycleCategory(step) {
  const categories = state.categories;
  const now = categories.indexOf(draft.category);
  const index = now === -1 ? (step > 0 ? 0 : categories.length - 1) : (now + step + categories.length) % categories.length;
  choose({ unsafe: true, category: categories[index] });
}

function onKey(event) {
  if (event.ctrlKey || event.metaKey || event.altKey || !state) return;
  if (!$("done").hidden) {
    if (event.key === "[" || event.key === "Enter") {
      event.preventDefault();
      show(state.items.length - 1).catch(fail);
    }
    return;
  }
  const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
  const actions = {
    " ": togglePlay,
    r: () => {
      $("audio").currentTime = 0;
      $("audio").play().catch(fail);
    },
    t: () => revealTranscript().catch(fail),
    s: () => choose({ unsafe: false }),
    u: () => choose({ unsafe: true }),
    ArrowLeft: () => cycleCategory(-1),
    ArrowRight: () => cycleCategory(1),
    Enter: () => submit().catch(fail),
    "[": () => position > 0 && show(position - 1).catch(fail),
    "]": () => position < state.items.length - 1 && show(position + 1).catch(fail),
  };
  if (/^[1-5]$/.test(key)) actions[key] = () => choose({ unsafe: true, severity: Number(key) });
  if (key in actions) {
    // Keys act on the rating, never on a focused button or the audio controls.
    event.preventDefault();
    actions[key]();
  }
}

async function start() {
  state = await api("api/state");
  buildChoices();
  $("audio").addEventListener("playing", () => {
    if (playReported) return;
    playReported = true;
    api("api/event", { item_id: currentItem().item_id, kind: "play" }).catch(fail);
  });
  $("show-transcript").addEventListener("click", () => revealTranscript().catch(fail));
  $("submit").addEventListener("click", () => submit().catch(fail));
  $("previous").addEventListener("click", () => show(position - 1).catch(fail));
  $("next").addEventListener("click", () => show(position + 1).catch(fail));
  $("review").addEventListener("click", () => show(0).catch(fail));
  document.addEventListener("keydown", onKey);
  const first = nextUnrated(-1);
  if (first === -1) showDone();
  else await show(first);
  document.body.dataset.ready = "true";
}

start().catch(fail);
