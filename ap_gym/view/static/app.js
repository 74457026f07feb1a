// ap-gym view: one client for both modes. In server mode answers come from /api/...;
// in a static bundle from data/*.js files (script tags work from file://, fetch does not).
"use strict";

const MODE = window.APGYM_MODE || "server";
const store = {};          // static answers by key
const waiting = {};        // key -> {promise, resolve, reject, src}: ONE pending load per key, however many ask
const memo = {};           // answers already received, by key (both modes)

window.APGYM_PUT = (key, payload) => {
  store[key] = payload;
  if (waiting[key]) { waiting[key].resolve(payload); delete waiting[key]; }
};

const loading = {};        // bundle scripts requested, by src (a chunk holds many keys)

function staticSrc(key) {
  // episodes are packed in chunks of APGYM_CHUNK (a 100k-episode run is a few dozen files)
  const m = key.match(/^run\/(\d+)\/episode\/(\d+)$/);
  if (m && window.APGYM_CHUNK) return `data/run${m[1]}/episodes-${Math.floor((Number(m[2]) - 1) / window.APGYM_CHUNK)}.js`;
  return "data/" + key.replace(/^run\/(\d+)/, "run$1") + ".js";
}

function loadStatic(key) {
  if (key in store) return Promise.resolve(store[key]);
  // two views asking for one key at once (the Diff page with run A = run B) share its load: a
  // second request once replaced the first's resolver, and the page waited on "loading..." forever
  if (waiting[key]) return waiting[key].promise;
  const src = staticSrc(key);
  const entry = { src };
  entry.promise = new Promise((resolve, reject) => { entry.resolve = resolve; entry.reject = reject; });
  waiting[key] = entry;
  const settle = message => {  // every key still waiting on this file: it did not bring them
    for (const [k, w] of Object.entries(waiting)) if (w.src === src) { delete waiting[k]; w.reject(new Error(message(k))); }
  };
  if (!loading[src]) {
    loading[src] = true;
    const s = document.createElement("script");
    s.src = src;
    s.onerror = () => { delete loading[src]; settle(() => "missing from the bundle: " + src); };
    s.onload = () => settle(k => `${k} is not in ${src}`);
    document.head.appendChild(s);
  }
  return entry.promise;
}

async function api(key, params) {
  const query = params ? "?" + new URLSearchParams(params).toString() : "";
  const k = key + query;
  if (k in memo) return memo[k];
  let value;
  if (MODE === "static") {
    value = await loadStatic(key);
  } else {
    const r = await fetch("api/" + key + query);
    if (!r.ok) throw new Error(`${r.status}: ${(await r.text()).slice(0, 300)}`);
    value = await r.json();
  }
  memo[k] = value;
  return value;
}

async function fresh(key, params) {  // server mode, never memoised: live answers
  const query = params ? "?" + new URLSearchParams(params).toString() : "";
  const r = await fetch("api/" + key + query);
  if (!r.ok) throw new Error(`${r.status}: ${(await r.text()).slice(0, 300)}`);
  return r.json();
}

function forgetRun(k) {  // new episodes arrived: answers about the run are stale (episodes themselves are not)
  for (const key of Object.keys(memo)) if (key.startsWith(`run/${k}/`) && !key.startsWith(`run/${k}/episode/`)) delete memo[key];
}

// -- small DOM helpers (text always goes through textContent: episodes hold model output) --
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const fmt = (v, d = 2) => (v === null || v === undefined || Number.isNaN(v)) ? "n/a" : (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(d)) : String(v));
const ci = (pair, d = 2) => pair ? ` [${fmt(pair[0], d)}, ${fmt(pair[1], d)}]` : "";
function table(header, rows, attrs) {
  return h("table", attrs, h("thead", {}, h("tr", {}, header.map(x => h("th", {}, x)))),
    h("tbody", {}, rows));
}
// A table whose columns sort in the page when their header is clicked (small tables).
function sortableTable(header, keys, records, makeRow, attrs) {
  let col = null, desc = false;
  const tbody = h("tbody", {});
  const heads = header.map((x, i) => h("th", { class: "sortable", "data-sort": keys[i], onclick: () => {
    desc = col === keys[i] ? !desc : false; col = keys[i]; draw(); } }, x));
  function draw() {
    const sorted = col === null ? records : [...records].sort((a, b) => {
      const x = a[col], y = b[col];
      const c = (x === null || x === undefined) ? 1 : (y === null || y === undefined) ? -1 : (x < y ? -1 : x > y ? 1 : 0);
      return desc ? -c : c; });
    heads.forEach((th, i) => { th.classList.toggle("sorted-asc", keys[i] === col && !desc); th.classList.toggle("sorted-desc", keys[i] === col && desc); });
    tbody.replaceChildren(...sorted.map(makeRow));
  }
  draw();
  return h("table", attrs, h("thead", {}, h("tr", {}, heads)), tbody);
}
function outcomeTag(o) { return h("span", { class: o }, o === "infrastructure_failure" ? "infra failure" : o); }
function setStatus(text) { document.getElementById("status").textContent = text || ""; }

// -- routing: #/<view>?run=K&... -----------------------------------------------------
function route() {
  const hash = location.hash.replace(/^#\/?/, "") || "runs";
  const [path, query] = hash.split("?");
  const params = Object.fromEntries(new URLSearchParams(query || ""));
  return { parts: path.split("/"), params };
}
function href(view, params) {
  const p = Object.assign({ run: currentRun() }, params || {});
  for (const k of Object.keys(p)) if (p[k] === "" || p[k] === undefined || p[k] === null) delete p[k];
  return "#/" + view + "?" + new URLSearchParams(p).toString();
}
function currentRun() { return Number(route().params.run || 0); }

let renderSeq = 0;  // renders overlap when the hash changes faster than the server answers
async function render() {
  const seq = ++renderSeq;
  const { parts, params } = route();
  const main = document.getElementById("main");
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.nav === parts[0]);
    a.href = href(a.dataset.nav);
  }
  setStatus("loading…");
  try {
    let view;
    const runs = await api("runs");
    if (!runs.length && parts[0] !== "training") { location.hash = "#/training"; return; }  // training logs only
    if (parts[0] === "training") view = await viewTraining(params);
    else if (parts[0] === "curves") view = await viewCurves(params);
    else if (parts[0] === "lineage") view = await viewLineage(params);
    else if (parts[0] === "episodes") view = await viewEpisodes(params);
    else if (parts[0] === "episode") view = await viewEpisode(Number(parts[1]), params);
    else if (parts[0] === "compare") view = await viewCompare(params);
    else if (parts[0] === "provenance") view = await viewProvenance(params);
    else if (parts[0] === "matrix") view = await viewMatrix(params);
    else if (parts[0] === "search") view = await viewSearch(params);
    else if (parts[0] === "diff") view = await viewDiff(params);
    else view = await viewRuns(params);
    if (seq !== renderSeq) return;  // a later hash owns the page: an older answer must not overwrite it
    main.replaceChildren(view);
    setStatus("");
    if (params.step) { const el = document.querySelector(`.step[data-step="${params.step}"]`); if (el) { el.classList.add("target"); el.scrollIntoView(); } }
  } catch (e) {
    if (seq !== renderSeq) return;
    main.replaceChildren(h("p", { class: "error" }, "Could not load this view: " + e.message));
    setStatus("error");
  }
}

// -- Runs -------------------------------------------------------------------------------
async function viewRuns() {
  const k = currentRun();
  const [runs, ov] = await Promise.all([api("runs"), api(`run/${k}/overview`)]);
  const run = runs[k];
  const root = h("section", { id: "view-runs" },
    h("h2", {}, `Run: ${run.name}`),
    h("p", { class: "muted" }, `${run.path} · ap-gym ${run.version || "?"} · backbone ${run.backbone || "per setting"}`),
    run.description ? h("p", {}, run.description) : null,
    h("h3", {}, "Held-out success per iteration (mean over seeds; hover a point, click it for its episodes)"));
  const panels = h("div", { class: "panels" });
  root.appendChild(panels);
  for (const panel of ov.curves) panels.appendChild(curve(panel));
  const settingRow = s => h("tr", {
      class: "clickable", "data-setting": s.setting, "data-iteration": s.iteration,
      onclick: () => { location.hash = href("episodes", settingFilters(s)); } },
    h("td", {}, s.benchmark), h("td", {}, s.backbone || "-"), h("td", {}, s.policy), h("td", {}, s.seed),
    h("td", {}, s.iteration), h("td", {}, s.episodes), h("td", {}, s.infrastructure_failures),
    h("td", { "data-col": "success" }, fmt(s.success_rate) + ci(s.success_ci)),
    h("td", {}, fmt(s.score) + ci(s.score_ci)), h("td", {}, fmt(s.llm_calls, 1) + ci(s.llm_calls_ci, 1)),
    h("td", {}, fmt(s.tokens, 0) + ci(s.tokens_ci, 0)));
  const holder = h("div", {});
  const drawSettings = text => holder.replaceChildren(sortableTable(["benchmark", "backbone", "policy", "seed", "iteration",
    "episodes", "infra failures", "success", "score", "LLM calls", "tokens"],
    ["benchmark", "backbone", "policy", "seed", "iteration", "episodes", "infrastructure_failures", "success_rate", "score",
      "llm_calls", "tokens"], ov.settings.filter(s => !text || s.setting.toLowerCase().includes(text.toLowerCase())),
    settingRow, { id: "settings-table" }));
  drawSettings("");
  root.append(h("h3", {}, "Settings (held-out episodes; 95 % intervals: Wilson for success, normal for means; infrastructure failures excluded from the rates)"),
    h("div", { class: "filters" }, h("label", {}, "filter settings", h("input", { id: "settings-filter", type: "search",
      placeholder: "benchmark, policy, seed…", oninput: e => drawSettings(e.target.value) }))), holder);
  const stats = h("div", { id: "report" }, h("p", { class: "muted" }, "Statistics and audit: computing…"));
  root.append(h("h3", {}, "Statistics and audit (as in ap-gym report)"), stats);
  api(`run/${k}/report`).then(rep => {
    stats.replaceChildren(h("p", { class: "muted", id: "report-notes" }, rep.notes || ""),
      ...rep.tables.map(t => h("div", { "data-table": t.name }, h("h4", {}, t.title || t.name.replace(/_/g, " ")),
      t.intro ? h("p", { class: "muted table-intro" }, t.intro) : null,
      table(t.header, t.rows.map(r => h("tr", {}, r.map(c => h("td", {}, c))))))));
  }).catch(e => stats.replaceChildren(h("p", { class: "error" }, "report: " + e.message)));
  return root;
}

