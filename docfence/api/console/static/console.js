// docfence operator console: plain JS, no external assets. The key lives in sessionStorage and is sent
// as `Authorization: Bearer` on JSON calls only. Every value is written with textContent (never HTML).
"use strict";
const KEY = "docfence.console.key";
const COLORS = { queued: "#f79009", rendering: "#2e90fa", succeeded: "#12b76a", failed: "#f04438",
                 canceled: "#98a2b3", vector: "#2e90fa", raster: "#7a5af8" };
const STATES = ["queued", "rendering", "succeeded", "failed", "canceled"];
const $ = (id) => document.getElementById(id);
let timer = null;
let me = null;
let pages = [];  // cursors of the pages before this one (the first page has none)
let cursor = null;  // this page's cursor
let nextCursor = null;

// A webhook delivery attempt on the job's timeline: its outcome, HTTP status or error, and latency.
function webhookNote(e) {
  if (!e.action.startsWith("webhook_")) return "";
  const d = e.details || {};
  return "  [" + (d.type || "") + " → " + (d.host || "?") + ": " + (e.reason || "") +
    (d.status_code ? " HTTP " + d.status_code : "") + (d.error ? " " + d.error : "") +
    (d.latency_ms != null ? " " + Math.round(d.latency_ms) + " ms" : "") +
    (d.failure_reason ? " — " + d.failure_reason : "") + "]";
}

function el(tag, attrs, ...children) {
  const ns = ["svg", "rect", "text", "line", "g", "title"].includes(tag) ? "http://www.w3.org/2000/svg" : null;
  const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.setAttribute("class", v); else node.setAttribute(k, String(v));
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return node;
}

function show(...ids) {
  for (const id of ["refusal", "login", "overview", "job"]) $(id).hidden = !ids.includes(id);
}

class Refused extends Error {}

async function api(path, options) {
  const key = sessionStorage.getItem(KEY);
  const headers = { Accept: "application/json" };
  if (key) headers.Authorization = "Bearer " + key;
  if (options && options.body) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, Object.assign({ headers, cache: "no-store" }, options || {}));
  if (resp.status === 401 || resp.status === 403) {
    let msg = resp.status === 401 ? "a valid API key is required" : "this key lacks the read, admin or operator scope";
    try { msg = (await resp.json()).error.message || msg; } catch (e) { /* keep the default */ }
    refuse(resp.status, msg);
    throw new Refused(msg);
  }
  if (!resp.ok) throw new Error(path + ": HTTP " + resp.status);
  return resp.json();
}

// An action (cancel, delete, pause, resume): a refusal of the action is shown next to it, it does not
// sign the key out the way a refused read does.
async function act(path, options) {
  const key = sessionStorage.getItem(KEY);
  const headers = { Accept: "application/json", Authorization: "Bearer " + key };
  if (options.body) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, Object.assign({ headers, cache: "no-store" }, options));
  let body = null;
  try { body = await resp.json(); } catch (e) { /* no JSON body */ }
  if (resp.status === 401) { refuse(401, "a valid API key is required"); throw new Refused("401"); }
  if (!resp.ok) {
    const err = body && body.error;
    throw new Error(err ? err.code + ": " + err.message : "HTTP " + resp.status);
  }
  return body;
}

// -- confirmation -------------------------------------------------------------------------------------------
let pending = null;

function ask(text, reason, run, request, items) {
  // reason, request: null (not asked) or { placeholder, pattern (RegExp), hint }; request is the
  // deletion request id, asked in its own field before the reason. items: the jobs the action names.
  pending = { reason, run, request };
  $("confirm-ok").disabled = false;
  $("confirm-text").textContent = text;
  delete $("confirm-text").dataset.count;
  listJobs(items || []);
  for (const [field, spec] of [["reason", reason], ["request", request]]) {
    $("confirm-" + field + "-label").hidden = !spec;
    $("confirm-" + field).value = "";
    $("confirm-" + field).placeholder = spec ? spec.placeholder : "";
  }
  $("confirm-msg").textContent = "";
  $("confirm").hidden = false;
  if (request) $("confirm-request").focus(); else if (reason) $("confirm-reason").focus();
}

