"use strict";
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