function settingFilters(s) {
  return { phase: "eval", benchmark: s.benchmark, backbone: s.backbone, policy: s.policy, seed: s.seed, iteration: s.iteration };
}

const COLORS = ["#2459c9", "#c4320a", "#1a7f37", "#8a3ffc", "#b28600", "#007d79", "#d12771", "#5a6872", "#ee5396", "#0072c3"];

// Lines that coincide (several policies at 0 %, or one run copied) stay distinguishable: each
// series has a dash of its own and the later ones are drawn thinner on top, so the one below
// shows around them (issues 43 and 50).
const DASHES = [undefined, [8, 4], [2, 3], [12, 3, 2, 3], [4, 4], [1, 6], [16, 4], [6, 2, 2, 2]];

function lineStyle(i) {
  return { width: Math.max(1.25, 3.5 - 0.5 * i), dash: DASHES[i % DASHES.length], points: { size: Math.max(4, 9 - i) } };
}

function legendDashes(plot) {
  // the legend shows each line's dash too (uPlot draws every marker solid)
  plot.root.querySelectorAll(".u-legend .u-series").forEach((row, i) => {
    const marker = row.querySelector(".u-marker"), dash = i ? DASHES[(i - 1) % DASHES.length] : null;
    if (marker && i) marker.style.borderStyle = !dash ? "solid" : dash[0] <= 2 ? "dotted" : "dashed";
  });
}

function drawIntervals(u, series, colour, xOf, box) {
  // each point's 95 % interval as a bar, the series side by side (not on top of each other);
  // the count goes on the panel, so a check can hold it to the points that have one
  const ctx = u.ctx;
  let intervals = 0;
  series.forEach((s, i) => {
    const n = series.length, shift = (i - (n - 1) / 2) * 4 * devicePixelRatio;
    ctx.save();
    ctx.strokeStyle = colour(s, i);
    ctx.lineWidth = 1.5 * devicePixelRatio;
    for (const p of s.points) {
      const px = xOf(p);
      if (!p.interval || px === null || px === undefined) continue;
      const x = u.valToPos(px, "x", true) + shift;
      const [y0, y1] = [u.valToPos(p.interval[0], "y", true), u.valToPos(p.interval[1], "y", true)];
      ctx.beginPath(); ctx.moveTo(x, y0); ctx.lineTo(x, y1);
      ctx.moveTo(x - 3, y0); ctx.lineTo(x + 3, y0); ctx.moveTo(x - 3, y1); ctx.lineTo(x + 3, y1);
      ctx.stroke();
      intervals += 1;
    }
    ctx.restore();
  });
  box.dataset.intervals = intervals;
}

function curve(panel) {
  const box = h("div", { class: "panel", "data-panel": panel.panel }, h("h3", {}, panel.panel));
  const its = [...new Set(panel.series.flatMap(s => s.points.map(p => p.iteration)))].sort((a, b) => a - b);
  const data = [its, ...panel.series.map(s => its.map(it => { const p = s.points.find(q => q.iteration === it); return p ? p.success : null; }))];
  const [benchmark, backbone] = panel.panel.split(" @ ");
  const tip = document.getElementById("tooltip");
  let hover = null;
  const opts = {
    width: 460, height: 260,
    scales: { x: { time: false }, y: { range: [0, 1] } },
    axes: [{ label: "iteration" }, { label: "held-out success (95 % Wilson bars)" }],
    series: [{ label: "iteration" }, ...panel.series.map((s, i) => ({ label: s.policy, stroke: COLORS[i % COLORS.length],
      ...lineStyle(i) }))],
    legend: { show: true },
    hooks: {
      draw: [u => drawIntervals(u, panel.series, (s, i) => COLORS[i % COLORS.length], p => p.iteration, box)],
      setCursor: [u => {
        const idx = u.cursor.idx;
        if (idx === null || idx === undefined || u.cursor.left < 0) { tip.hidden = true; hover = null; return; }
        let best = null;
        for (let i = 1; i < u.series.length; i++) {
          const v = u.data[i][idx];
          if (v === null || v === undefined) continue;
          const d = Math.abs(u.valToPos(v, "y") - u.cursor.top);
          if (!best || d < best.d) best = { i, d };
        }
        if (!best) { tip.hidden = true; hover = null; return; }
        const s = panel.series[best.i - 1];
        const p = s.points.find(q => q.iteration === u.data[0][idx]);
        hover = { policy: s.policy, iteration: p.iteration };
        const rect = u.over.getBoundingClientRect();
        tip.replaceChildren(h("b", {}, s.policy), h("br"), `iteration ${p.iteration}: success ${fmt(p.success)}` +
          (p.interval ? ` (pooled ${p.successes}/${p.valid}, 95 % ${fmt(p.interval[0])}–${fmt(p.interval[1])})` : ""), h("br"),
          `seeds: ${Object.entries(p.seeds).map(([k, v]) => `${k}=${fmt(v)}`).join(", ")}`, h("br"),
          `episodes ${p.episodes} · LLM calls/episode ${fmt(p.llm_calls, 1)}`, h("br"), h("i", {}, "click: its episodes"));
        tip.hidden = false;
        tip.style.left = (rect.left + u.cursor.left + 14) + "px";
        tip.style.top = (rect.top + u.valToPos(u.data[best.i][idx], "y") + 10) + "px";
        tip.dataset.policy = s.policy; tip.dataset.iteration = p.iteration;
      }],
    },
  };
  const plot = new uPlot(opts, data, box);
  legendDashes(plot);
  plot.over.addEventListener("mouseleave", () => { tip.hidden = true; });
  plot.over.addEventListener("click", () => {
    if (!hover) return;
    tip.hidden = true;
    location.hash = href("episodes", { phase: "eval", benchmark, backbone: backbone || "", policy: hover.policy, iteration: hover.iteration });
  });
  return box;
}

// -- Episodes ---------------------------------------------------------------------------
const FILTERS = ["benchmark", "backbone", "policy", "seed", "iteration", "phase", "task_family", "task_id", "outcome"];
const PER_PAGE = 50;

function filtersOf(params) {
  const p = {};
  for (const f of FILTERS) if (params[f] !== undefined && params[f] !== "") p[f] = params[f];
  return p;
}

// The filter builder's conditions ([column, op, value]; the URL's `where`), group-by and the
// column picker. The server evaluates them in SQLite; a bundle here, with the same rules
// (a missing value matches no comparison, `contains` ignores case, infrastructure failures
// are left out of a group's rate and means).
const OPS = { eq: "=", ne: "≠", lt: "<", le: "≤", gt: ">", ge: "≥", contains: "contains" };
const NUMERIC_COLS = new Set(["id", "seed", "iteration", "success", "score", "num_steps", "llm_calls", "tokens", "parse_failures", "wall_s"]);
const GROUP_COLS = [...FILTERS, "mode", "termination", "success"];
const EPISODE_COLS = [["id", "id"], ["benchmark", "benchmark"], ["backbone", "backbone"], ["policy", "policy"], ["seed", "seed"],
  ["phase", "phase"], ["iteration", "iteration"], ["family", "task_family"], ["task", "task_id"], ["outcome", "outcome"],
  ["score", "score"], ["steps", "num_steps"], ["LLM calls", "llm_calls"], ["tokens", "tokens"], ["seconds", "wall_s"],
  ["parse failures", "parse_failures"], ["mode", "mode"]];
const DEFAULT_COLS = ["id", "benchmark", "backbone", "policy", "seed", "phase", "iteration", "task_family", "task_id", "outcome",
  "score", "num_steps", "llm_calls", "mode"];

function conditionsOf(params) {
  try { const w = JSON.parse(params.where || "[]"); return Array.isArray(w) ? w.filter(c => Array.isArray(c) && c.length === 3) : []; }
  catch (e) { return []; }
}

function matches(row, [col, op, value]) {
  const x = row[col];
  if (x === null || x === undefined) return false;  // as SQL: NULL satisfies no comparison
  if (op === "contains") return String(x).toLowerCase().includes(String(value).toLowerCase());
  const a = NUMERIC_COLS.has(col) ? Number(x) : String(x), b = NUMERIC_COLS.has(col) ? Number(value) : String(value);
  return { eq: a === b, ne: a !== b, lt: a < b, le: a <= b, gt: a > b, ge: a >= b }[op];
}

function wilson(k, n, z = 1.96) {
  if (n <= 0) return null;
  const p = k / n, centre = (p + z * z / (2 * n)) / (1 + z * z / n);
  const half = z * Math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n);
  return [Math.max(0, centre - half), Math.min(1, centre + half)];
}

async function staticRows(k, filters, conds = []) {
  const all = await api(`run/${k}/episodes`);
  return all.filter(r => Object.entries(filters).every(([f, v]) => String(r[f]) === String(v)) && conds.every(c => matches(r, c)));
}

async function queryEpisodes(k, filters, page, sort, desc, conds = []) {
  if (MODE === "server") {
    const params = Object.assign({}, filters, { page, per_page: PER_PAGE });
    if (sort) { params.sort = sort; params.desc = desc ? "true" : "false"; }
    if (conds.length) params.where = JSON.stringify(conds);
    return api(`run/${k}/episodes`, params);
  }
  let rows = await staticRows(k, filters, conds);
  if (sort) rows = [...rows].sort((a, b) => { const c = a[sort] < b[sort] ? -1 : a[sort] > b[sort] ? 1 : a.id - b.id; return desc ? -c : c; });
  return { rows: rows.slice(page * PER_PAGE, (page + 1) * PER_PAGE), total: rows.length, page, per_page: PER_PAGE };
}

