"use strict";
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

