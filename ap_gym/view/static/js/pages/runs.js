"use strict";
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

