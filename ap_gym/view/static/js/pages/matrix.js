"use strict";
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

