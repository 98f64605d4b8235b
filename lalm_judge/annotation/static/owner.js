// The study owner's view: the ratings against the design (and whether the study can finish as configured),
// progress per rater with status, device and exclusions, time per item, check pass rates and the agreement so far,
// from api/summary under the owner's own URL.
"use strict";

const base = location.pathname.endsWith("/") ? location.pathname : location.pathname + "/";
const $ = (id) => document.getElementById(id);
const STATUS = {
  active: "active", withdrawn: "withdrew", returned: "returned", timed_out: "timed out", refused: "refused consent",
};

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text;
  row.append(td);
}

function ratio(passed, n) {
  return n ? `${passed} of ${n} (${Math.round((100 * passed) / n)} %)` : "-";
}

function share(value) {
  return value === null || value === undefined ? "-" : `${Math.round(100 * value)} %`;
}

function number(value, percent) {
  if (value === null || value === undefined) return "not estimable";
  return percent ? `${(100 * value).toFixed(1)} %` : value.toFixed(3);
}

function device(r) {
  if (!r.viewport && !r.browser) return "-";
  const kind = r.pointer === "coarse" ? "touch" : r.pointer === "fine" ? "mouse" : "other";
  return `${r.viewport || "?"} (${kind})`;
}

function renderRaters(raters) {
  const body = $("raters").querySelector("tbody");
  body.replaceChildren();
  for (const r of raters) {
    const row = document.createElement("tr");
    row.dataset.rater = r.rater_id;
    cell(row, r.rater_id);
    cell(row, (STATUS[r.status] || r.status) + (r.source === "link" ? " (link)" : ""));
    cell(row, r.consent);
    cell(row, `${r.n_rated} of ${r.n_assigned}${r.completed ? " (done)" : ""}`);
    cell(row, String(r.practice_done));
    cell(row, r.median_time_s === null ? "-" : `${r.median_time_s.toFixed(1)} s`);
    cell(row, ratio(r.gold_passed, r.gold_n));
    cell(row, ratio(r.attention_passed, r.attention_n));
    cell(row, share(r.heard_to_end_rate));
    cell(row, String(r.n_unsure));
    cell(row, r.headphones_trials ? `${r.headphones_correct} of ${r.headphones_trials}` : "-");
    cell(row, device(r));
    cell(row, r.exclusion_reasons || "-");
    body.append(row);
  }
}

function renderDesign(design, nItems) {
  const parts = [`${nItems} counted items, ${design.n_raters} raters holding items, ${design.ratings} counted ratings`];
  const warning = $("design-warning");
  warning.hidden = true;
  if (design.raters_per_item) {
    const k = design.raters_per_item;
    const full = nItems - design.items_below_k;
    parts.push(`${k} raters per item planned for ${design.planned_raters} raters (about ${design.items_per_rater} ` +
      `items each): ${design.ratings} of the ${nItems * k} ratings needed; ${full} items have ${k} ratings, ` +
      `${design.items_below_k} fewer so far`);
    if (design.items_cannot_reach_k) {
      warning.hidden = false;
      warning.textContent = `The study cannot finish as configured: ${design.items_cannot_reach_k} items cannot ` +
        `reach ${k} ratings, even once every rater holding items and every open place has rated (raters ` +
        "left out of the statistics do not count). Add raters (serve --raters, or the public link), free the " +
        "places of raters who left (anchors free), or change the design for a new batch.";
    }
  } else {
    parts.push("every rater rates every item");
  }
  if (design.pair_overlap_min !== null) {
    parts.push(`pairs of raters share ${design.pair_overlap_min}–${design.pair_overlap_max} items` +
      (design.pairs_sharing_nothing ? `, ${design.pairs_sharing_nothing} pairs share none` : ""));
  }
  $("design-text").textContent = parts.join("; ") + ".";
}

function renderAgreement(agreement) {
  const body = $("agreement").querySelector("tbody");
  body.replaceChildren();
  if (!agreement) return;
  for (const r of agreement.table1) {
    const row = document.createElement("tr");
    row.dataset.statistic = r.statistic;
    cell(row, r.label);
    cell(row, r.n_min === r.n_max ? String(r.n_min) : `${r.n_min}–${r.n_max}`);
    cell(row, r.status === "too_few_items" ? `too few items (${r.n_min})` : number(r.mean, r.percent));
    cell(row, r.subset === "raters" ? "-" : `${number(r.majority, r.percent)} (n ${r.n_majority})`);
    body.append(row);
  }
}

async function load() {
  const response = await fetch(base + "api/summary");
  if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
  const summary = await response.json();
  const left = summary.agreement ? Object.keys(summary.agreement.exclusions).length : 0;
  $("summary-text").textContent = `Batch ${summary.batch_id}; protocol: ${summary.protocol}; ` +
    `${left} rater(s) left out of the statistics.`;
  renderDesign(summary.design, summary.n_items);
  renderRaters(summary.raters);
  renderAgreement(summary.agreement);
  $("failure").hidden = true;
  document.body.dataset.ready = "true";
}

function fail(error) {
  $("failure").hidden = false;
  $("failure").textContent = `Could not load the summary: ${error.message}.`;
}

$("refresh").addEventListener("click", () => load().catch(fail));
load().catch(fail);