// The jobs a confirmation names ([{ id, label, tenant }]), listed under its question.
function listJobs(items) {
  $("confirm-list").replaceChildren(...items.map((j) => el("li", { "data-job-id": j.id },
    j.id + (j.label ? " (" + j.label + ")" : "") + (j.tenant ? ", tenant " + j.tenant : ""))));
  $("confirm-list").hidden = !items.length;
}

async function confirmed() {
  if (!pending) return;
  const { reason, run, request } = pending;
  const value = $("confirm-reason").value.trim();
  const requestId = $("confirm-request").value.trim();
  if (request && !request.pattern.test(requestId)) { $("confirm-msg").textContent = request.hint; return; }
  if (reason && !reason.pattern.test(value)) { $("confirm-msg").textContent = reason.hint; return; }
  pending = null;
  $("confirm").hidden = true;
  try {
    $("action-msg").textContent = await run(value, requestId);
    $("action-msg").className = "ok";
  } catch (e) {
    if (e instanceof Refused) return;
    $("action-msg").textContent = "refused: " + e.message;
    $("action-msg").className = "bad";
  }
  refresh();
}

function refuse(status, message) {
  if (timer) clearInterval(timer);
  timer = null;
  me = null;
  $("refusal-text").textContent = "Refused (" + status + "): " + message +
    ". The console needs a read, admin or operator API key.";
  $("who").textContent = "";
  $("logout").hidden = true;
  show("refusal", "login");
}

function askForKey() {
  // First visit (or after "Forget key"): ask for a key; nothing was refused yet.
  if (timer) clearInterval(timer);
  timer = null;
  me = null;
  $("who").textContent = "";
  $("logout").hidden = true;
  show("login");
  $("key").focus();
}

function fmtAge(s) {
  const a = Math.abs(s);
  const t = a < 120 ? a.toFixed(0) + " s" : a < 7200 ? (a / 60).toFixed(0) + " min" : (a / 3600).toFixed(1) + " h";
  return s < 0 ? "-" + t : t;
}

// -- charts ---------------------------------------------------------------------------------------------
function stackedBars(svg, labels, series, opts) {
  svg.replaceChildren();
  const W = 480, H = 200, L = 34, B = 36, T = 8;
  const names = Object.keys(series);
  const totals = labels.map((_, i) => names.reduce((s, n) => s + (series[n][i] || 0), 0));
  const max = Math.max(1, ...totals);
  const bw = (W - L - 4) / Math.max(1, labels.length);
  svg.append(el("line", { x1: L, y1: H - B, x2: W, y2: H - B, stroke: "#d0d5dd" }));
  svg.append(el("text", { x: 2, y: T + 8 }, (opts && opts.fmt ? opts.fmt(max) : max)));
  labels.forEach((label, i) => {
    let y = H - B;
    for (const n of names) {
      const v = series[n][i] || 0;
      if (!v) continue;
      const h = (v / max) * (H - B - T);
      y -= h;
      const r = el("rect", { x: L + i * bw + 1, y: y, width: Math.max(1, bw - 2), height: h, fill: COLORS[n] || "#667085",
                             "data-series": n });
      r.append(el("title", {}, n + " " + label + ": " + (opts && opts.fmt ? opts.fmt(v) : v)));
      svg.append(r);
    }
    const every = Math.ceil(labels.length / 8);
    if (i % every === 0) svg.append(el("text", { x: L + i * bw, y: H - B + 12 }, label));
  });
  names.forEach((n, j) => {
    svg.append(el("rect", { x: L + j * 80, y: H - 14, width: 8, height: 8, fill: COLORS[n] || "#667085" }));
    svg.append(el("text", { x: L + j * 80 + 11, y: H - 6 }, n));
  });
}

function drawCharts(s) {
  stackedBars($("chart-age"), s.age.labels.map((l) => l.replace("<= ", "≤")), s.age.series);
  const minutes = Array.from({ length: s.throughput.minutes }, (_, i) => String(i - s.throughput.minutes + 1) + "m");
  stackedBars($("chart-throughput"), minutes, s.throughput.series);
  const bars = s.duration.bars;
  const series = { vector: bars.map((b) => (b.mode === "vector" ? b.mean_s : 0)),
                   raster: bars.map((b) => (b.mode === "raster" ? b.mean_s : 0)) };
  stackedBars($("chart-duration"), bars.map((b) => b.pages + "p"), series, { fmt: (v) => v.toFixed(2) + " s" });
}

