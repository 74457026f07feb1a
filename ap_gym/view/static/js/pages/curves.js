"use strict";
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

