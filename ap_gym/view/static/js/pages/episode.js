"use strict";
// -- One episode ------------------------------------------------------------------------
function stepView(step, n) {
  const t = step.trace || {};  // what the policy said about the step (schema 2: a step holds its trace)
  const cands = t.candidates || [];  // the best-scored candidates, recorded by the agent
  return h("div", { class: "step" + (t.parse_failure ? " parse-failure" : ""), "data-step": n },
    h("div", {}, h("span", { class: "muted" }, `step ${n} · `), h("span", { class: "action" }, step.action),
      t.parse_failure ? h("span", { class: "tag flagged" }, "parse failure") : null,
      h("span", { class: "muted" }, ` · reward ${fmt(step.reward)} · score ${fmt(step.score)}`),
      step.seconds !== undefined && step.seconds !== null ? h("span", { class: "muted", "data-seconds": step.seconds }, ` · ${fmt(step.seconds, 3)} s`) : null),
    t.reasoning ? h("div", {}, h("i", {}, "reasoning: "), t.reasoning) : null,
    h("pre", { class: "observation" }, step.observation),
    cands.length ? h("details", {}, h("summary", {}, `candidate scores (${cands.length})`),
      table(["candidate", `${t.reduction || "sum"} log-lik`], cands.map(([c, s]) => h("tr", {}, h("td", {}, c), h("td", {}, fmt(s, 3)))))) : null,
    h("details", { class: "raw" }, h("summary", {}, "prompt and raw response"),
      h("h4", {}, "prompt"), h("pre", { class: "prompt" }, t.prompt ?? "(not recorded)"),
      h("h4", {}, "response"), h("pre", { class: "response" }, t.response ?? "(not recorded)")));
}

function decisionView(ep) {
  const info = ep.line.head.policy_info || {};
  const usage = ep.line.head.usage || {};
  const box = h("aside", { class: "decision", id: "decision" }, h("h3", {}, "Memory decision"));
  const kv = [["mode", info.mode ?? "-"], ["why", info.mode_reason ?? "-"], ["neighbours' mean similarity", fmt(info.mean_similarity, 3)],
    ["synthesis calls", info.synthesis_calls ?? 0], ["synthesis skipped", info.synthesis_skipped ?? "-"],
    ["memory empty", info.memory_empty ?? "-"]];
  box.append(h("table", {}, kv.map(([a, b]) => h("tr", {}, h("th", {}, a), h("td", { "data-key": a }, String(b))))));
  if (info.utilities && Object.keys(info.utilities).length) {
    box.append(h("h4", {}, "bandit utilities"), table(["mode", "utility"],
      Object.entries(info.utilities).map(([m, u]) => h("tr", {}, h("td", {}, m), h("td", {}, typeof u === "object" ? JSON.stringify(u) : fmt(u, 3))))));
  }
  box.append(h("h4", {}, `retrieved records (${ep.retrieved.length})`));
  if (ep.retrieved.length) {
    box.append(h("ul", { id: "retrieved" }, ep.retrieved.map((r, i) => h("li", {},
      r.episode ? h("a", { href: href(`episode/${r.episode}`), "data-record": r.record, "data-source-episode": r.episode }, `record ${r.record} → episode ${r.episode}`)
        : h("span", { "data-record": r.record }, `record ${r.record} (source episode not in this run)`),
      info.similarities && info.similarities[i] !== undefined ? h("span", { class: "muted" }, ` · similarity ${fmt(info.similarities[i], 3)}`) : null))));
  }
  if (ep.abstractions.length) {
    box.append(h("h4", {}, `abstractions in the prompt (${ep.abstractions.length})`), h("ul", {}, ep.abstractions.map(a => h("li", {},
      a.flagged ? h("span", { class: "tag flagged" }, "flagged") : null,
      h("a", { href: href("provenance", { setting: ep.row.setting, abstraction: a.id }) }, `#${a.id}`), " ", a.text ?? ""))));
  }
  if (info.guidance) box.append(h("h4", {}, "guidance"), h("pre", { id: "guidance" }, info.guidance));
  const purposes = Object.keys(usage.calls || {});
  if (purposes.length) {
    box.append(h("h4", {}, "cost by purpose"), table(["purpose", "calls", "prompt tokens", "completion tokens"],
      purposes.map(p => h("tr", {}, h("td", {}, p), h("td", {}, usage.calls[p]), h("td", {}, (usage.prompt_tokens || {})[p] ?? 0),
        h("td", {}, (usage.completion_tokens || {})[p] ?? 0)))));
  }
  const shown = ["mode", "mode_reason", "mean_similarity", "synthesis_calls", "synthesis_skipped", "memory_empty", "utilities",
    "retrieved_records", "similarities", "guidance", "abstractions_in_prompt"];
  const other = Object.keys(info).filter(x => !shown.includes(x));
  // every other decision the policy recorded, with what the record's declaration says it holds
  // (ap_gym.types.Decisions and the keys designs declare: window.APGYM_DECISIONS)
  const notes = window.APGYM_DECISIONS || {};
  if (other.length) box.append(h("details", {}, h("summary", {}, "everything else the policy recorded"),
    table(["decision", "what it holds", "value"], other.map(x => h("tr", { "data-decision": x }, h("td", {}, x),
      h("td", { class: "muted" }, notes[x] ?? "(not declared)"), h("td", {}, h("pre", {}, JSON.stringify(info[x], null, 1))))))));
  return box;
}