// -- overview ---------------------------------------------------------------------------------------------
// The job table's filters, the search box included: the table and its bulk action send the same ones.
function tableFilters() {
  const f = {};
  for (const [param, id] of [["job_id", "f-job"], ["state", "f-state"], ["mode", "f-mode"], ["document_class", "f-class"],
                             ["tenant", "f-tenant"], ["min_age_s", "f-age"]]) {
    f[param] = $(id).value || null;
  }
  if (f.min_age_s !== null) f.min_age_s = Number(f.min_age_s);
  return f;
}

async function loadOverview() {
  const s = await api("/console/api/summary");
  const cards = STATES.map((st) => el("div", { class: "card " + st, "data-state": st },
    el("div", { class: "n" }, s.counts[st] || 0), el("div", {}, st)));
  $("counts").replaceChildren(...cards);
  const oldest = s.age.oldest_s;
  $("status-line").textContent = "oldest queued " + fmtAge(oldest.queued) + ", oldest rendering " +
    fmtAge(oldest.rendering) + (s.valid_leases === null ? "" : "; valid leases " + s.valid_leases) +
    "; claims paused: " + (s.pauses.length ? s.pauses.map((p) => p.scope + " (by " + p.actor + " at " + p.at +
      (p.reason ? ": " + p.reason : "") + ")").join(", ") : s.paused.length ? s.paused.join(", ") : "nothing") +
    "; store time " + s.now;
  drawCharts(s);
  const q = new URLSearchParams();
  for (const [param, value] of Object.entries(tableFilters())) {
    if (value !== null) q.set(param, value);
  }
  q.set("limit", $("page-size").value);
  if (cursor) q.set("cursor", cursor);
  const data = await api("/console/api/jobs?" + q.toString());
  nextCursor = data.next_cursor;
  $("next-page").disabled = !nextCursor;
  $("first-page").disabled = !cursor;
  $("page-info").textContent = "page " + (pages.length + 1) + (nextCursor ? "" : " (last)");
  const rows = data.jobs.map((j) => {
    const flags = (j.lease_expired ? " lease-expired" : "") + (j.overdue ? " overdue" : "");
    const tr = el("tr", { "data-job-id": j.id, "data-state": j.state, class: flags.trim(),
                          "data-lease-expired": j.lease_expired ? "1" : "0", "data-overdue": j.overdue ? "1" : "0" },
      el("td", {}, el("a", { href: "#/job/" + encodeURIComponent(j.id) }, j.id)),
      el("td", { class: "state " + j.state }, j.state), el("td", {}, j.kind), el("td", {}, j.label || "-"),
      el("td", { class: "filename" }, j.filename || "-"),
      el("td", {}, j.tenant), el("td", {}, j.mode),
      el("td", {}, j.document_class), el("td", {}, j.attempt + "/" + j.max_attempts),
      el("td", {}, fmtAge(j.age_s)),
      el("td", { class: "deadline" }, ["queued", "rendering"].includes(j.state)
        ? (j.overdue ? "overdue by " + fmtAge(-j.deadline_in_s) : fmtAge(j.deadline_in_s)) : "-"),
      el("td", {}, j.lease_owner || "-"),
      el("td", { class: "lease" }, j.lease_expires_in_s === null ? "-"
        : j.lease_expired ? "expired " + fmtAge(-j.lease_expires_in_s) + " ago" : fmtAge(j.lease_expires_in_s)),
      el("td", {}, j.error || ""));
    tr.addEventListener("click", () => { location.hash = "#/job/" + encodeURIComponent(j.id); });
    return tr;
  });
  $("jobs").tBodies[0].replaceChildren(...rows);
  $("jobs-empty").hidden = rows.length > 0;
}

// -- job page ---------------------------------------------------------------------------------------------
function dl(pairs) {
  return pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v ?? "-")]);
}