async function queryGroups(k, filters, conds, by) {
  if (MODE === "server") {
    const params = Object.assign({}, filters, { by: by.join(",") });
    if (conds.length) params.where = JSON.stringify(conds);
    return api(`run/${k}/groups`, params);
  }
  const groups = new Map();
  for (const r of await staticRows(k, filters, conds)) {
    const key = JSON.stringify(by.map(b => r[b] ?? null));
    if (!groups.has(key)) groups.set(key, { key: Object.fromEntries(by.map(b => [b, r[b] ?? null])), rows: [] });
    groups.get(key).rows.push(r);
  }
  const mean = xs => xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null;
  const cmp = (a, b) => a === b ? 0 : a === null ? -1 : b === null ? 1 : (a < b ? -1 : 1);  // SQL: NULL first
  return [...groups.values()].sort((g, q) => { for (const b of by) { const c = cmp(g.key[b], q.key[b]); if (c) return c; } return 0; })
    .map(g => { const valid = g.rows.filter(r => r.outcome !== "infrastructure_failure"), k2 = valid.filter(r => r.success).length;
      return { key: g.key, episodes: g.rows.length, infrastructure_failures: g.rows.length - valid.length, successes: k2,
        success_rate: valid.length ? k2 / valid.length : null, success_ci: wilson(k2, valid.length),
        steps: mean(valid.map(r => r.num_steps)), llm_calls: mean(valid.map(r => r.llm_calls)), tokens: mean(valid.map(r => r.tokens)) }; });
}

function liveParams() { return route().params; }

function builder(conds, go) {
  // conditions shown as removable chips, and a row that adds one
  const col = h("select", { id: "cond-column" }, EPISODE_COLS.map(([label, key]) => h("option", { value: key }, label)));
  const op = h("select", { id: "cond-op" }, Object.entries(OPS).map(([k, v]) => h("option", { value: k }, v)));
  const value = h("input", { id: "cond-value", type: "text", size: 12, placeholder: "value" });
  const add = () => { if (value.value === "") return; go({ where: JSON.stringify([...conds, [col.value, op.value, value.value]]), page: "" }); };
  value.addEventListener("keydown", e => { if (e.key === "Enter") add(); });
  return h("div", { class: "filters", id: "conditions" },
    conds.map((c, i) => h("span", { class: "tag condition", "data-condition": i }, `${c[0]} ${OPS[c[1]] || c[1]} ${c[2]} `,
      h("button", { class: "link", title: "remove", onclick: () => go({ where: conds.length > 1 ? JSON.stringify(conds.filter((_, j) => j !== i)) : "", page: "" }) }, "×"))),
    h("label", {}, "column", col), h("label", {}, "operator", op), h("label", {}, "value", value),
    h("button", { id: "add-condition", onclick: add }, "add condition"));
}

async function viewEpisodes(params) {
  const k = currentRun();
  const ov = await api(`run/${k}/overview`);
  const filters = filtersOf(params);
  const conds = conditionsOf(params);
  const by = (params.group || "").split(",").filter(b => GROUP_COLS.includes(b));
  const shown = (params.cols || "").split(",").filter(c => EPISODE_COLS.some(([, key]) => key === c));
  const columns = EPISODE_COLS.filter(([, key]) => (shown.length ? shown : DEFAULT_COLS).includes(key));
  const page = Number(params.page || 0);
  const sort = params.sort || "", desc = params.desc === "1";
  const [result, groups] = await Promise.all([queryEpisodes(k, filters, page, sort, desc, conds),
    by.length ? queryGroups(k, filters, conds, by) : Promise.resolve(null)]);
  // every choice lives in the URL; a change keeps the live hash's other choices (a second choice
  // made before the first one's page arrives must keep the first)
  const go = change => { const p = Object.assign(liveParams(), change); delete p.run; location.hash = href("episodes", p); };
  const keep = Object.assign({}, filters, sort ? { sort, desc: desc ? "1" : "" } : {},
    conds.length ? { where: JSON.stringify(conds) } : {}, by.length ? { group: by.join(",") } : {}, shown.length ? { cols: shown.join(",") } : {});
  const bar = h("div", { class: "filters" }, FILTERS.map(f => {
    const values = ov.facets[f] || [];
    const sel = h("select", { "data-filter": f, onchange: e => {
      const p = liveParams(); delete p.run; delete p.page;
      if (e.target.value === "") delete p[f]; else p[f] = e.target.value;
      location.hash = href("episodes", p); } },
      h("option", { value: "" }, "all"), values.map(v => h("option", { value: String(v), selected: String(v) === String(filters[f] ?? "") }, String(v) || "-")));
    return h("label", {}, f.replace("_", " "), sel);
  }));
  const grouping = h("details", { id: "group-by", open: by.length > 0 }, h("summary", {}, by.length ? `grouped by ${by.join(", ")}` : "group by…"),
    h("div", { class: "filters" }, GROUP_COLS.map(g => h("label", { class: "inline" }, h("input", { type: "checkbox", "data-group-by": g,
      checked: by.includes(g), onchange: e => go({ group: (e.target.checked ? [...by, g] : by.filter(b => b !== g)).join(",") }) }), " " + g.replace("_", " ")))));
  const picker = h("details", { id: "column-picker" }, h("summary", {}, "columns…"),
    h("div", { class: "filters" }, EPISODE_COLS.map(([label, key]) => h("label", { class: "inline" }, h("input", { type: "checkbox", "data-col-toggle": key,
      checked: columns.some(([, c]) => c === key), onchange: e => { const now = columns.map(([, c]) => c);
        go({ cols: (e.target.checked ? EPISODE_COLS.map(([, c]) => c).filter(c => now.includes(c) || c === key) : now.filter(c => c !== key)).join(",") }); } }), " " + label))));
  const groupTable = groups ? table([...by, "episodes", "infra failures", "successes", "success [95 % Wilson]", "steps", "LLM calls", "tokens"],
    groups.map(g => h("tr", { "data-group": JSON.stringify(by.map(b => g.key[b])), class: "clickable", onclick: () => {
      const p = {}, extra = [];  // a group's episodes: its values as filters (exact), or as conditions
      for (const b of by) { if (FILTERS.includes(b) && g.key[b] !== null) p[b] = g.key[b]; else extra.push([b, "eq", g.key[b] === true ? 1 : g.key[b] === false ? 0 : g.key[b]]); }
      go(Object.assign({}, p, { group: "", where: [...conds, ...extra].length ? JSON.stringify([...conds, ...extra]) : "", page: "" })); } },
      by.map(b => h("td", {}, String(g.key[b] ?? "-"))), h("td", { "data-col": "episodes" }, g.episodes), h("td", {}, g.infrastructure_failures),
      h("td", { "data-col": "successes" }, g.successes), h("td", {}, fmt(g.success_rate) + ci(g.success_ci)),
      h("td", {}, fmt(g.steps, 1)), h("td", {}, fmt(g.llm_calls, 1)), h("td", {}, fmt(g.tokens, 0)))), { id: "groups-table" }) : null;
  const pages = Math.max(1, Math.ceil(result.total / PER_PAGE));
  const pager = h("div", { class: "pager" },
    h("button", { disabled: page <= 0, onclick: () => { location.hash = href("episodes", Object.assign({}, keep, { page: page - 1 })); } }, "‹ previous"),
    h("span", { id: "episode-count" }, `${result.total} episodes · page ${page + 1} of ${pages}`),
    h("button", { disabled: page + 1 >= pages, onclick: () => { location.hash = href("episodes", Object.assign({}, keep, { page: page + 1 })); } }, "next ›"));
  const cell = (r, key) => key === "outcome" ? outcomeTag(r.outcome) : key === "score" ? fmt(r.score) : key === "wall_s" ? fmt(r.wall_s, 2)
    : key === "backbone" || key === "mode" ? (r[key] || "-") : r[key];
  const rows = result.rows.map(r => h("tr", { class: "clickable", "data-episode-id": r.id, onclick: () => { location.hash = href(`episode/${r.id}`); } },
    columns.map(([, key]) => h("td", { "data-col": key }, cell(r, key)))));
  const sortable = new Set(ov.sorts || columns.map(c => c[1]));
  const heads = columns.map(([label, key]) => sortable.has(key) ? h("th", { class: "sortable" + (sort === key ? (desc ? " sorted-desc" : " sorted-asc") : ""),
    "data-sort": key, onclick: () => { go({ sort: key, desc: sort === key && !desc ? "1" : "", page: "" }); } }, label)
    : h("th", {}, label));
  return h("section", { id: "view-episodes" }, h("h2", {}, "Episodes"), bar, builder(conds, go), h("div", { class: "filters" }, grouping, picker),
    groupTable, pager, h("table", { id: "episodes-table" }, h("thead", {}, h("tr", {}, heads)), h("tbody", {}, rows)));
}

