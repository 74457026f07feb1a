"use strict";
// -- Training: per-update logs (training.jsonl) of any trainer, overlaid --------------------
const X_NAMES = { update: "update", wall_s: "wall time (s)", episodes_seen: "episodes played" };

async function viewTraining(params) {
  const { logs } = await api("training");
  const root = h("section", { id: "view-training" }, h("h2", {}, "Training"));
  if (!logs.length) {
    root.append(h("p", { class: "muted", id: "training-empty" }, "No training logs (training.jsonl) under the paths " +
      "this viewer was given. A trainer writes them with ap_gym.trainlog.TrainingLog; benchmarks/learning.py writes one per rule."));
    return root;
  }
  const metrics = [...new Set(logs.flatMap(l => l.metrics))].filter(m => !(m in X_NAMES)).sort();
  const metric = metrics.includes(params.metric) ? params.metric : (metrics.includes("reward") ? "reward" : metrics[0]);
  const xs = Object.keys(X_NAMES).filter(x => x === "update" || logs.some(l => l.metrics.includes(x)));
  const x = xs.includes(params.x) ? params.x : "update";
  const smooth = Math.max(1, Math.floor(Number(params.smooth) || 1));
  const hidden = new Set((params.hide || "").split(",").filter(Boolean).map(Number));
  const go = change => { location.hash = href("training", Object.assign({ metric, x, smooth, hide: [...hidden].join(",") }, change)); };
  const select = (name, values, current, labels) => h("select", { "data-training": name, onchange: e => go({ [name]: e.target.value }) },
    values.map(v => h("option", { value: v, selected: String(v) === String(current) }, labels ? labels[v] : v)));
  root.append(h("div", { class: "filters" },
    h("label", {}, "metric", select("metric", metrics, metric)),
    h("label", {}, "x axis", select("x", xs, x, X_NAMES)),
    h("label", {}, "smoothing (trailing mean over updates)", select("smooth", [1, 3, 5, 10, 20], smooth)),
    h("fieldset", { class: "logs" }, h("legend", {}, "logs shown"), logs.map(l => h("label", { class: "inline" },
      h("input", { type: "checkbox", "data-log": l.id, checked: !hidden.has(l.id), onchange: e => {
        if (e.target.checked) hidden.delete(l.id); else hidden.add(l.id);
        go({ hide: [...hidden].join(",") }); } }), " " + l.name)))));
  const shown = logs.filter(l => !hidden.has(l.id) && l.rows.length);
  const box = h("div", { class: "panel", id: "training-plot", "data-metric": metric, "data-x": x, "data-series": shown.length });
  root.append(box);
  if (shown.length) {
    const lines = shown.map(l => {
      const rows = l.rows.filter(r => r[x] !== null && r[x] !== undefined);
      const ys = trailingMean(rows.map(r => r[metric] ?? null), smooth);
      return new Map(rows.map((r, i) => [r[x], ys[i]]));
    });
    const xsAll = [...new Set(lines.flatMap(m => [...m.keys()]))].sort((a, b) => a - b);
    const data = [xsAll, ...lines.map(m => xsAll.map(v => m.has(v) ? m.get(v) : null))];
    const opts = { width: 900, height: 340, scales: { x: { time: false } },
      axes: [{ label: X_NAMES[x] }, { label: smooth > 1 ? `${metric} (trailing mean of ${smooth})` : metric }],
      series: [{ label: X_NAMES[x] }, ...shown.map(l => ({ label: l.name, stroke: COLORS[l.id % COLORS.length], width: 2,
        spanGaps: true, points: { size: 4 } }))], legend: { show: true } };
    new uPlot(opts, data, box);
  } else box.append(h("p", { class: "muted" }, "No log shown: tick one above."));
  const last = l => { const v = l.rows.map(r => r[metric]).filter(v => v !== null && v !== undefined); return v.length ? v[v.length - 1] : null; };
  const mean = (l, n) => { const v = l.rows.map(r => r[metric]).filter(v => v !== null && v !== undefined).slice(-n);
    return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null; };
  root.append(h("h3", {}, `Logs (${metric}: the last update's value and the mean of the last 5, unsmoothed)`),
    table(["log", "rule", "updates", `last ${metric}`, `mean of last 5`, "lr", "path"], logs.map(l => h("tr", { "data-log": l.id },
      h("td", {}, l.name), h("td", {}, l.rule || "-"), h("td", { "data-col": "updates" }, l.rows.length),
      h("td", { "data-col": "last" }, fmt(last(l), 4)), h("td", { "data-col": "mean5" }, fmt(mean(l, 5), 4)),
      h("td", {}, fmt(l.config.lr ?? null, 6)), h("td", { class: "muted" }, l.path))), { id: "training-table" }));
  return root;
}

