"use strict";
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