// -- One episode ------------------------------------------------------------------------
function stepView(step, n) {
  const t = step.trace || {};  // what the policy said about the step (schema 2: a step holds its trace)
  const cands = t.candidates || [];  // the best-scored candidates, recorded by the agent
  return h("div", { class: "step" + (t.parse_failure ? " parse-failure" : ""), "data-step": n },
    h("div", {}, h("span", { class: "muted" }, `step ${n} · `), h("span", { class: "action" }, step.action),
      t.parse_failure ? h("span", { class: "tag flagged" }, "parse failure") : null,
      h("span", { class: "muted" }, ` · reward ${fmt(step.reward)} · score ${fmt(step.score)}`),
      step.seconds !== undefined && step.seconds !== null ? h("span", { class: "muted", "data-seconds": step.seconds }, ` · ${fmt(step.seconds, 3)} s`) : null),
    t.reasoning ? h("div", {}, h("i", {}, "reasoning: "), t.reasoning) : null,
    h("pre", { class: "observation" }, step.observation),
    cands.length ? h("details", {}, h("summary", {}, `candidate scores (${cands.length})`),
      table(["candidate", `${t.reduction || "sum"} log-lik`], cands.map(([c, s]) => h("tr", {}, h("td", {}, c), h("td", {}, fmt(s, 3)))))) : null,
    h("details", { class: "raw" }, h("summary", {}, "prompt and raw response"),
      h("h4", {}, "prompt"), h("pre", { class: "prompt" }, t.prompt ?? "(not recorded)"),
      h("h4", {}, "response"), h("pre", { class: "response" }, t.response ?? "(not recorded)")));
}

function decisionView(ep) {
  const info = ep.line.head.policy_info || {};
  const usage = ep.line.head.usage || {};
  const box = h("aside", { class: "decision", id: "decision" }, h("h3", {}, "Memory decision"));
  const kv = [["mode", info.mode ?? "-"], ["why", info.mode_reason ?? "-"], ["neighbours' mean similarity", fmt(info.mean_similarity, 3)],
    ["synthesis calls", info.synthesis_calls ?? 0], ["synthesis skipped", info.synthesis_skipped ?? "-"],
    ["memory empty", info.memory_empty ?? "-"]];
  box.append(h("table", {}, kv.map(([a, b]) => h("tr", {}, h("th", {}, a), h("td", { "data-key": a }, String(b))))));
  if (info.utilities && Object.keys(info.utilities).length) {
    box.append(h("h4", {}, "bandit utilities"), table(["mode", "utility"],
      Object.entries(info.utilities).map(([m, u]) => h("tr", {}, h("td", {}, m), h("td", {}, typeof u === "object" ? JSON.stringify(u) : fmt(u, 3))))));
  }
  box.append(h("h4", {}, `retrieved records (${ep.retrieved.length})`));
  if (ep.retrieved.length) {
    box.append(h("ul", { id: "retrieved" }, ep.retrieved.map((r, i) => h("li", {},
      r.episode ? h("a", { href: href(`episode/${r.episode}`), "data-record": r.record, "data-source-episode": r.episode }, `record ${r.record} → episode ${r.episode}`)
        : h("span", { "data-record": r.record }, `record ${r.record} (source episode not in this run)`),
      info.similarities && info.similarities[i] !== undefined ? h("span", { class: "muted" }, ` · similarity ${fmt(info.similarities[i], 3)}`) : null))));
  }
  if (ep.abstractions.length) {
    box.append(h("h4", {}, `abstractions in the prompt (${ep.abstractions.length})`), h("ul", {}, ep.abstractions.map(a => h("li", {},
      a.flagged ? h("span", { class: "tag flagged" }, "flagged") : null,
      h("a", { href: href("provenance", { setting: ep.row.setting, abstraction: a.id }) }, `#${a.id}`), " ", a.text ?? ""))));
  }
  if (info.guidance) box.append(h("h4", {}, "guidance"), h("pre", { id: "guidance" }, info.guidance));
  const purposes = Object.keys(usage.calls || {});
  if (purposes.length) {
    box.append(h("h4", {}, "cost by purpose"), table(["purpose", "calls", "prompt tokens", "completion tokens"],
      purposes.map(p => h("tr", {}, h("td", {}, p), h("td", {}, usage.calls[p]), h("td", {}, (usage.prompt_tokens || {})[p] ?? 0),
        h("td", {}, (usage.completion_tokens || {})[p] ?? 0)))));
  }
  const shown = ["mode", "mode_reason", "mean_similarity", "synthesis_calls", "synthesis_skipped", "memory_empty", "utilities",
    "retrieved_records", "similarities", "guidance", "abstractions_in_prompt"];
  const other = Object.keys(info).filter(x => !shown.includes(x));
  // every other decision the policy recorded, with what the record's declaration says it holds
  // (ap_gym.types.Decisions and the keys designs declare: window.APGYM_DECISIONS)
  const notes = window.APGYM_DECISIONS || {};
  if (other.length) box.append(h("details", {}, h("summary", {}, "everything else the policy recorded"),
    table(["decision", "what it holds", "value"], other.map(x => h("tr", { "data-decision": x }, h("td", {}, x),
      h("td", { class: "muted" }, notes[x] ?? "(not declared)"), h("td", {}, h("pre", {}, JSON.stringify(info[x], null, 1))))))));
  return box;
}

async function viewEpisode(id) {
  const k = currentRun();
  const ep = await api(`run/${k}/episode/${id}`);
  const x = ep.line.head;
  const head = h("div", {},
    h("h2", {}, `Episode ${id}: ${x.task_id}`),
    h("p", {}, outcomeTag(ep.row.outcome), ` · score ${fmt(x.score)} / ${fmt(x.max_score)} · ${x.num_steps} steps · ${x.termination} · `,
      `${x.benchmark} · ${x.backbone || ""} ${x.policy} seed ${x.seed} · ${x.phase} iteration ${x.iteration} · LLM calls ${x.usage ? x.usage.llm_calls : "?"}`),
    x.error ? h("p", { class: "error" }, x.error) : null,
    h("p", {}, h("b", {}, "instruction: "), h("span", { id: "instruction" }, x.instruction)),
    h("p", {}, h("a", { href: href("compare", { a: id, task_id: x.task_id }) }, "compare with another episode of this task"), " · ",
      h("a", { id: "export", href: "#", onclick: e => { e.preventDefault(); exportEpisode(k, id, x); } }, "export as JSON")));
  // every other field of the head, in the record's declared order (window.APGYM_RECORD, sent
  // from ap_gym.protocol.results.record_fields): a field added to the record shows here unasked
  const shownHead = ["task_id", "score", "max_score", "num_steps", "termination", "benchmark", "backbone", "policy", "seed",
    "phase", "iteration", "usage", "error", "instruction", "initial_observation", "policy_info"];
  const rest = ((window.APGYM_RECORD || {}).head || []).filter(f => !shownHead.includes(f) && x[f] !== undefined);
  head.append(h("details", { id: "record-fields" }, h("summary", {}, "everything else the record holds"),
    table(["field", "value"], rest.map(f => h("tr", { "data-field": f }, h("td", {}, f), h("td", {}, JSON.stringify(x[f])))))));
  const steps = h("div", { id: "timeline" }, h("h3", {}, "Timeline"),
    h("details", {}, h("summary", {}, "initial observation"), h("pre", {}, x.initial_observation)),
    ep.line.steps.map((s, i) => stepView(s, i + 1)));
  return h("section", { id: "view-episode", "data-episode-id": id }, head, h("div", { class: "episode" }, steps, decisionView(ep)));
}

function exportEpisode(k, id, line) {
  if (MODE === "server") { location.href = `api/run/${k}/episode/${id}/export`; return; }
  const a = h("a", { href: URL.createObjectURL(new Blob([JSON.stringify(line, null, 1)], { type: "application/json" })),
    download: `run${k}-episode${id}.json` });
  document.body.appendChild(a); a.click(); a.remove();
}

// -- Compare ----------------------------------------------------------------------------
async function viewCompare(params) {
  const k = currentRun();
  const ov = await api(`run/${k}/overview`);
  const evalTasks = ov.facets.eval_task_id;
  let task = params.task_id;
  if (!task && params.a) task = (await api(`run/${k}/episode/${params.a}`)).line.head.task_id;
  const root = h("section", { id: "view-compare" }, h("h2", {}, "Compare two episodes of one task, aligned by step"));
  const taskSel = h("select", { "data-compare": "task", onchange: e => { location.hash = href("compare", { task_id: e.target.value }); } },
    h("option", { value: "" }, "choose a held-out task"), evalTasks.map(t => h("option", { value: t, selected: t === task }, t)));
  root.append(h("div", { class: "filters" }, h("label", {}, "task", taskSel)));
  if (!task) return root;
  const all = [];
  for (let page = 0; ; page++) {
    const r = await queryEpisodes(k, { task_id: task }, page);
    all.push(...r.rows);
    if ((page + 1) * PER_PAGE >= r.total) break;
  }
  const label = r => `${r.policy} · seed ${r.seed} · ${r.phase} it ${r.iteration} · ${r.outcome} (#${r.id})`;
  const evals = all.filter(r => r.phase === "eval");
  const pool = evals.length ? evals : all;
  const a = params.a ? Number(params.a) : (pool[0] && pool[0].id);
  const b = params.b ? Number(params.b) : ((pool.find(r => r.id !== a && r.policy !== (pool.find(q => q.id === a) || {}).policy) || pool.find(r => r.id !== a) || {}).id);
  const pick = (side, current) => h("label", {}, `episode ${side.toUpperCase()}`, h("select", { "data-compare": side, onchange: e => {
    const p = { task_id: task, a, b }; p[side] = e.target.value; location.hash = href("compare", p); } },
    all.map(r => h("option", { value: r.id, selected: r.id === current }, label(r)))));
  root.append(h("div", { class: "filters" }, pick("a", a), pick("b", b)));
  if (a === undefined || b === undefined) { root.append(h("p", {}, "This task has only one episode in this run.")); return root; }
  const [ea, eb] = await Promise.all([api(`run/${k}/episode/${a}`), api(`run/${k}/episode/${b}`)]);
  const n = Math.max(ea.line.steps.length, eb.line.steps.length);
  const cell = (s) => s ? [h("div", { class: "action" }, s.action), h("pre", {}, s.observation)] : [h("span", { class: "muted" }, "—")];
  const rows = [];
  for (let i = 0; i < n; i++) {
    const sa = ea.line.steps[i], sb = eb.line.steps[i];
    const differs = !sa || !sb || sa.action !== sb.action;
    rows.push(h("tr", { "data-step": i + 1 }, h("td", { class: "k" }, i + 1), h("td", { class: differs ? "differs" : "" }, cell(sa)),
      h("td", { class: differs ? "differs" : "" }, cell(sb))));
  }
  const summary = e => h("div", {}, h("a", { href: href(`episode/${e.id}`) }, label(e.row)), h("br"),
    `mode ${e.line.head.policy_info?.mode ?? "-"} · ${e.line.head.num_steps} steps · score ${fmt(e.line.head.score)} · LLM calls ${e.line.head.usage?.llm_calls}`);
  root.append(table(["step", "A", "B"], [h("tr", {}, h("td", {}), h("td", {}, summary(ea)), h("td", {}, summary(eb))), ...rows],
    { class: "compare", id: "compare-table", "data-a": a, "data-b": b }));
  return root;
}

