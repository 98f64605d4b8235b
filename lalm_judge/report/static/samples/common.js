// What both sample viewers share: loading the data files (scripts, since a page opened from file:// cannot
// fetch), the state in the address's fragment, small DOM helpers, tables, the list's pager and the player that
// plays a sequence of clips and silences as one timeline.
"use strict";

const LALM_VIEWER = (() => {
  const store = new Map();
  const pending = new Map();

  function settle(key, outcome, value) {
    const waiter = pending.get(key);
    if (waiter) waiter[outcome](value);
  }

  // Called by every data file: LALM_VIEWER.put("<key>", {...}).
  function put(key, value) {
    store.set(key, value);
    settle(key, "resolve", value);
  }

  // Called by a packed data file: LALM_VIEWER.unpack("<key>", "<base64 of gzip-compressed JSON>").
  function unpack(key, packed) {
    const bytes = Uint8Array.from(atob(packed), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    new Response(stream).json().then(
      (value) => put(key, value),
      (error) => settle(key, "reject", new Error(`data file for ${key} does not unpack: ${error.message}`))
    );
  }

  // The data file data/<key>.js, loaded once.
  function load(key) {
    if (store.has(key)) return Promise.resolve(store.get(key));
    if (pending.has(key)) return pending.get(key).promise;
    const waiter = {};
    waiter.promise = new Promise((resolve, reject) => Object.assign(waiter, { resolve, reject }));
    pending.set(key, waiter);
    const script = document.createElement("script");
    script.src = "data/" + key.split("/").map(encodeURIComponent).join("/") + ".js";
    script.onerror = () => waiter.reject(new Error("data file " + decodeURI(script.src) + " is missing or unreadable"));
    document.head.appendChild(script);
    return waiter.promise;
  }

  // ---- the state in the fragment: #view=list&judge=...&severity=5 -------------------------------------
  function readState() {
    return Object.fromEntries(new URLSearchParams(location.hash.replace(/^#/, "")));
  }

  function stateHash(state) {
    const shown = Object.entries(state).filter(([, value]) => value !== "" && value !== null && value !== undefined);
    return "#" + new URLSearchParams(shown).toString();
  }

  // ---- DOM ---------------------------------------------------------------------------------------------
  function el(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else if (name === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(name, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function announce(message) {
    document.getElementById("status").textContent = message;
  }

  const DASH = "–";

  // "3 judge cells", "1 judge cell".
  function count(n, noun) {
    return `${n} ${noun}${n === 1 ? "" : "s"}`;
  }

  // A raw model answer as written (whitespace kept); an empty or blank one says so.
  function rawAnswer(value) {
    if (value === null || value === undefined) return el("span", { class: "raw", text: DASH });
    if (!value.trim()) return el("span", { class: "raw blank", text: `(blank: ${count(value.length, "whitespace character")})` });
    return el("span", { class: "raw", text: value });
  }

  function number(value, digits = 3) {
    return value === null || value === undefined ? DASH : Number(value).toFixed(digits);
  }

  function text(value) {
    if (value === null || value === undefined || value === "") return DASH;
    if (typeof value === "number") return Number.isInteger(value) ? String(value) : number(value);
    if (typeof value === "boolean") return value ? "yes" : "no";
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  // A table with a caption, column headers and rows of cells (strings or nodes), in a focusable scroll region.
  function table(caption, headers, rows, options = {}) {
    const head = el("tr", {}, headers.map((h) => el("th", { scope: "col", text: h })));
    const body = rows.map((cells, i) =>
      el(
        "tr",
        { class: options.rowClass ? options.rowClass(i) : null },
        cells.map((cell, j) =>
          j === 0 && options.rowHeaders
            ? el("th", { scope: "row" }, cell)
            : el("td", {}, typeof cell === "string" || cell instanceof Node ? cell : text(cell))
        )
      )
    );
    if (!rows.length) body.push(el("tr", {}, el("td", { colspan: headers.length, text: options.empty || "no rows" })));
    const tableNode = el("table", { class: "data" }, el("caption", { text: caption }), el("thead", {}, head), el("tbody", {}, body));
    return el("div", { class: "scroll", tabindex: "0", role: "region", "aria-label": caption }, tableNode);
  }

  // A labelled select of (value, label) options, the first being "any" unless told otherwise.
  function select(id, label, options, value, onchange, any = "any") {
    const choices = (any === null ? [] : [["", any]]).concat(options.map((o) => (Array.isArray(o) ? o : [String(o), String(o)])));
    const node = el(
      "select",
      { id, name: id, onchange },
      choices.map(([v, l]) => el("option", { value: v, selected: String(value ?? "") === v ? true : null, text: l }))
    );
    return el("div", { class: "field" }, el("label", { for: id, text: label }), node);
  }

  // A labelled number field of a filter, named after the state key it sets.
  function numberInput(name, label, value) {
    const id = "f-" + name;
    const node = el("input", { id, name, type: "number", step: "0.01", value: value ?? "", onchange: filterChanged });
    return el("div", { class: "field" }, el("label", { for: id, text: label }), node);
  }

  // ---- pages of a long list ------------------------------------------------------------------------------
  const PAGE_SIZE = 50;

  function pager(total, page, onpage) {
    const pages = Math.max(1, Math.ceil(total / PAGE_SIZE));
    return el(
      "nav",
      { class: "pager", "aria-label": "Pages of the list" },
      el("button", { type: "button", disabled: page <= 0 ? true : null, onclick: () => onpage(page - 1), text: "Previous page" }),
      el("span", { text: ` page ${page + 1} of ${pages} (${total} rows) ` }),
      el("button", { type: "button", disabled: page >= pages - 1 ? true : null, onclick: () => onpage(page + 1), text: "Next page" })
    );
  }

  // ---- the player: a timeline of segments, each a clip or a silence, played one after another ----------
  // segments: [{clip: url, duration, turn, label} | {silence: seconds, turn, label}]; `turn` groups segments.
  class Player {
    constructor(root, audio) {
      this.root = root;
      this.audio = audio;
      this.segments = [];
      this.index = -1;
      this.timer = null;
      this.silenceStart = 0;
      this.offset = 0;
      this.playing = false;
      this.onchange = () => {};
      audio.addEventListener("ended", () => this.next());
      audio.addEventListener("timeupdate", () => this.onchange(this.state()));
      audio.addEventListener("error", () => {
        announce("cannot play " + decodeURI(audio.currentSrc || audio.src) + ": the file is missing or unreadable");
        this.stop();
      });
    }

    load(segments) {
      this.stop();
      let start = 0;
      this.segments = segments.map((segment) => {
        const duration = segment.clip ? segment.duration : segment.silence;
        const placed = { ...segment, start, duration };
        start += duration;
        return placed;
      });
      this.total = start;
      this.onchange(this.state());
    }

    firstOfTurn(turn) {
      return this.segments.findIndex((s) => s.turn === turn && !s.gap);
    }

    play(from = 0) {
      this.stop();
      this.claim();
      this.playing = true;
      this.start(from, 0);
    }

    start(index, offset) {
      this.clearTimer();
      if (index < 0 || index >= this.segments.length) return this.stop();
      this.index = index;
      const segment = this.segments[index];
      this.root.dataset.turn = segment.turn ?? "";
      this.root.dataset.playing = "true";
      if (segment.clip) {
        if (this.audio.getAttribute("src") !== segment.clip) this.audio.setAttribute("src", segment.clip);
        this.audio.currentTime = offset;
        this.audio.play().catch((error) => {
          if (error.name !== "AbortError") announce("the browser refused to play the audio: " + error.message);
        });
      } else {
        this.audio.pause();
        this.offset = offset;
        this.silenceStart = performance.now();
        this.timer = setTimeout(() => this.next(), Math.max(0, segment.duration - offset) * 1000);
        this.ticker = setInterval(() => this.onchange(this.state()), 200);
      }
      this.onchange(this.state());
    }

    next() {
      if (!this.playing) return;
      this.start(this.index + 1, 0);
    }

    // Pause where it is; resume() goes on from there.
    pause() {
      if (!this.playing) return;
      const segment = this.segments[this.index];
      this.resumeAt = { index: this.index, offset: segment && segment.clip ? this.audio.currentTime : this.elapsedSilence() };
      this.playing = false;
      this.clearTimer();
      this.audio.pause();
      this.root.dataset.playing = "false";
      this.onchange(this.state());
    }

    // One player sounds at a time: starting one stops the others.
    claim() {
      if (Player.active && Player.active !== this) Player.active.stop();
      Player.active = this;
    }

    resume() {
      if (this.playing) return;
      const at = this.resumeAt || { index: 0, offset: 0 };
      this.claim();
      this.playing = true;
      this.start(at.index, at.offset);
    }

    toggle() {
      if (this.playing) this.pause();
      else this.resume();
    }

    stop() {
      this.playing = false;
      this.resumeAt = null;
      this.clearTimer();
      this.audio.pause();
      this.index = -1;
      this.root.dataset.playing = "false";
      this.onchange(this.state());
    }

    clearTimer() {
      clearTimeout(this.timer);
      clearInterval(this.ticker);
      this.timer = this.ticker = null;
    }

    elapsedSilence() {
      return this.offset + (performance.now() - this.silenceStart) / 1000;
    }

    // {time, total, turn, playing}: where the timeline is.
    state() {
      const segment = this.segments[this.index];
      let within = 0;
      if (segment) within = segment.clip ? this.audio.currentTime : Math.min(segment.duration, this.playing ? this.elapsedSilence() : this.offset);
      return { time: segment ? segment.start + within : 0, total: this.total || 0, turn: segment ? segment.turn : null, playing: this.playing };
    }
  }

  // The player's controls and timeline: one button per turn (its width its duration), the changed turn marked.
  function playerWidget(id, segments, options) {
    const audio = el("audio", { id: id + "-audio", preload: "none" });
    const root = el("div", { class: "player", id, dataset: { turn: "", playing: "false" } });
    const player = new Player(root, audio);
    const turns = [];
    for (const segment of segments) {
      if (segment.gap) continue;
      const last = turns[turns.length - 1];
      if (last && last.turn === segment.turn) last.duration += segment.clip ? segment.duration : segment.silence;
      else turns.push({ turn: segment.turn, label: segment.label, changed: segment.changed, duration: segment.clip ? segment.duration : segment.silence });
    }
    const total = segments.reduce((sum, s) => sum + (s.clip ? s.duration : s.silence), 0) || 1;
    const position = el("span", { class: "position", "aria-hidden": "true" });
    const bar = el("progress", { max: "1000", value: "0", "aria-label": "Position in the dialogue" });
    const playButton = el("button", { type: "button", class: "play", onclick: () => player.toggle(), text: "Play", "aria-keyshortcuts": "P" });
    const fromChanged = options.changedTurn === null || options.changedTurn === undefined
      ? null
      : el("button", {
          type: "button",
          class: "from-changed",
          "aria-keyshortcuts": "C",
          onclick: () => player.play(player.firstOfTurn(options.changedTurn)),
          text: options.changedLabel || "Play from the changed turn",
        });
    const timeline = el(
      "ol",
      { class: "timeline", "aria-label": "Turns: play from a turn" },
      turns.map((t) =>
        el(
          "li",
          { style: `flex-grow: ${Math.max(t.duration, 0.05) / total}`, class: t.changed ? "changed" : null, dataset: { turn: t.turn } },
          el("button", {
            type: "button",
            onclick: () => player.play(player.firstOfTurn(t.turn)),
            "aria-label": `Play from ${t.label}${t.changed ? " (changed turn)" : ""}, ${t.duration.toFixed(1)} s`,
            text: t.label + (t.changed ? " (changed)" : ""),
          })
        )
      )
    );
    player.onchange = (state) => {
      playButton.textContent = state.playing ? "Pause" : "Play";
      bar.value = Math.round((1000 * state.time) / (state.total || 1));
      position.textContent = `${state.time.toFixed(1)} s / ${state.total.toFixed(1)} s`;
      for (const item of timeline.children) item.classList.toggle("current", state.turn !== null && String(state.turn) === item.dataset.turn);
    };
    player.load(segments);
    root.append(el("div", { class: "controls" }, playButton, fromChanged, position), bar, timeline, audio);
    root.player = player;
    return root;
  }

  // Keys that work anywhere but in a form field: P plays or pauses, C plays from the changed turn.
  function shortcuts(handlers) {
    document.addEventListener("keydown", (event) => {
      if (event.ctrlKey || event.metaKey || event.altKey) return;
      if (event.target.closest && event.target.closest("input, select, textarea")) return;
      const handler = handlers[event.key.toLowerCase()];
      if (handler) {
        event.preventDefault();
        handler(event);
      }
    });
  }

  // After a view is drawn again: focus the control that had the focus (a filter, a version), else the heading.
  function restoreFocus(container, focusedId) {
    const again = focusedId && container.querySelector("#" + CSS.escape(focusedId));
    if (again && again.tagName !== "H2") return again.focus();
    const heading = container.querySelector("h2");
    if (heading) {
      heading.setAttribute("tabindex", "-1");
      heading.focus();
    }
  }

  // ---- what both lists share: the judge-cell filters, the filter form's fields, the cell limit ----------
  const CELL_FILTERS = [
    ["judge", "Judge"],
    ["modality", "Modality"],
    ["transcript_source", "Transcript source"],
    ["prompt", "Prompt"],
  ];
  // Above this many cells a list asks for a narrower choice (each cell is one file to load).
  const MAX_CELLS = 80;

  function cellLabel(cell) {
    return `${cell.judge} · ${cell.modality}-${cell.transcript_source} · ${cell.prompt}`;
  }

  function distinct(values) {
    return [...new Set(values.filter((v) => v !== null && v !== undefined))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  }

  function matchingCells(cells, state, filters) {
    return cells.filter((c) => filters.every(([key]) => !state[key] || String(c[key]) === state[key]));
  }

  // A filter changed: the list again, from its first page, with the new value in the address.
  function filterChanged(event) {
    const next = { ...readState(), view: "list", page: "" };
    next[event.target.name] = event.target.value;
    location.hash = stateHash(next);
  }

  // A labelled select of a filter, named after the state key it sets.
  function filter(name, label, options, state, any = "any") {
    const field = select("f-" + name, label, options, state[name], filterChanged, any);
    field.querySelector("select").name = name;
    return field;
  }

  function cellFieldset(cells, state, filters) {
    return el("fieldset", {}, el("legend", { text: "Judge cell" }), filters.map(([key, label]) => filter(key, label, distinct(cells.map((c) => c[key])), state)));
  }

  // The list's section: its heading, what a row is, and the filters.
  function listSection(title, intro, form) {
    return el("section", { id: "list-view", "aria-labelledby": "list-title" }, el("h2", { id: "list-title", text: title }), el("p", { text: intro }), form);
  }

  function tooManyCells(n) {
    return el("p", { class: "notice", text: `${n} judge cells match: choose a judge, modality, prompt or condition (at most ${MAX_CELLS} cells at once).` });
  }

  // The list's pager and table (rows already filtered and sorted; `row` gives the cells of one).
  function listTable(rows, state, cells, headers, row) {
    const page = Math.min(Number(state.page || 0), Math.max(0, Math.ceil(rows.length / PAGE_SIZE) - 1));
    const onpage = (p) => (location.hash = stateHash({ ...readState(), page: String(p) }));
    const body = rows.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE).map(row);
    const caption = `${count(rows.length, "row")} from ${count(cells.length, "judge cell")}`;
    return [pager(rows.length, page, onpage), table(caption, headers, body, { rowHeaders: true })];
  }

  function showError(error) {
    document.getElementById("main").replaceChildren(el("p", { class: "error", role: "alert", text: String(error.message || error) }));
  }

  // Load the catalog, then draw the view the address names on every change of it: `draw(state)` returns the
  // view's node. Players stop, the focus comes back to the control that had it, and the body says when the view
  // is drawn and for which address (tests and tools wait for it).
  function start(draw, onCatalog) {
    async function render() {
      const state = readState();
      document.body.dataset.ready = "false";
      const focused = document.activeElement && document.activeElement.id;
      try {
        const view = await draw(state);
        document.querySelectorAll(".player").forEach((p) => p.player.stop());
        document.getElementById("main").replaceChildren(view);
        restoreFocus(view, focused);
      } catch (error) {
        showError(error);
      }
      document.body.dataset.shown = location.hash;
      document.body.dataset.ready = "true";
    }
    load("catalog").then(
      (catalog) => {
        onCatalog(catalog);
        window.addEventListener("hashchange", render);
        render();
      },
      (error) => {
        showError(error);
        document.body.dataset.ready = "true";
      }
    );
  }

  return { CELL_FILTERS, MAX_CELLS, cellLabel, distinct, matchingCells, filter, cellFieldset, listSection, tooManyCells, listTable, start, put, unpack, load, readState, stateHash, el, announce, number, text, table, select, numberInput, pager, PAGE_SIZE, playerWidget, shortcuts, restoreFocus, DASH, count, rawAnswer };
})();
