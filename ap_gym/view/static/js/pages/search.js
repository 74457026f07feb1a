"use strict";
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