// -- Provenance -------------------------------------------------------------------------
async function viewProvenance(params) {
  const k = currentRun();
  const prov = await api(`run/${k}/provenance`);
  const root = h("section", { id: "view-provenance" }, h("h2", {}, "Provenance of stored abstractions"),
    h("p", { class: "muted" }, "Source episodes → abstraction → episodes that saw it in their prompt. Red: flagged by the audit's "
      + "EnvironmentLabeller (not flagged means not flagged, never correct); dashed red: a flagged parent."));
  const withAbs = prov.filter(p => p.abstractions.length);
  if (!withAbs.length) { root.append(h("p", {}, "No setting of this run stored abstractions.")); return root; }
  const setting = params.setting && withAbs.some(p => p.setting === params.setting) ? params.setting : withAbs[0].setting;
  root.append(h("div", { class: "filters" }, h("label", {}, "setting", h("select", { "data-provenance": "setting",
    onchange: e => { location.hash = href("provenance", { setting: e.target.value }); } },
    withAbs.map(p => h("option", { value: p.setting, selected: p.setting === setting }, `${p.setting} (${p.abstractions.length})`))))));
  const entry = withAbs.find(p => p.setting === setting);
  const a = entry.audit || {};
  root.append(table(["stored", "flagged", "invocations", "q (exposed share)", "alpha (flagged if exposed)", "eta (admitted)"],
    [h("tr", { id: "audit-row" }, h("td", {}, a.abstractions ?? entry.abstractions.length), h("td", {}, a.flagged ?? "-"),
      h("td", {}, a.invocations ?? "-"), h("td", {}, `${fmt(a.q)} (${a.exposed_invocations ?? 0}/${a.invocations ?? 0})`),
      h("td", {}, `${fmt(a.alpha)} (${a.flagged_exposed_invocations ?? 0}/${a.exposed_invocations ?? 0})`),
      h("td", {}, `${fmt(a.eta)} (${a.admitted_invocations ?? 0}/${a.invocations ?? 0})`))]));
  const selected = params.abstraction ? Number(params.abstraction) : null;
  root.append(graph(entry, selected));
  const chosen = entry.abstractions.find(x => x.id === selected);
  if (chosen) {
    root.append(h("div", { id: "abstraction-detail" }, h("h3", {}, `Abstraction #${chosen.id} (${chosen.kind}, iteration ${chosen.iteration}${chosen.active ? "" : ", inactive"})`),
      chosen.flagged ? h("p", {}, h("span", { class: "tag flagged" }, "flagged"), chosen.reasons.join("; ")) : h("p", { class: "muted" }, "not flagged"),
      h("pre", {}, chosen.text),
      h("p", {}, "sources: ", chosen.sources.map(s => s.episode ? h("a", { href: href(`episode/${s.episode}`), "data-source-episode": s.episode }, `episode ${s.episode} `) : `record ${s.record} `)),
      h("p", {}, h("a", { id: "lineage-link", href: href("lineage", { setting, abstraction: chosen.id }) }, "its lineage: ancestors, descendants and the episodes they guided")),
      h("p", {}, "parents: ", chosen.parents.length ? chosen.parents.map(p => h("a", { href: href("provenance", { setting, abstraction: p }) }, `#${p} `)) : "none"),
      h("p", {}, `seen by ${chosen.seen_by.length} episode(s): `, chosen.seen_by.slice(0, 200).map(e => h("a", { href: href(`episode/${e}`) }, `${e} `)))));
  }
  return root;
}

// -- Lineage: one abstraction's ancestors and descendants across iterations -------------------
function lineageOf(abs, id) {
  const byId = new Map(abs.map(a => [a.id, a])), children = new Map();
  for (const a of abs) for (const p of a.parents) { if (!children.has(p)) children.set(p, []); children.get(p).push(a.id); }
  const walk = (start, next) => { const seen = new Set(), todo = [...next(start)];
    while (todo.length) { const x = todo.shift(); if (seen.has(x) || x === start || !byId.has(x)) continue; seen.add(x); todo.push(...next(x)); }
    return seen; };
  return { byId, ancestors: walk(id, x => (byId.get(x) || { parents: [] }).parents), descendants: walk(id, x => children.get(x) || []) };
}

function estimateText(e) { return e && e[0] !== null ? `${fmt(e[0], 3)} [${fmt(e[1], 3)}, ${fmt(e[2], 3)}]` : "n/a"; }

async function viewLineage(params) {
  const k = currentRun();
  const prov = await api(`run/${k}/provenance`);
  const entry = prov.find(p => p.setting === params.setting) || prov.find(p => p.abstractions.length);
  const root = h("section", { id: "view-lineage" }, h("h2", {}, "Lineage of an abstraction"));
  if (!entry || !entry.abstractions.length) { root.append(h("p", {}, "No setting of this run stored abstractions.")); return root; }
  const id = entry.abstractions.some(a => a.id === Number(params.abstraction)) ? Number(params.abstraction)
    : (entry.abstractions.find(a => a.flagged) || entry.abstractions[0]).id;
  const { byId, ancestors, descendants } = lineageOf(entry.abstractions, id);
  const members = [...ancestors, id, ...descendants].map(x => byId.get(x)).sort((a, b) => a.iteration - b.iteration || a.id - b.id);
  const relation = a => a.id === id ? "this one" : ancestors.has(a.id) ? "ancestor" : "descendant";
  const au = entry.audit || {}, est = au.estimates || {};
  root.append(h("p", { class: "muted" }, `Setting ${entry.setting}. An abstraction's descendants are the abstractions written by `
      + "synthesis calls that retrieved it (their parents), and theirs, across iterations; each node's episodes are the ones that saw it in "
      + "their prompt. Red: flagged by the audit's labeller (not flagged means not flagged, never correct); grey text: no longer admitted "
      + "(deactivated)."),
    h("div", { class: "filters" }, h("label", {}, "abstraction", h("select", { "data-lineage": "abstraction",
      onchange: e => { location.hash = href("lineage", { setting: entry.setting, abstraction: e.target.value }); } },
      entry.abstractions.map(a => h("option", { value: a.id, selected: a.id === id }, `#${a.id} (iteration ${a.iteration}${a.flagged ? ", flagged" : ""})`))))),
    h("h3", {}, "Does exposure to flagged abstractions reproduce errors? (this setting's audit)"),
    table(["estimate", "value [95 % interval]", "what it is"], [
      h("tr", { "data-estimate": "gap" }, h("td", {}, "observational gap"), h("td", {}, estimateText(est.gap)),
        h("td", {}, "flagged-output rate of synthesis calls that retrieved a flagged abstraction minus that of calls that did not")),
      h("tr", { "data-estimate": "stratified_gap" }, h("td", {}, "family-stratified gap"), h("td", {}, estimateText(est.stratified_gap)),
        h("td", {}, "the same within task families (confounding across families only)")),
      h("tr", { "data-estimate": "randomised_gap" }, h("td", {}, "randomised gap"), h("td", {}, au.randomised_units ? estimateText(est.randomised_gap) : (au.randomise_exposure ? "no data" : "not run")),
        h("td", {}, au.randomised_units ? `shown minus withheld by a recorded coin, over ${au.randomised_units} calls whose task retrieved a flagged abstraction: causal`
          : au.randomise_exposure ? `this run randomised exposure (p = ${au.randomise_exposure}; ${au.coins || 0} coins recorded), but no synthesis call's task retrieved a flagged abstraction: the randomised gap has nothing to compare`
          : "this run did not randomise exposure (audit: {randomise_exposure: p})"))], { id: "audit-estimates" }));
  // the graph: one column per iteration, parents to children
  const NS = "http://www.w3.org/2000/svg";
  const s = (tag, attrs, ...kids) => { const el = document.createElementNS(NS, tag); for (const [a, v] of Object.entries(attrs)) el.setAttribute(a, v); kids.forEach(c => el.appendChild(c)); return el; };
  const its = [...new Set(members.map(a => a.iteration))].sort((a, b) => a - b);
  const colW = 230, rowH = 34, boxW = 200;
  const perIt = {}, pos = {};
  for (const a of members) { const col = its.indexOf(a.iteration), row = (perIt[col] = (perIt[col] ?? -1) + 1); pos[a.id] = [20 + col * colW, 40 + row * rowH]; }
  const height = 60 + Math.max(...Object.values(perIt)) * rowH + rowH, width = 40 + its.length * colW;
  const svg = s("svg", { class: "graph", id: "lineage-graph", width, height, viewBox: `0 0 ${width} ${height}` });
  its.forEach((it, i) => { const t = s("text", { x: 20 + i * colW, y: 20, "font-weight": "600" }); t.textContent = `iteration ${it}`; svg.appendChild(t); });
  for (const a of members) for (const p of a.parents) if (pos[p]) {
    const [x1, y1] = pos[p], [x2, y2] = pos[a.id];
    svg.appendChild(s("path", { class: byId.get(p).flagged ? "parent" : "", "data-edge": `${p}-${a.id}`,
      d: `M${x1 + boxW},${y1 + 11} C${x1 + boxW + 20},${y1 + 11} ${x2 - 20},${y2 + 11} ${x2},${y2 + 11}` }));
  }
  for (const a of members) {
    const [x, y] = pos[a.id];
    const label = `#${a.id} · seen by ${a.seen_by.length}${a.active ? "" : " · inactive"}`;
    const text = s("text", { x: x + 6, y: y + 15 }); text.textContent = label;
    const title = s("title", {}); title.textContent = a.text;
    const g = s("g", { class: `node ${a.flagged ? "flagged" : ""} ${a.id === id ? "selected" : ""}`, "data-abstraction": a.id, "data-flagged": a.flagged,
      "data-relation": relation(a) }, s("rect", { x, y, width: boxW, height: 22, rx: 4 }), text, title);
    g.addEventListener("click", () => { location.hash = href("lineage", { setting: entry.setting, abstraction: a.id }); });
    svg.appendChild(g);
  }
  root.append(h("h3", {}, `${ancestors.size} ancestor(s), ${descendants.size} descendant(s)`), svg,
    table(["abstraction", "relation", "iteration", "flagged", "admitted", "episodes that saw it", "text"], members.map(a => h("tr", { "data-abstraction": a.id, "data-relation": relation(a) },
      h("td", {}, h("a", { href: href("provenance", { setting: entry.setting, abstraction: a.id }) }, `#${a.id}`)), h("td", {}, relation(a)), h("td", {}, a.iteration),
      h("td", {}, a.flagged ? h("span", { class: "tag flagged", title: a.reasons.join("; ") }, "flagged") : "no"), h("td", {}, a.active ? "yes" : "no (deactivated)"),
      h("td", { "data-col": "seen" }, h("span", { "data-count": a.seen_by.length }, `${a.seen_by.length}: `),
        a.seen_by.slice(0, 30).map(e => h("a", { href: href(`episode/${e}`), "data-episode": e }, `${e} `)), a.seen_by.length > 30 ? "…" : ""),
      h("td", {}, a.text))), { id: "lineage-table" }));
  return root;
}

