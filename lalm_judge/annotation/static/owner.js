// The study owner's view: progress per rater, time per item, check pass rates, the assignment achieved and the
// agreement so far, from api/summary under the owner's own URL.
"use strict";

const base = location.pathname.endsWith("/") ? location.pathname : location.pathname + "/";
const $ = (id) => document.getElementById(id);

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

function renderRaters(raters) {
  const body = $("raters").querySelector("tbody");
  body.replaceChildren();
  for (const r of raters) {
    const row = document.createElement("tr");
    row.dataset.rater = r.rater_id;
    cell(row, r.rater_id);
    cell(row, r.consent);
    cell(row, `${r.n_rated} of ${r.n_assigned}${r.completed ? " (done)" : ""}`);
    cell(row, String(r.practice_done));
    cell(row, r.median_time_s === null ? "-" : `${r.median_time_s.toFixed(1)} s`);
    cell(row, ratio(r.gold_passed, r.gold_n));
    cell(row, ratio(r.attention_passed, r.attention_n));
    cell(row, share(r.heard_to_end_rate));
    cell(row, String(r.n_unsure));
    body.append(row);
  }
}

function renderDesign(design, nItems) {
  const parts = [`${nItems} counted items, ${design.n_raters} raters`];
  if (design.raters_per_item) {
    parts.push(`${design.raters_per_item} raters per item planned for ${design.planned_raters} raters ` +
      `(${design.items_per_rater} items each); ${design.items_below_k} items below that so far`);
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
    cell(row, number(r.mean, r.percent));
    cell(row, r.subset === "raters" ? "-" : `${number(r.majority, r.percent)} (n ${r.n_majority})`);
    body.append(row);
  }
}

async function load() {
  const response = await fetch(base + "api/summary");
  if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
  const summary = await response.json();
  const ratings = summary.agreement ? summary.agreement.n_ratings : 0;
  $("summary-text").textContent = `Batch ${summary.batch_id}: ${ratings} counted ratings so far. Protocol: ${summary.protocol}.`;
  renderRaters(summary.raters);
  renderDesign(summary.design, summary.n_items);
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
