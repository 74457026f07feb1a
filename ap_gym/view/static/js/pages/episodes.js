"use strict";
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