function graph(entry, selected) {
  const NS = "http://www.w3.org/2000/svg";
  const s = (tag, attrs, ...kids) => { const el = document.createElementNS(NS, tag); for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v); kids.forEach(c => el.appendChild(c)); return el; };
  const abs = entry.abstractions;
  const MAX_SEEN = 12;
  const sources = [...new Set(abs.flatMap(x => x.sources.map(y => y.episode).filter(e => e)))];
  const seen = [...new Set(abs.flatMap(x => x.seen_by.slice(0, MAX_SEEN)))];
  const rowH = 26, W = 980, colX = [10, 330, 760], boxW = [150, 380, 150];
  const height = Math.max(sources.length, abs.length, seen.length) * rowH + 40;
  const svg = s("svg", { class: "graph", id: "provenance-graph", width: W, height, viewBox: `0 0 ${W} ${height}` });
  const y = i => 30 + i * rowH;
  const pos = { src: {}, abs: {}, seen: {} };
  sources.forEach((e, i) => pos.src[e] = y(i));
  abs.forEach((a, i) => pos.abs[a.id] = y(i));
  seen.forEach((e, i) => pos.seen[e] = y(i));
  const edges = s("g", {});
  svg.appendChild(edges);
  const curveP = (x1, y1, x2, y2) => `M${x1},${y1 + 9} C${(x1 + x2) / 2},${y1 + 9} ${(x1 + x2) / 2},${y2 + 9} ${x2},${y2 + 9}`;
  for (const a of abs) {
    for (const src of a.sources) if (src.episode) edges.appendChild(s("path", { d: curveP(colX[0] + boxW[0], pos.src[src.episode], colX[1], pos.abs[a.id]) }));
    for (const e of a.seen_by.slice(0, MAX_SEEN)) edges.appendChild(s("path", { d: curveP(colX[1] + boxW[1], pos.abs[a.id], colX[2], pos.seen[e]) }));
    for (const p of a.parents) if (p in pos.abs) {
      const parentFlagged = (abs.find(x => x.id === p) || {}).flagged;
      edges.appendChild(s("path", { class: parentFlagged ? "parent" : "", d: `M${colX[1]},${pos.abs[p] + 9} C${colX[1] - 60},${pos.abs[p] + 9} ${colX[1] - 60},${pos.abs[a.id] + 9} ${colX[1]},${pos.abs[a.id] + 9}` }));
    }
  }
  const node = (x, yy, w, label, cls, go, attrs) => {
    const text = s("text", { x: x + 6, y: yy + 13 }); text.textContent = label.length > w / 6.2 ? label.slice(0, Math.floor(w / 6.2) - 1) + "…" : label;
    const title = s("title", {}); title.textContent = label;
    const g = s("g", Object.assign({ class: "node " + cls }, attrs), s("rect", { x, y: yy, width: w, height: 19, rx: 4 }), text, title);
    g.addEventListener("click", go);
    svg.appendChild(g);
  };
  const head = (x, label) => { const t = s("text", { x, y: 16, "font-weight": "600" }); t.textContent = label; svg.appendChild(t); };
  head(colX[0], "source episodes"); head(colX[1], "abstractions"); head(colX[2], `episodes that saw them (≤${MAX_SEEN} each)`);
  sources.forEach(e => node(colX[0], pos.src[e], boxW[0], `episode ${e}`, "episode", () => { location.hash = href(`episode/${e}`); }, { "data-episode": e }));
  abs.forEach(a => node(colX[1], pos.abs[a.id], boxW[1], `#${a.id} ${a.text}`, (a.flagged ? "flagged " : "") + (a.id === selected ? "selected" : ""),
    () => { location.hash = href("provenance", { setting: entry.setting, abstraction: a.id }); }, { "data-abstraction": a.id, "data-flagged": a.flagged }));
  seen.forEach(e => node(colX[2], pos.seen[e], boxW[2], `episode ${e}`, "episode", () => { location.hash = href(`episode/${e}`); }, { "data-episode": e }));
  return svg;
}

// -- Task x policy matrix ----------------------------------------------------------------
async function matrixData(k, benchmark, iteration, split) {
  if (MODE === "server") {
    const p = { split_seeds: split ? "true" : "false" };
    if (benchmark) p.benchmark = benchmark;
    if (iteration !== "") p.iteration = iteration;
    return api(`run/${k}/matrix`, p);
  }
  const rows = (await api(`run/${k}/episodes`)).filter(r => r.phase === "eval");
  const benchmarks = [...new Set(rows.map(r => r.benchmark))].sort();
  benchmark = benchmark || benchmarks[0];
  const mine = rows.filter(r => r.benchmark === benchmark);
  const last = {};
  for (const r of mine) last[r.setting] = Math.max(last[r.setting] ?? -1, r.iteration);
  const cells = {}, columns = new Set();
  for (const r of mine) {
    if (r.iteration !== (iteration !== "" ? Number(iteration) : last[r.setting]) || r.outcome === "infrastructure_failure") continue;
    const c = split ? `${r.policy} seed${r.seed}` : r.policy;
    columns.add(c);
    const cell = ((cells[r.task_id] ||= {})[c] ||= { n: 0, won: 0 });
    cell.n += 1; cell.won += r.success ? 1 : 0;
  }
  return { benchmark, benchmarks, columns: [...columns].sort(), rows: Object.keys(cells).sort().map(t => ({ task_id: t, cells: cells[t] })) };
}

async function viewMatrix(params) {
  const k = currentRun();
  const split = params.split === "1", iteration = params.iteration ?? "";
  const m = await matrixData(k, params.benchmark || "", iteration, split);
  const go = change => { location.hash = href("matrix", Object.assign({ benchmark: m.benchmark, iteration, split: split ? "1" : "" }, change)); };
  const root = h("section", { id: "view-matrix" }, h("h2", {}, "Held-out success: task × policy"),
    h("p", { class: "muted" }, "Each cell: episodes won / played at the iteration chosen (default: each setting's last), infrastructure failures left out. Click a cell to compare that task's episodes."),
    h("div", { class: "filters" },
      h("label", {}, "benchmark", h("select", { "data-matrix": "benchmark", onchange: e => go({ benchmark: e.target.value }) },
        m.benchmarks.map(b => h("option", { value: b, selected: b === m.benchmark }, b)))),
      h("label", {}, "iteration (empty: last)", h("input", { "data-matrix": "iteration", type: "number", min: 0, value: iteration,
        onchange: e => go({ iteration: e.target.value }) })),
      h("label", {}, "seeds apart", h("input", { "data-matrix": "split", type: "checkbox", checked: split, onchange: e => go({ split: e.target.checked ? "1" : "" }) }))));
  const shade = c => { const r = c.n ? c.won / c.n : 0; return `background: rgba(26,127,55,${(0.1 + 0.6 * r).toFixed(2)})`; };
  const rows = m.rows.map(r => h("tr", { "data-task": r.task_id }, h("th", {}, r.task_id), m.columns.map(c => {
    const cell = r.cells[c];
    return cell ? h("td", { class: "cell", style: shade(cell), "data-column": c, title: `${r.task_id} · ${c}`,
      onclick: () => { location.hash = href("compare", { task_id: r.task_id }); } }, `${cell.won}/${cell.n}`) : h("td", { class: "cell muted" }, "–");
  })));
  const totals = h("tr", {}, h("th", {}, "all tasks"), m.columns.map(c => {
    const n = m.rows.reduce((a, r) => a + (r.cells[c]?.n || 0), 0), won = m.rows.reduce((a, r) => a + (r.cells[c]?.won || 0), 0);
    return h("td", { class: "cell" }, n ? `${won}/${n} (${fmt(won / n)})` : "–");
  }));
  root.append(table(["task", ...m.columns], [...rows, totals], { class: "matrix", id: "matrix-table" }));
  return root;
}

