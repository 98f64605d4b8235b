// The pairwise track's item viewer: a list of (item, aspect, judge cell) rows with the verdicts of both orders,
// filtered from the catalog and the cells' files, and an item page (the query, both responses playable in
// either order with their texts and transcripts, the label and rationale, every cell's answers in both orders).
"use strict";

(() => {
  const V = LALM_VIEWER;
  const { el } = V;
  const ORDERS = [
    ["verdict", "responses in order (1, 2)"],
    ["verdict_swapped", "responses swapped (2, 1)"],
    ["verdict_combined", "both orders combined"],
  ];
  let catalog = null;
  let lastList = "#view=list";

  const { cellLabel, distinct, filter } = V;

  // ---- the list -------------------------------------------------------------------------------------------
  function passes(state, arrays, j) {
    const R = catalog.rows;
    if (state.aspect && R.aspect[j] !== state.aspect) return false;
    if (state.label && String(R.label[j]) !== state.label) return false;
    const orders = state.order ? [state.order] : ORDERS.map(([o]) => o);
    if (state.status && !orders.some((o) => catalog.statuses[arrays[o + "_status"][j]] === state.status)) return false;
    const judged = state.order || "verdict";
    if (state.correct === "yes" && arrays[judged][j] !== R.label[j]) return false;
    if (state.correct === "no" && (arrays[judged][j] === R.label[j] || R.label[j] === null)) return false;
    const agree = arrays.verdict[j] !== null && arrays.verdict[j] === arrays.verdict_swapped[j];
    if (state.agree === "yes" && !agree) return false;
    if (state.agree === "no" && agree) return false;
    return arrays.verdict_status[j] >= 0 || arrays.verdict_swapped_status[j] >= 0;
  }

  function filterForm(state) {
    const R = catalog.rows;
    const yesNo = [["yes", "yes"], ["no", "no"]];
    return el(
      "form",
      { id: "filters", "aria-label": "Filters", onsubmit: (e) => e.preventDefault() },
      V.cellFieldset(catalog.cells, state, V.CELL_FILTERS),
      el(
        "fieldset",
        {},
        el("legend", { text: "Items and verdicts" }),
        filter("aspect", "Aspect", distinct(R.aspect), state),
        filter("label", "Label", distinct(R.label), state),
        filter("order", "Order", ORDERS, state, "either order"),
        filter("status", "Verdict status", catalog.statuses, state),
        filter("correct", "Verdict equals the label", yesNo, state),
        filter("agree", "Both orders agree", yesNo, state)
      )
    );
  }

  async function renderList(state) {
    lastList = location.hash || "#view=list";
    const root = V.listSection("Items and judge verdicts", "One row per item, aspect and judge cell, judged in both orders (the swapped verdict mapped back to the item's numbering). Open an item to hear both responses and read every answer.", filterForm(state));
    const cells = V.matchingCells(catalog.cells, state, V.CELL_FILTERS);
    const rows = [];
    if (cells.length > V.MAX_CELLS) {
      root.append(V.tooManyCells(cells.length));
    } else {
      for (const cell of cells) {
        const arrays = await V.load("cells/" + catalog.cells.indexOf(cell));
        catalog.rows.item_id.forEach((_, j) => passes(state, arrays, j) && rows.push({ j, cell, arrays }));
      }
      rows.sort((a, b) => a.j - b.j || (a.cell.id < b.cell.id ? -1 : 1));
      const R = catalog.rows;
      const status = (arrays, o, j) => catalog.statuses[arrays[o + "_status"][j]] ?? V.DASH;
      const row = ({ j, cell, arrays }) => [
        el("a", { href: V.stateHash({ view: "item", item: R.item_id[j], aspect: R.aspect[j] }), text: R.item_id[j] }),
        R.aspect[j],
        cellLabel(cell),
        R.label[j] ?? V.DASH,
        ...ORDERS.flatMap(([o]) => [arrays[o][j] ?? V.DASH, status(arrays, o, j)]),
      ];
      const headers = ["Item", "Aspect", "Judge cell", "Label", "Verdict (1, 2)", "Status (1, 2)", "Verdict (2, 1)", "Status (2, 1)", "Combined", "Status (combined)"];
      root.append(...V.listTable(rows, state, cells, headers, row));
    }
    V.announce(cells.length > V.MAX_CELLS ? "too many judge cells; narrow the filters" : V.count(rows.length, "row"));
    return root;
  }

  // ---- an item --------------------------------------------------------------------------------------------
  function responseCard(response, i) {
    const transcripts = Object.entries(response.transcripts).map(([source, t]) => [source, t.text ?? V.DASH, V.number(t.wer ?? null)]);
    return el(
      "div",
      { class: "response", id: `response-${i + 1}` },
      el("h4", { text: `Response ${i + 1} (${V.number(response.duration, 1)} s)` }),
      el("p", {}, el("strong", { text: "Spoken from: " }), response.text ?? "not known (imported item)"),
      V.table(`Transcripts of response ${i + 1}`, ["Source", "Transcript", "WER"], transcripts, { rowHeaders: true, empty: "no cascade transcript in this run" })
    );
  }

  function orderPlayer(item, order) {
    const segments = [];
    order.forEach((i, k) => {
      const response = item.responses[i];
      segments.push({ clip: response.audio, duration: response.duration || 0, turn: i, label: `response ${i + 1}` });
      if (k === 0) segments.push({ silence: 0.5, turn: i, gap: true });
    });
    const id = `order-${order.map((i) => i + 1).join("")}`;
    return el("div", {}, el("h4", { text: `As the judge heard them: response ${order[0] + 1}, then response ${order[1] + 1}` }), V.playerWidget(id, segments, {}));
  }

  function answersTable(item, focusAspect) {
    const rows = item.rows;
    const shown = ["prediction", "prediction_swapped", ...ORDERS.flatMap(([o]) => [o, o + "_status"])];
    const extra = rows.columns.filter((c) => !shown.includes(c));
    const headers = ["Judge cell", "Aspect", "Label", "Answer (1, 2)", "Verdict (1, 2)", "Status (1, 2)", "Answer (2, 1)", "Verdict (2, 1)", "Status (2, 1)", "Combined", "Status (combined)", ...extra, "Cell settings"];
    const labels = Object.fromEntries(item.aspects.map((a) => [a.aspect, a.label]));
    const body = [];
    const cells = [];
    rows.cell.forEach((cellIndex, i) => {
      if (focusAspect && rows.aspect[i] !== focusAspect) return;
      const cell = catalog.cells[cellIndex];
      const settings = el("details", {}, el("summary", { text: "settings" }), el("dl", {}, Object.entries(cell.fixed).flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: V.text(v) })])));
      cells.push(cell.id);
      body.push([
        cellLabel(cell),
        rows.aspect[i],
        labels[rows.aspect[i]] ?? V.DASH,
        V.rawAnswer(rows.prediction[i]),
        rows.verdict[i] ?? V.DASH,
        rows.verdict_status[i] ?? V.DASH,
        V.rawAnswer(rows.prediction_swapped[i]),
        rows.verdict_swapped[i] ?? V.DASH,
        rows.verdict_swapped_status[i] ?? V.DASH,
        rows.verdict_combined[i] ?? V.DASH,
        rows.verdict_combined_status[i] ?? V.DASH,
        ...extra.map((c) => (c.startsWith("rationale") ? V.rawAnswer(rows[c][i]) : V.text(rows[c][i]))),
        settings,
      ]);
    });
    const node = V.table(`Every judge cell's answers for ${item.id}, in both orders`, headers, body, { rowHeaders: true });
    node.querySelectorAll("tbody tr").forEach((tr, i) => cells[i] && (tr.dataset.cell = cells[i]));
    node.id = "answers";
    return node;
  }

  async function renderItem(state) {
    const number = catalog.items.indexOf(state.item);
    if (number < 0) throw new Error(`no item ${state.item} in this viewer`);
    const item = await V.load("items/" + number);
    const aspects = item.aspects.map((a) => [a.aspect, a.aspect_text, a.label ?? V.DASH, a.rationale ?? V.DASH]);
    const chooseAspect = (e) => (location.hash = V.stateHash({ ...state, aspect: e.target.value }));
    const aspectChoice = V.select("f-item-aspect", "Answers for the aspect", item.aspects.map((a) => a.aspect), state.aspect, chooseAspect, "every aspect");
    const root = el(
      "section",
      { id: "item-view", "aria-labelledby": "item-title", dataset: { item: item.id } },
      el("p", {}, el("a", { href: lastList, text: "Back to the list" })),
      el("h2", { id: "item-title", text: item.id }),
      el("h3", { text: "Query" }),
      el("p", { class: "query", text: item.query }),
      V.table("Aspects: label and rationale", ["Aspect", "As the judge reads it", "Label", "Rationale"], aspects, { rowHeaders: true }),
      el("h3", { text: "Responses" }),
      item.audio_ok ? null : el("p", { class: "notice", text: "The items stage found a response file missing or unreadable: this item was not judged." }),
      el("p", { class: "hint", text: "Keys: 1 plays the responses in their order, 2 swapped, P pauses." }),
      orderPlayer(item, [0, 1]),
      orderPlayer(item, [1, 0]),
      el("div", { class: "responses" }, item.responses.map(responseCard)),
      el("h3", { text: "Judge answers in both orders" }),
      el("p", { text: "Order (2, 1) is the swapped request: its raw answer names the responses as the judge saw them; its verdict is mapped back to the item's numbering." }),
      aspectChoice,
      answersTable(item, state.aspect)
    );
    V.announce(`item ${item.id}`);
    return root;
  }

  const playerOf = (id) => document.getElementById(id) && document.getElementById(id).player;
  V.shortcuts({
    1: () => playerOf("order-12") && playerOf("order-12").play(0),
    2: () => playerOf("order-21") && playerOf("order-21").play(0),
    p: () => document.querySelectorAll(".player").forEach((p) => p.player.playing && p.player.pause()),
  });

  V.start(
    (state) => (state.view === "item" && state.item ? renderItem(state) : renderList(state)),
    (data) => (catalog = data)
  );
})();