async function viewEpisode(id) {
  const k = currentRun();
  const ep = await api(`run/${k}/episode/${id}`);
  const x = ep.line.head;
  const head = h("div", {},
    h("h2", {}, `Episode ${id}: ${x.task_id}`),
    h("p", {}, outcomeTag(ep.row.outcome), ` · score ${fmt(x.score)} / ${fmt(x.max_score)} · ${x.num_steps} steps · ${x.termination} · `,
      `${x.benchmark} · ${x.backbone || ""} ${x.policy} seed ${x.seed} · ${x.phase} iteration ${x.iteration} · LLM calls ${x.usage ? x.usage.llm_calls : "?"}`),
    x.error ? h("p", { class: "error" }, x.error) : null,
    h("p", {}, h("b", {}, "instruction: "), h("span", { id: "instruction" }, x.instruction)),
    h("p", {}, h("a", { href: href("compare", { a: id, task_id: x.task_id }) }, "compare with another episode of this task"), " · ",
      h("a", { id: "export", href: "#", onclick: e => { e.preventDefault(); exportEpisode(k, id, x); } }, "export as JSON")));
  // every other field of the head, in the record's declared order (window.APGYM_RECORD, sent
  // from ap_gym.protocol.results.record_fields): a field added to the record shows here unasked
  const shownHead = ["task_id", "score", "max_score", "num_steps", "termination", "benchmark", "backbone", "policy", "seed",
    "phase", "iteration", "usage", "error", "instruction", "initial_observation", "policy_info"];
  const rest = ((window.APGYM_RECORD || {}).head || []).filter(f => !shownHead.includes(f) && x[f] !== undefined);
  head.append(h("details", { id: "record-fields" }, h("summary", {}, "everything else the record holds"),
    table(["field", "value"], rest.map(f => h("tr", { "data-field": f }, h("td", {}, f), h("td", {}, JSON.stringify(x[f])))))));
  const steps = h("div", { id: "timeline" }, h("h3", {}, "Timeline"),
    h("details", {}, h("summary", {}, "initial observation"), h("pre", {}, x.initial_observation)),
    ep.line.steps.map((s, i) => stepView(s, i + 1)));
  return h("section", { id: "view-episode", "data-episode-id": id }, head, h("div", { class: "episode" }, steps, decisionView(ep)));
}

function exportEpisode(k, id, line) {
  if (MODE === "server") { location.href = `api/run/${k}/episode/${id}/export`; return; }
  const a = h("a", { href: URL.createObjectURL(new Blob([JSON.stringify(line, null, 1)], { type: "application/json" })),
    download: `run${k}-episode${id}.json` });
  document.body.appendChild(a); a.click(); a.remove();
}