// -- Search -------------------------------------------------------------------------------
async function viewSearch(params) {
  const k = currentRun();
  const q = params.q || "";
  document.getElementById("search-box").value = q;
  const root = h("section", { id: "view-search" }, h("h2", {}, q ? `Search: ${q}` : "Search"));
  if (!q) { root.append(h("p", { class: "muted" }, "Type words in the box above: instructions, guidance, actions and observations are searched.")); return root; }
  const res = MODE === "static" ? await staticSearch(k, q, 100) : await fresh(`run/${k}/search`, { q, limit: 100 });
  const st = res.status;
  root.append(h("p", { class: "muted", id: "search-status" }, (res.total > res.hits.length ? `the best ${res.hits.length} of ${res.total} hit(s)` : `${res.hits.length} hit(s)`) + (st.ready ? "" : ` · the search index holds ${st.indexed} of ${st.episodes} episodes so far`)));
  root.append(h("ol", { class: "hits", id: "search-hits" }, res.hits.map(hit => h("li", { "data-episode": hit.episode, "data-step": hit.step },
    h("a", { href: href(`episode/${hit.episode}`, hit.step >= 0 ? { step: hit.step + 1 } : {}) },
      `episode ${hit.episode} · ${hit.row.task_id} · ${hit.row.policy} seed ${hit.row.seed} · ${hit.row.phase} it ${hit.row.iteration} · ${hit.step >= 0 ? "step " + (hit.step + 1) : hit.field}`),
    h("div", { class: "snippet" }, hit.snippet)))));
  return root;
}

// A bundle searches in the page: MiniSearch over the documents the server's index holds
// (instructions, guidance, each step's action and observation), every word required.
const miniSearches = {};
function snippetOf(text, terms) {
  const lower = text.toLowerCase();
  const at = Math.min(...terms.map(t => lower.indexOf(t.toLowerCase())).filter(i => i >= 0), text.length);
  const start = Math.max(0, at - 60), term = terms.find(t => lower.indexOf(t.toLowerCase()) === at) || "";
  return (start ? "..." : "") + text.slice(start, at) + "[" + text.slice(at, at + term.length) + "]" +
    text.slice(at + term.length, at + term.length + 60) + (at + term.length + 60 < text.length ? "..." : "");
}
async function staticSearch(k, q, limit) {
  const [data, rows] = await Promise.all([api(`run/${k}/search`), api(`run/${k}/episodes`)]);
  if (!miniSearches[k]) {
    const ms = new MiniSearch({ idField: "i", fields: ["text"], storeFields: ["text", "episode", "step", "field"] });
    ms.addAll(data.docs.map((d, i) => ({ i, text: d[0], episode: d[1], step: d[2], field: d[3] })));
    miniSearches[k] = ms;
  }
  const found = miniSearches[k].search(q, { combineWith: "AND" });
  const byId = new Map(rows.map(r => [r.id, r]));
  return { query: q, total: found.length, status: { ready: data.indexed === data.episodes, indexed: data.indexed, episodes: data.episodes },
    hits: found.slice(0, limit).map(f => ({ episode: f.episode, step: f.step, field: f.field, snippet: snippetOf(f.text, f.terms), row: byId.get(f.episode) }))
      .filter(x => x.row) };
}

// -- Config diff --------------------------------------------------------------------------
function flatten(value, prefix, out) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix + k + ".", out);
  } else if (Array.isArray(value) && value.length && value.every(v => v && typeof v === "object" && "label" in v)) {
    flatten(Object.fromEntries(value.map(v => [v.label, v])), prefix, out);
  } else out[prefix.replace(/\.$/, "")] = value;
  return out;
}

async function viewDiff(params) {
  const runs = await api("runs");
  const a = Number(params.a ?? 0), b = Number(params.b ?? (runs.length > 1 ? 1 : 0));
  const pick = (side, cur) => h("label", {}, `run ${side.toUpperCase()}`, h("select", { "data-diff": side, onchange: e => {
    const p = { a, b }; p[side] = e.target.value; location.hash = href("diff", p); } },
    runs.map(r => h("option", { value: r.run, selected: r.run === cur }, r.name))));
  const root = h("section", { id: "view-diff" }, h("h2", {}, "Config diff between two runs"), h("div", { class: "filters" }, pick("a", a), pick("b", b)));
  let diff;
  if (MODE === "server") diff = await api("diff", { a, b });
  else {
    const [ca, cb] = await Promise.all([api(`run/${a}/config`), api(`run/${b}/config`)]);
    const fa = flatten(ca || {}, "", {}), fb = flatten(cb || {}, "", {});
    const keys = [...new Set([...Object.keys(fa), ...Object.keys(fb)])].sort();
    const same = x => JSON.stringify(fa[x]) === JSON.stringify(fb[x]);
    diff = { differences: keys.filter(x => !same(x)).map(x => ({ key: x, a: fa[x], b: fb[x] })), same: keys.filter(same).length };
  }
  const show = v => v === undefined ? "(absent)" : JSON.stringify(v);
  root.append(h("p", { class: "muted", id: "diff-summary" }, `${diff.differences.length} key(s) differ, ${diff.same} the same`),
    table(["key", runs[a].name, runs[b].name], diff.differences.map(d => h("tr", { "data-key": d.key }, h("td", {}, d.key),
      h("td", { class: "diff-a" }, show(d.a)), h("td", { class: "diff-b" }, show(d.b)))), { id: "diff-table" }));
  return root;
}

// -- Curves: any held-out series of several runs overlaid ----------------------------------
const CURVE_METRICS = { success_rate: "held-out success", score: "held-out score", steps: "steps per episode",
  llm_calls: "LLM calls per episode", tokens: "tokens per episode" };
const CURVE_X = { iteration: "iteration", train_llm_calls: "training LLM calls spent (cumulative)",
  train_tokens: "training tokens spent (cumulative)",
  train_wall_s: "training episode-seconds (cumulative; summed over episodes, not a parallel run's clock)" };

async function viewCurves(params) {
  const runs = await api("runs");
  const overviews = await Promise.all(runs.map(r => api(`run/${r.run}/overview`)));
  const panelOf = s => s.benchmark + (s.backbone ? ` @ ${s.backbone}` : "");
  const panels = [...new Set(overviews.flatMap(o => o.settings.map(panelOf)))].sort();
  const panel = panels.includes(params.panel) ? params.panel : panels[0];
  const metric = params.metric in CURVE_METRICS ? params.metric : "success_rate";
  const x = params.x in CURVE_X ? params.x : "iteration";
  const smooth = Math.max(1, Math.floor(Number(params.smooth) || 1));
  const hidden = new Set((params.hide || "").split(",").filter(Boolean).map(Number));
  const go = change => { location.hash = href("curves", Object.assign({ panel, metric, x, smooth, hide: [...hidden].join(",") }, change)); };
  const select = (name, values, current, labels) => h("select", { "data-curves": name, onchange: e => go({ [name]: e.target.value }) },
    values.map(v => h("option", { value: v, selected: String(v) === String(current) }, labels ? labels[v] : v)));
  const root = h("section", { id: "view-curves" }, h("h2", {}, "Curves: runs overlaid"),
    h("p", { class: "muted" }, "Held-out episodes of each (run, policy): the mean over seeds of the per-seed value at each " +
      "iteration (infrastructure failures excluded). The cost axes count the training episodes' LLM calls, tokens or " +
      "episode-seconds spent by the end of the iteration (mean over seeds)."),
    h("div", { class: "filters" },
      h("label", {}, "benchmark", select("panel", panels, panel)),
      h("label", {}, "metric", select("metric", Object.keys(CURVE_METRICS), metric, CURVE_METRICS)),
      h("label", {}, "x axis", select("x", Object.keys(CURVE_X), x, CURVE_X)),
      h("label", {}, "smoothing (trailing mean over points)", select("smooth", [1, 2, 3, 5], smooth)),
      h("fieldset", { class: "logs" }, h("legend", {}, "runs shown"), runs.map(r => h("label", { class: "inline" },
        h("input", { type: "checkbox", "data-run": r.run, checked: !hidden.has(r.run), onchange: e => {
          if (e.target.checked) hidden.delete(r.run); else hidden.add(r.run);
          go({ hide: [...hidden].join(",") }); } }), " " + r.name)))));
  const series = [];
  runs.forEach((r, k) => {
    if (hidden.has(r.run)) return;
    const spent = new Map(overviews[k].spent.map(s => [`${s.setting}\u0000${s.iteration}`, s]));
    const byPolicy = {};
    for (const s of overviews[k].settings.filter(s => panelOf(s) === panel)) {
      const cost = spent.get(`${s.setting}\u0000${s.iteration}`) || {};
      ((byPolicy[s.policy] ||= {})[s.iteration] ||= []).push({ y: s[metric], x: x === "iteration" ? s.iteration : cost[x],
        successes: s.successes || 0, valid: s.valid || 0 });
    }
    for (const [policy, its] of Object.entries(byPolicy)) {
      const mean = v => { const n = v.filter(a => a !== null && a !== undefined); return n.length ? n.reduce((a, b) => a + b, 0) / n.length : null; };
      const sum = v => v.reduce((a, b) => a + b, 0);
      // success gets the pooled held-out episodes' 95 % Wilson interval (the seeds' episodes
      // together, as on the Runs page); a smoothed curve has none (a trailing mean is not a count)
      const points = Object.keys(its).map(Number).sort((a, b) => a - b).map(it => ({ iteration: it,
        x: mean(its[it].map(p => p.x)), y: mean(its[it].map(p => p.y)),
        interval: metric === "success_rate" && smooth === 1 ? wilson(sum(its[it].map(p => p.successes)), sum(its[it].map(p => p.valid))) : null }));
      const ys = trailingMean(points.map(p => p.y), smooth);
      series.push({ label: `${r.name} · ${policy}`, run: r.run, policy, points: points.map((p, i) => ({ ...p, y: ys[i] })) });
    }
  });
  const box = h("div", { class: "panel", id: "curves-plot", "data-series": series.length, "data-metric": metric, "data-x": x });
  root.append(box);
  if (series.length) {
    const xsAll = [...new Set(series.flatMap(s => s.points.map(p => p.x)).filter(v => v !== null))].sort((a, b) => a - b);
    const data = [xsAll, ...series.map(s => { const m = new Map(s.points.map(p => [p.x, p.y])); return xsAll.map(v => m.has(v) ? m.get(v) : null); })];
    // runs share a colour per policy, so one policy's runs read as one family; every series has a
    // dash and width of its own (lineStyle), so coinciding ones stay visible
    const policies = [...new Set(series.map(s => s.policy))];
    const colour = s => COLORS[policies.indexOf(s.policy) % COLORS.length];
    const bars = metric === "success_rate" && smooth === 1;
    const used = new Set();
    const styles = series.map((s, i) => {  // a (colour, dash) pair no earlier series has, while there is one
      let k = i;
      while (used.has(`${colour(s)} ${k % DASHES.length}`) && k < i + DASHES.length) k += 1;
      used.add(`${colour(s)} ${k % DASHES.length}`);
      return { stroke: colour(s), ...lineStyle(i), dash: DASHES[k % DASHES.length] };
    });
    box.dataset.styles = JSON.stringify(styles.map(t => [t.stroke, t.dash || [], t.width]));
    const opts = { width: 900, height: 340, scales: { x: { time: false }, ...(metric === "success_rate" ? { y: { range: [0, 1] } } : {}) },
      axes: [{ label: CURVE_X[x] }, { label: (smooth > 1 ? `${CURVE_METRICS[metric]} (trailing mean of ${smooth})` : CURVE_METRICS[metric])
        + (bars ? " (95 % Wilson bars)" : "") }],
      series: [{ label: CURVE_X[x] }, ...series.map((s, i) => ({ label: s.label, spanGaps: true, ...styles[i] }))], legend: { show: true },
      hooks: { draw: [u => drawIntervals(u, bars ? series : [], colour, p => p.x, box)] } };
    const plot = new uPlot(opts, data, box);
    plot.root.querySelectorAll(".u-legend .u-series").forEach((row, i) => {  // the legend shows each dash
      const marker = row.querySelector(".u-marker"), dash = i ? styles[i - 1].dash : null;
      if (marker && i) marker.style.borderStyle = !dash ? "solid" : dash[0] <= 2 ? "dotted" : "dashed";
    });
  } else box.append(h("p", { class: "muted" }, "No run shown: tick one above."));
  const its = [...new Set(series.flatMap(s => s.points.map(p => p.iteration)))].sort((a, b) => a - b);
  root.append(h("h3", {}, `${CURVE_METRICS[metric]} by iteration (the plotted values)`),
    table(["run · policy", ...its.map(String)], series.map(s => h("tr", { "data-run": s.run, "data-policy": s.policy },
      h("td", {}, s.label), its.map(it => { const p = s.points.find(q => q.iteration === it);
        return h("td", { "data-iteration": it }, p ? (p.y === null ? "n/a" : p.y.toFixed(3)) +
          (x === "iteration" || p.x === null ? "" : ` @ ${Math.round(p.x)}`) : "-"); }))),
      { id: "curves-table" }));
  return root;
}