// a job's marks and the field values frozen with it (the recipient reads "(hidden)" without the right)
function marksText(marks) {
  if (!marks || !marks.length) return "none";
  const what = (m) => m.kind === "image" ? "image" : m.text === null
    ? "text (hidden" + (m.fields.length ? "; fields " + m.fields.join(", ") : "") + ")" : "\u201c" + m.text + "\u201d";
  return marks.map((m, i) => (i + 1) + ". " + what(m) +
    " " + m.position + ", pages " + m.pages + ", " + m.layer).join("; ");
}

// encryption at rest, from the job's row (the same line as `docfence inspect`): never the key or its id
function encryptionText(e) {
  if (!e || !e.sealed) return "plaintext (stored before encryption at rest)";
  return "sealed, provider " + e.provider + ", kek " + e.kek +
    (e.key_destroyed_at ? "; data key destroyed " + e.key_destroyed_at : "");
}

function fieldsText(fields) {
  const names = Object.keys(fields || {}).sort();
  return names.length ? names.map((k) => k + ": " + fields[k]).join(", ") : "none";
}

async function loadJob(id) {
  const d = await api("/console/api/jobs/" + encodeURIComponent(id));
  const j = d.job, p = d.policy;
  $("job-title").textContent = "Job " + j.id;
  $("job-summary").replaceChildren(...dl([
    ["state", j.state], ["attempt", j.attempt + " of " + j.max_attempts], ["tenant", j.tenant],
    ["policy", p.mode + ", " + p.dpi + " dpi, class " + p.document_class + ", region " + p.region],
    ["created", j.created_at], ["deadline", j.deadline_at], ["lease", (j.lease_owner || "-") + " until " + (j.lease_expires_at || "-")],
    ["last heartbeat", j.heartbeat_at], ["finished", j.finished_at],
    ["last error", j.last_error_code ? j.last_error_code + ": " + (j.last_error_message || "") : "-"],
    ["marks", marksText(d.marks)], ["fields", fieldsText(d.fields)], ["encryption", encryptionText(d.encryption)],
    ["store time", d.now]]));
  $("job-summary").querySelector("dd").setAttribute("data-state", j.state);
  const cancelable = me.can_cancel && ["queued", "rendering"].includes(j.state);
  const deletable = me.can_delete && !j.deleted;
  // whether a retry may replace this job is the server's answer (the rule POST .../retry applies)
  const retryable = me.can_retry && !!d.retry && d.retry.offered;
  const why = me.can_retry && d.retry && d.retry.why && ["failed", "canceled"].includes(j.state) ? d.retry.why : "";
  $("cancel-btn").hidden = !cancelable;
  $("delete-btn").hidden = !deletable;
  $("retry-btn").hidden = !retryable;
  $("retry-why").textContent = why ? "No retry: " + why : "";
  $("retry-why").hidden = !why;
  $("retry-why").dataset.code = (d.retry && d.retry.code) || "";
  $("job-actions-none").hidden = cancelable || deletable || retryable;
  $("job-actions").dataset.jobId = j.id;
  $("job-actions").dataset.requestId = j.report_request_id || "";
  $("next-steps").replaceChildren(...d.next_steps.map((s) => el("li", {}, s)));
  $("timeline").replaceChildren(...d.timeline.map((e) => el("li", { "data-action": e.action },
    e.at + "  #" + (e.attempt || 0) + "  " + e.action + (e.from !== e.to ? "  " + (e.from || "-") + " → " + e.to : "") +
    "  by " + e.actor + (e.details && e.details.note ? "  — " + e.details.note : "") + webhookNote(e))));
  $("attempts").tBodies[0].replaceChildren(...d.attempts.map((a) => el("tr", {},
    el("td", {}, a.attempt), el("td", {}, a.worker), el("td", {}, a.claimed_at), el("td", {}, a.ended_at || "-"),
    el("td", {}, a.outcome || "running"), el("td", {}, a.error_code || ""))));
  const o = d.observation;
  $("observation").replaceChildren(o ? el("span", {}, o.provider + ": status " + (o.status || "-") + " (" + o.kind +
    "), observed " + o.observed_at + ", " + o.passes + " pass(es), outcome " + (o.outcome || "-")) : "none");
  const iv = d.issue || {}, code = iv.verification, sig = iv.signature;
  const issued = [code ? "code " + code.status + " (pages " + code.pages + ")" : null,
                  sig ? "signature " + sig.status + (sig.signer ? " by " + sig.signer : "") : null].filter(Boolean);
  $("issue").replaceChildren(issued.length ? issued.join("; ") : "none");
  // the artifact's report, or the failed attempt's (it names the attempt): a failed check shows its details
  // (which page, what differed), else its failure messages
  const v = d.validation;
  $("validation").replaceChildren(v ? el("ul", {}, ...(v.attempt ? [el("li", {}, "attempt " + v.attempt + " failed validation")] : []),
    ...v.checks.map((c) => { const said = (c.details && c.details.length) ? c.details : c.failures;
      return el("li", { class: c.ok ? "ok" : "bad" }, (c.ok ? "✓ " : "✗ ") + c.name + (said.length ? ": " + said.join("; ") : "")); })) : "none");
}

