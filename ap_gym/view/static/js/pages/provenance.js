"use strict";
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