// -- Training: per-update logs (training.jsonl) of any trainer, overlaid --------------------
const X_NAMES = { update: "update", wall_s: "wall time (s)", episodes_seen: "episodes played" };

function trailingMean(values, window) {
  // the mean of the last `window` numbers up to each point (fewer at the start); a missing value stays missing
  const out = [], seen = [];
  for (const v of values) {
    if (v === null || v === undefined) { out.push(null); continue; }
    seen.push(v);
    const last = seen.slice(-window);
    out.push(last.reduce((a, b) => a + b, 0) / last.length);
  }
  return out;
}

async function viewTraining(params) {
  const { logs } = await api("training");
  const root = h("section", { id: "view-training" }, h("h2", {}, "Training"));
  if (!logs.length) {
    root.append(h("p", { class: "muted", id: "training-empty" }, "No training logs (training.jsonl) under the paths " +
      "this viewer was given. A trainer writes them with ap_gym.trainlog.TrainingLog; benchmarks/learning.py writes one per rule."));
    return root;
  }
  const metrics = [...new Set(logs.flatMap(l => l.metrics))].filter(m => !(m in X_NAMES)).sort();
  const metric = metrics.includes(params.metric) ? params.metric : (metrics.includes("reward") ? "reward" : metrics[0]);
  const xs = Object.keys(X_NAMES).filter(x => x === "update" || logs.some(l => l.metrics.includes(x)));
  const x = xs.includes(params.x) ? params.x : "update";
  const smooth = Math.max(1, Math.floor(Number(params.smooth) || 1));
  const hidden = new Set((params.hide || "").split(",").filter(Boolean).map(Number));
  const go = change => { location.hash = href("training", Object.assign({ metric, x, smooth, hide: [...hidden].join(",") }, change)); };
  const select = (name, values, current, labels) => h("select", { "data-training": name, onchange: e => go({ [name]: e.target.value }) },
    values.map(v => h("option", { value: v, selected: String(v) === String(current) }, labels ? labels[v] : v)));
  root.append(h("div", { class: "filters" },
    h("label", {}, "metric", select("metric", metrics, metric)),
    h("label", {}, "x axis", select("x", xs, x, X_NAMES)),
    h("label", {}, "smoothing (trailing mean over updates)", select("smooth", [1, 3, 5, 10, 20], smooth)),
    h("fieldset", { class: "logs" }, h("legend", {}, "logs shown"), logs.map(l => h("label", { class: "inline" },
      h("input", { type: "checkbox", "data-log": l.id, checked: !hidden.has(l.id), onchange: e => {
        if (e.target.checked) hidden.delete(l.id); else hidden.add(l.id);
        go({ hide: [...hidden].join(",") }); } }), " " + l.name)))));
  const shown = logs.filter(l => !hidden.has(l.id) && l.rows.length);
  const box = h("div", { class: "panel", id: "training-plot", "data-metric": metric, "data-x": x, "data-series": shown.length });
  root.append(box);
  if (shown.length) {
    const lines = shown.map(l => {
      const rows = l.rows.filter(r => r[x] !== null && r[x] !== undefined);
      const ys = trailingMean(rows.map(r => r[metric] ?? null), smooth);
      return new Map(rows.map((r, i) => [r[x], ys[i]]));
    });
    const xsAll = [...new Set(lines.flatMap(m => [...m.keys()]))].sort((a, b) => a - b);
    const data = [xsAll, ...lines.map(m => xsAll.map(v => m.has(v) ? m.get(v) : null))];
    const opts = { width: 900, height: 340, scales: { x: { time: false } },
      axes: [{ label: X_NAMES[x] }, { label: smooth > 1 ? `${metric} (trailing mean of ${smooth})` : metric }],
      series: [{ label: X_NAMES[x] }, ...shown.map(l => ({ label: l.name, stroke: COLORS[l.id % COLORS.length], width: 2,
        spanGaps: true, points: { size: 4 } }))], legend: { show: true } };
    new uPlot(opts, data, box);
  } else box.append(h("p", { class: "muted" }, "No log shown: tick one above."));
  const last = l => { const v = l.rows.map(r => r[metric]).filter(v => v !== null && v !== undefined); return v.length ? v[v.length - 1] : null; };
  const mean = (l, n) => { const v = l.rows.map(r => r[metric]).filter(v => v !== null && v !== undefined).slice(-n);
    return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null; };
  root.append(h("h3", {}, `Logs (${metric}: the last update's value and the mean of the last 5, unsmoothed)`),
    table(["log", "rule", "updates", `last ${metric}`, `mean of last 5`, "lr", "path"], logs.map(l => h("tr", { "data-log": l.id },
      h("td", {}, l.name), h("td", {}, l.rule || "-"), h("td", { "data-col": "updates" }, l.rows.length),
      h("td", { "data-col": "last" }, fmt(last(l), 4)), h("td", { "data-col": "mean5" }, fmt(mean(l, 5), 4)),
      h("td", {}, fmt(l.config.lr ?? null, 6)), h("td", { class: "muted" }, l.path))), { id: "training-table" }));
  return root;
}

// -- live: a run still being written -------------------------------------------------------
let lastCount = null;
async function poll() {
  const k = currentRun();
  try {
    const st = await fresh(`run/${k}/status`);
    const badge = document.getElementById("live");
    badge.hidden = false;
    badge.classList.toggle("done", st.state === "finished");
    badge.classList.toggle("stopped", st.state === "stopped");
    badge.dataset.state = st.state;
    badge.title = st.why || "";
    badge.textContent = ({ running: "live · ", finished: "finished · ", stopped: "stopped · " }[st.state] || "") +
      `${st.episodes} episodes` + (st.live && st.last_write_s !== null ? ` · last written ${Math.round(st.last_write_s)} s ago` : "") +
      (st.state === "stopped" ? " · not finished: " + st.why : "");
    badge.dataset.episodes = st.episodes;
    if (lastCount !== null && st.episodes !== lastCount) {
      forgetRun(k);
      const view = route().parts[0];
      if (["runs", "episodes", "matrix", ""].includes(view)) await render();
    }
    lastCount = st.episodes;
  } catch (e) { /* the server may be restarting: try again next time */ }
}

// -- boot ---------------------------------------------------------------------------------
async function boot() {
  const runs = await api("runs");
  const sel = document.getElementById("run-select");
  runs.forEach(r => sel.appendChild(h("option", { value: r.run }, r.name)));
  sel.hidden = runs.length < 2;
  sel.value = String(currentRun());
  sel.addEventListener("change", () => { location.hash = "#/runs?run=" + sel.value; });
  window.addEventListener("hashchange", render);
  document.getElementById("search-form").addEventListener("submit", e => {
    e.preventDefault(); location.hash = href("search", { q: document.getElementById("search-box").value }); });
  await render();
  if (MODE === "server" && runs.length) { await poll(); setInterval(poll, Number(window.APGYM_POLL_MS || 2000)); }
}
boot().catch(e => { document.getElementById("main").replaceChildren(h("p", { class: "error" }, "Could not start: " + e.message)); });