// -- admin --------------------------------------------------------------------------------------------------
const REASON = { placeholder: "why (recorded in the audit log)", pattern: /^.{1,200}$/,
                 hint: "a reason of 1-200 characters is required" };

function setClaims(action) {
  const scope = $("pause-scope").value;
  const what = action === "pause" ? "Pause new claims for " + scope + " (every tenant)? Running jobs finish."
    : "Resume claims for " + scope + "?";
  ask(what, REASON, async (reason) => {
    const r = await act("/console/api/" + action, { method: "POST", body: JSON.stringify({ scope, reason }) });
    const msg = action + "d " + scope + "; paused now: " + (r.paused.join(", ") || "nothing");
    $("admin-msg").textContent = msg;
    return msg;
  });
}

// The job actions call the same /v1 routes as the CLI and the client; the server checks the key.
function cancelJob() {
  const id = $("job-actions").dataset.jobId;
  ask("Cancel job " + id + "? A rendering attempt is stopped; this cannot be undone.", REASON, async (reason) => {
    const q = new URLSearchParams({ reason });
    const r = await act("/v1/jobs/" + encodeURIComponent(id) + "/cancel?" + q.toString(), { method: "POST" });
    return "job " + r.id + " is " + r.state;
  });
}

function retryReport() {
  const request = $("job-actions").dataset.requestId;
  // an operator acts on a tenant's work: the server requires its reason (a tenant's is optional)
  ask("Retry report request " + request + " with a new job (the same data)?", me.operator ? REASON : null, async (reason) => {
    const q = reason ? "?" + new URLSearchParams({ reason }).toString() : "";
    const r = await act("/v1/report-requests/" + encodeURIComponent(request) + "/retry" + q, { method: "POST" });
    return "report " + request + " retried as job " + r.id;
  });
}

function say(text, ok) {
  $("action-msg").textContent = text;
  $("action-msg").className = ok ? "ok" : "bad";
}

// Two steps: the server resolves the table's filters and search into a list of jobs (the preview), the
// confirmation names that list, and only those ids are canceled: a job that arrives meanwhile is not.
// The confirmation opens at once and can be confirmed only once it names the list.
async function bulkCancel() {
  const filters = tableFilters();
  if (filters.state && !["queued", "rendering"].includes(filters.state)) {
    say("only queued or rendering jobs can be canceled: change the state filter", false);
    return;
  }
  const shown = Array.from($("jobs").tBodies[0].rows)
    .filter((r) => ["queued", "rendering"].includes(r.dataset.state)).length;
  const scope = me.all_tenants ? " across tenants" : " of your tenant";
  let p = null;
  ask("Cancel the queued or rendering jobs" + scope + " matching the filters and search (" + shown +
      " shown in the table)? Finding exactly which…", REASON, async (reason) => {
    const r = await act("/console/api/cancel-matching", { method: "POST", body: JSON.stringify({ ids: p.ids, reason }) });
    const ended = r.skipped.filter((x) => x.why === "ended").length;
    const hidden = r.skipped.length - ended;
    return "canceled " + r.canceled.length + " job(s)" + (ended ? ", " + ended + " had already ended" : "") +
      (hidden ? ", " + hidden + " skipped (not found or busy)" : "");
  });
  const asked = pending;
  $("confirm-ok").disabled = true;
  try {
    p = await act("/console/api/cancel-matching/preview", { method: "POST", body: JSON.stringify(filters) });
  } catch (e) {
    if (pending === asked) { pending = null; $("confirm").hidden = true; }
    if (!(e instanceof Refused)) say("refused: " + e.message, false);
    return;
  } finally {
    $("confirm-ok").disabled = false;
  }
  if (pending !== asked) return;  // the user went back, or another confirmation replaced this one
  if (!p.count) {
    pending = null;
    $("confirm").hidden = true;
    say("no queued or rendering job matches these filters", true);
    return;
  }
  const rest = p.count - p.rows.length;
  $("confirm-text").textContent = "Cancel these " + p.count + " queued or rendering job(s)" + scope +
    " matching the filters and search (" + shown + " shown in the table)" +
    (rest > 0 ? "; the first " + p.rows.length + " are listed, and " + rest + " more" : "") +
    (p.more ? "; more jobs match: preview again afterwards" : "") +
    "? Jobs submitted after this preview are not included. This cannot be undone.";
  $("confirm-text").dataset.count = String(p.count);
  listJobs(p.rows.map((r) => ({ id: r.id, label: r.label, tenant: me.all_tenants ? r.tenant : null })));
}

