// The safety track's sample viewer: a list of scored samples (one row per sample and judge cell) filtered and
// sorted from the catalog and the cells' files, and a sample page (the dialogue on a timeline with its changed
// turn, its turns per transcript source with their WER, every cell's answer, and the control versions).
"use strict";

(() => {
  const V = LALM_VIEWER;
  const { el } = V;
  const CELL_FILTERS = [...V.CELL_FILTERS, ["condition", "Condition"]];
  const SORTS = [
    ["sample", "sample id"],
    ["score_asc", "score, lowest first"],
    ["score_desc", "score, highest first"],
    ["drop_desc", "drop from the safe original, largest first"],
    ["drop_asc", "drop from the safe original, smallest first"],
    ["compare_desc", "difference to the compared cell, largest first"],
    ["compare_asc", "difference to the compared cell, smallest first"],
  ];
  let catalog = null;
  let sampleIndex = null;
  let lastList = "#view=list";

  const { cellLabel, distinct, filter } = V;

  // ---- the list -------------------------------------------------------------------------------------------

  function safeReferences(s) {
    const S = catalog.samples;
    if (!S.severity[s]) return [];
    const dialogue = S.dialogue_id[s];
    return [sampleIndex.get(`${dialogue}.t${S.turn_index[s]}.original`), sampleIndex.get(`${dialogue}.original`)].filter((i) => i !== undefined);
  }

  async function cellScores(cell) {
    const arrays = await V.load("cells/" + catalog.cells.indexOf(cell));
    const order = catalog.orders[cell.condition];
    const position = new Map(order.map((s, j) => [s, j]));
    const score = (s) => {
      const j = position.get(s);
      return j === undefined || arrays.status[j] < 0 ? undefined : arrays.score[j];
    };
    return { cell, arrays, order, score };
  }

  function passes(state, s, score, status) {
    const S = catalog.samples;
    if (state.dialogue && S.dialogue_id[s] !== state.dialogue) return false;
    if (state.category && String(S.category[s] ?? "none") !== state.category) return false;
    if (state.severity && String(S.severity[s]) !== state.severity) return false;
    if (state.turn && String(S.turn_index[s] ?? "") !== state.turn) return false;
    if (state.status && catalog.statuses[status] !== state.status) return false;
    if (state.min !== undefined && state.min !== "" && !(score !== null && score >= Number(state.min))) return false;
    if (state.max !== undefined && state.max !== "" && !(score !== null && score <= Number(state.max))) return false;
    return true;
  }

  async function listRows(state, cells) {
    const compareCell = state.compare ? catalog.cells.find((c) => c.id === state.compare) : null;
    const compared = compareCell ? await cellScores(compareCell) : null;
    const rows = [];
    for (const cell of cells) {
      const { arrays, order, score } = await cellScores(cell);
      order.forEach((s, j) => {
        const status = arrays.status[j];
        if (status < 0 || !passes(state, s, arrays.score[j], status)) return;
        const row = { s, cell, score: arrays.score[j], status: catalog.statuses[status] };
        const ref = safeReferences(s).find((r) => score(r) !== undefined);
        row.safe = ref === undefined ? null : score(ref);
        row.drop = row.safe === null || row.score === null ? null : row.safe - row.score;
        if (compared) {
          const partner = [s, catalog.samples.clean[s]].find((p) => compared.score(p) !== undefined);
          row.compared = partner === undefined ? null : compared.score(partner);
          row.partner = partner === undefined ? null : catalog.samples.id[partner];
          row.difference = row.compared === null || row.compared === undefined || row.score === null ? null : row.score - row.compared;
        }
        rows.push(row);
      });
    }
    return sortRows(rows, state.sort || "sample");
  }

  function sortRows(rows, sort) {
    const ids = catalog.samples.id;
    const byId = (a, b) => (ids[a.s] < ids[b.s] ? -1 : ids[a.s] > ids[b.s] ? 1 : a.cell.id < b.cell.id ? -1 : 1);
    const key = { score_asc: "score", score_desc: "score", drop_desc: "drop", drop_asc: "drop", compare_desc: "difference", compare_asc: "difference" }[sort];
    if (!key) return rows.sort(byId);
    const sign = sort.endsWith("_desc") ? -1 : 1;
    return rows.sort((a, b) => {
      const x = a[key], y = b[key];
      if (x === null || x === undefined) return y === null || y === undefined ? byId(a, b) : 1;
      if (y === null || y === undefined) return -1;
      return x === y ? byId(a, b) : sign * (x - y);
    });
  }

  function versionHash(row) {
    const S = catalog.samples;
    const clean = S.id[S.clean[row.s]];
    return V.stateHash({ view: "sample", sample: clean, version: `${row.cell.condition}/${S.id[row.s]}` });
  }

  function filterForm(state) {
    const cells = catalog.cells;
    const S = catalog.samples;
    const categories = distinct(S.category.map((c) => c ?? "none"));
    return el(
      "form",
      { id: "filters", "aria-label": "Filters", onsubmit: (e) => e.preventDefault() },
      V.cellFieldset(cells, state, CELL_FILTERS),
      el(
        "fieldset",
        {},
        el("legend", { text: "Samples" }),
        filter("dialogue", "Dialogue", distinct(S.dialogue_id), state),
        filter("category", "Category", categories, state),
        filter("severity", "Severity (0: safe)", distinct(S.severity), state),
        filter("turn", "Unsafe or changed turn", distinct(S.turn_index), state),
        filter("status", "Status", catalog.statuses, state),
        V.numberInput("min", "Score at least", state.min),
        V.numberInput("max", "Score at most", state.max)
      ),
      el(
        "fieldset",
        {},
        el("legend", { text: "Order" }),
        filter("sort", "Sort by", SORTS, { sort: state.sort || "sample" }, null),
        filter("compare", "Compared cell", cells.map((c) => [c.id, `${cellLabel(c)} · ${c.condition}`]), state, "none")
      )
    );
  }

  async function renderList(state) {
    lastList = location.hash || "#view=list";
    const root = V.listSection("Samples and judge answers", "One row per scored sample and judge cell. Filter, sort, and open a sample to hear it, read its transcripts and every cell's answer. Drop: the safe original's score in the same cell minus the sample's.", filterForm(state));
    const cells = V.matchingCells(catalog.cells, state, CELL_FILTERS);
    let rows = [];
    if (cells.length > V.MAX_CELLS) {
      root.append(V.tooManyCells(cells.length));
    } else {
      rows = await listRows(state, cells);
      const compare = Boolean(state.compare);
      const headers = ["Sample", "Judge cell", "Condition", "Category", "Severity", "Turn", "Status", "Score", "Safe original", "Drop"];
      if (compare) headers.push("Compared sample", "Its score in the compared cell", "Difference");
      const S = catalog.samples;
      const row = (r) => {
        const cells = [
          el("a", { href: versionHash(r), text: S.id[r.s] }),
          cellLabel(r.cell),
          r.cell.condition,
          S.category[r.s] ?? "none (safe)",
          S.severity[r.s],
          S.turn_index[r.s],
          r.status,
          V.number(r.score),
          V.number(r.safe),
          V.number(r.drop),
        ];
        if (compare) cells.push(r.partner ?? V.DASH, V.number(r.compared), V.number(r.difference));
        return cells;
      };
      root.append(...V.listTable(rows, state, cells, headers, row));
    }
    V.announce(cells.length > V.MAX_CELLS ? "too many judge cells; narrow the filters" : V.count(rows.length, "row"));
    return root;
  }

  // ---- a sample -------------------------------------------------------------------------------------------
  function versionLabel(v) {
    return v.target === null || v.target === undefined || v.condition === "clean" ? v.condition : `${v.condition} (turn ${v.target})`;
  }

  function segmentsOf(dialogue, changedTurn, changedSegments) {
    const segments = [];
    dialogue.turns.forEach((turn, i) => {
      const label = `turn ${i} (${turn.speaker})`;
      const changed = i === changedTurn;
      const parts = changed && changedSegments ? changedSegments : [{ clip: turn.clip, duration: turn.duration }];
      for (const part of parts) segments.push({ ...part, turn: i, label, changed });
      if (i < dialogue.gaps.length) segments.push({ silence: dialogue.gaps[i], turn: i, gap: true });
    });
    return segments;
  }

  function turnTexts(dialogue, variant, version) {
    const turns = dialogue.turns.map((t) => ({ texts: t.texts, wer: t.wer, emotion: t.emotion }));
    if (variant) turns[variant.turn] = { texts: variant.texts, wer: variant.wer, emotion: variant.emotion };
    if (version && version.texts && version.condition !== "clean") {
      turns[version.target] = { ...turns[version.target], texts: version.texts, wer: version.wer || {} };
    }
    return turns;
  }

  function transcriptTable(dialogue, changedTurn, texts) {
    const headers = ["Turn", "Speaker", "Emotion", ...dialogue.sources.map((s) => (s === "gt" ? "text (gt)" : `${s} (WER)`))];
    const rows = dialogue.turns.map((turn, i) => [
      String(i) + (i === changedTurn ? " (changed)" : ""),
      turn.speaker,
      texts[i].emotion ?? V.DASH,
      ...dialogue.sources.map((source) => {
        const value = texts[i].texts[source];
        const wer = texts[i].wer[source];
        return value === undefined ? V.DASH : wer === undefined ? value : `${value} (WER ${V.number(wer)})`;
      }),
    ]);
    return V.table("Turns and transcripts", headers, rows, { rowHeaders: true, rowClass: (i) => (i === changedTurn ? "changed" : null) });
  }

  function rowValue(cell, column, rows, i, dialogue) {
    const fixed = cell.fixed[column];
    if (column in rows && rows[column][i] !== undefined) return rows[column][i];
    if (fixed && typeof fixed === "object" && fixed.by_shard) return fixed.by_shard[dialogue.shard];
    return fixed;
  }

  function answersTable(rows, version, safeRows, dialogue) {
    const columns = rows.columns.filter((c) => !["score", "parse_status", "raw_output"].includes(c));
    const safeScore = new Map();
    if (safeRows) {
      safeRows.cell.forEach((cellIndex, i) => {
        const id = safeRows.samples[safeRows.sample[i]];
        safeScore.set(`${cellIndex}/${id}`, safeRows.score[i]);
      });
    }
    const S = catalog.samples;
    const s = sampleIndex.get(version.id);
    const refs = s === undefined ? [] : safeReferences(s).map((r) => S.id[r]);
    // A control version beside its clean sample: the clean score of the same judge, modality, source and prompt.
    const cleanScore = new Map();
    const cleanId = s === undefined ? null : S.id[S.clean[s]];
    rows.cell.forEach((cellIndex, i) => {
      const cell = catalog.cells[cellIndex];
      if (cell.condition === "clean" && rows.samples[rows.sample[i]] === cleanId) cleanScore.set(cellLabel(cell), rows.score[i]);
    });
    const control = version.condition !== "clean";
    const headers = ["Judge cell", "Score", "Status", "Safe original", ...(control ? ["Clean version"] : []), "Raw answer", ...columns, "Cell settings"];
    const body = [];
    rows.cell.forEach((cellIndex, i) => {
      const cell = catalog.cells[cellIndex];
      if (rows.samples[rows.sample[i]] !== version.id || cell.condition !== version.condition) return;
      const ref = refs.map((id) => safeScore.get(`${cellIndex}/${id}`)).find((v) => v !== undefined);
      const settings = el(
        "details",
        {},
        el("summary", { text: "settings" }),
        el("dl", {}, Object.entries(cell.fixed).flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: V.text(v && v.by_shard ? v.by_shard[dialogue.shard] : v) })]))
      );
      body.push({
        cellIndex,
        cells: [
          `${cellLabel(cell)} · ${cell.condition}`,
          V.number(rows.score[i]),
          rows.parse_status[i] ?? V.DASH,
          V.number(ref ?? null),
          ...(control ? [V.number(cleanScore.get(cellLabel(cell)) ?? null)] : []),
          V.rawAnswer(rows.raw_output[i]),
          ...columns.map((c) => V.text(rowValue(cell, c, rows, i, dialogue))),
          settings,
        ],
      });
    });
    const node = V.table(`Every judge cell's answer for ${version.id} (${version.condition})`, headers, body.map((r) => r.cells), { rowHeaders: true });
    node.querySelectorAll("tbody tr").forEach((tr, i) => body[i] && (tr.dataset.cell = catalog.cells[body[i].cellIndex].id));
    node.id = "answers";
    return node;
  }

  function versionPicker(versions, chosen, sample) {
    const choose = (event) => (location.hash = V.stateHash({ view: "sample", sample, version: event.target.value }));
    return el(
      "fieldset",
      { id: "versions", class: "versions" },
      el("legend", { text: "Version (the clean sample or a control)" }),
      versions.map((v, i) => {
        const value = `${v.condition}/${v.id}`;
        const id = `version-${i}`;
        return el(
          "span",
          { class: "choice" },
          el("input", { type: "radio", name: "version", id, value, checked: value === chosen ? true : null, onchange: choose }),
          el("label", { for: id, text: versionLabel(v) })
        );
      })
    );
  }

  async function renderSample(state) {
    const S = catalog.samples;
    const s = sampleIndex.get(state.sample);
    if (s === undefined) throw new Error(`no sample ${state.sample} in this viewer`);
    const dialogueId = S.dialogue_id[s];
    const [dialogue, rows] = await Promise.all([V.load("dialogues/" + dialogueId), V.load(`rows/${dialogueId}/${state.sample}`)]);
    const original = `${dialogueId}.original`;
    const safeRows = state.sample === original ? rows : await V.load(`rows/${dialogueId}/${original}`).catch(() => null);
    const versions = dialogue.versions[state.sample] || [{ condition: "clean", id: state.sample, target: null }];
    const chosen = state.version && versions.some((v) => `${v.condition}/${v.id}` === state.version) ? state.version : `${versions[0].condition}/${versions[0].id}`;
    const version = versions.find((v) => `${v.condition}/${v.id}` === chosen);
    const variant = dialogue.variants[state.sample] || null;
    const changedTurn = version.target ?? (variant ? variant.turn : null);
    const changedSegments = version.segments || (variant ? [{ clip: variant.clip, duration: variant.duration }] : null);
    const facts = [
      ["dialogue", dialogueId],
      ["category", S.category[s] ?? "none (safe original)"],
      ["severity", S.severity[s]],
      ["unsafe turn", variant ? variant.turn : V.DASH],
      ["turns", dialogue.turns.length],
      ["version shown", versionLabel(version)],
    ];
    if (dialogue.warnings.length) facts.push(["warnings", dialogue.warnings.join("; ")]);
    const root = el(
      "section",
      { id: "sample-view", "aria-labelledby": "sample-title", dataset: { sample: state.sample, version: chosen } },
      el("p", {}, el("a", { href: lastList, text: "Back to the list" })),
      el("h2", { id: "sample-title", text: state.sample }),
      el("dl", { class: "facts" }, facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: V.text(v) })])),
      versionPicker(versions, chosen, state.sample),
      el("h3", { text: "Audio" }),
      el("p", { class: "hint", text: "The dialogue as the judges heard it in this version, assembled from its turn clips. Keys: P plays or pauses, C plays from the changed turn." }),
      version.target !== null && version.target !== undefined && !version.segments
        ? el("p", { class: "notice", text: "The audio of this version's changed turn was not written with this viewer (its transcripts and scores are below)." })
        : V.playerWidget("player", segmentsOf(dialogue, changedTurn, changedSegments), { changedTurn }),
      el("h3", { text: "Turns" }),
      transcriptTable(dialogue, changedTurn, turnTexts(dialogue, variant, version)),
      el("h3", { text: "Judge answers" }),
      answersTable(rows, version, safeRows, dialogue)
    );
    V.announce(`sample ${state.sample}, ${versionLabel(version)}`);
    return root;
  }

  V.shortcuts({
    p: () => document.getElementById("player") && document.getElementById("player").player.toggle(),
    c: () => {
      const button = document.querySelector("#player .from-changed");
      if (button) button.click();
    },
  });

  V.start(
    (state) => (state.view === "sample" && state.sample ? renderSample(state) : renderList(state)),
    (data) => {
      catalog = data;
      sampleIndex = new Map(catalog.samples.id.map((id, i) => [id, i]));
    }
  );
})();
