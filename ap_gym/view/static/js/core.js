// ap-gym view: one client for both modes. In server mode answers come from /api/...;
// in a static bundle from data/*.js files (script tags work from file://, fetch does not).
"use strict";
// The client both modes share, the DOM helpers, routing and what several pages use; each page is
// a classic script of its own in js/pages/ (classic, not ES modules: a bundle opens from
// file://, where browsers refuse module scripts), loaded in the order index.html gives.

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

// -- shared by the pages: statistics and plot styles -----------------------------------
function wilson(k, n, z = 1.96) {
  if (n <= 0) return null;
  const p = k / n, centre = (p + z * z / (2 * n)) / (1 + z * z / n);
  const half = z * Math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n);
  return [Math.max(0, centre - half), Math.min(1, centre + half)];
}

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