function deleteJob() {
  const id = $("job-actions").dataset.jobId;
  ask("Delete every byte of job " + id + " (input, attempts, artifact)? Its metadata stays as a tombstone.",
    REASON,
    async (reason, requestId) => {
      const q = new URLSearchParams({ request_id: requestId, reason });
      const r = await act("/v1/jobs/" + encodeURIComponent(id) + "?" + q.toString(), { method: "DELETE" });
      return "job " + r.id + " deleted (request " + requestId + ")";
    },
    { placeholder: "deletion request id, e.g. DSR-2026-114", pattern: /^[A-Za-z0-9._:-]{1,128}$/,
      hint: "give the deletion request this fulfils: 1-128 letters, digits or ._:-" });
}

// -- routing ------------------------------------------------------------------------------------------------
async function refresh() {
  if (!sessionStorage.getItem(KEY)) { askForKey(); return; }
  try {
    if (!me) {
      me = await api("/console/api/whoami");
      $("who").textContent = me.operator ? "operator (all tenants)"
        : "tenant " + me.tenant + (me.admin ? " (tenant admin)" : " (read)");
      $("logout").hidden = false;
      $("admin").hidden = !me.operator;
      if (!me.all_tenants) $("f-tenant").disabled = true;
      $("bulk-cancel-btn").hidden = !me.can_cancel;
    }
    const m = location.hash.match(/^#\/job\/(.+)$/);
    if (m) { show("job"); await loadJob(decodeURIComponent(m[1])); } else { show("overview"); await loadOverview(); }
    if (!timer) timer = setInterval(refresh, 1500);
  } catch (e) {
    if (!(e instanceof Refused)) $("status-line").textContent = "update failed: " + e.message;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, $("key").value.trim());
    $("key").value = "";
    refresh();
  });
  $("logout").addEventListener("click", () => { sessionStorage.removeItem(KEY); askForKey(); });
  $("pause-btn").addEventListener("click", () => setClaims("pause"));
  $("cancel-btn").addEventListener("click", cancelJob);
  $("delete-btn").addEventListener("click", deleteJob);
  $("retry-btn").addEventListener("click", retryReport);
  $("bulk-cancel-btn").addEventListener("click", bulkCancel);
  $("confirm-ok").addEventListener("click", confirmed);
  $("confirm-back").addEventListener("click", () => { pending = null; $("confirm").hidden = true; });
  $("resume-btn").addEventListener("click", () => setClaims("resume"));
  const firstPage = () => { pages = []; cursor = null; refresh(); };
  $("filters").addEventListener("input", firstPage);  // new filters start at the newest jobs
  $("page-size").addEventListener("input", firstPage);
  $("first-page").addEventListener("click", firstPage);
  $("next-page").addEventListener("click", () => {
    if (!nextCursor) return;
    pages.push(cursor);
    cursor = nextCursor;
    refresh();
  });
  $("filters").addEventListener("submit", (ev) => ev.preventDefault());
  window.addEventListener("hashchange", () => {
    pending = null;  // a confirmation never outlives the page it was asked on
    $("confirm").hidden = true;
    $("action-msg").textContent = "";
    refresh();
  });
  refresh();
});
