"use strict";
// -- live: a run still being written -------------------------------------------------------
let lastCount = null;
async function poll() {
  const k = currentRun();
  try {
    const st = await fresh(`run/${k}/status`);
    const badge = document.getElementById("live");
    badge.hidden = false;
    badge.classList.toggle("done", st.state === "finished");
    badge.classList.toggle("stopped", st.state === "stopped");
    badge.dataset.state = st.state;
    badge.title = st.why || "";
    badge.textContent = ({ running: "live · ", finished: "finished · ", stopped: "stopped · " }[st.state] || "") +
      `${st.episodes} episodes` + (st.live && st.last_write_s !== null ? ` · last written ${Math.round(st.last_write_s)} s ago` : "") +
      (st.state === "stopped" ? " · not finished: " + st.why : "");
    badge.dataset.episodes = st.episodes;
    if (lastCount !== null && st.episodes !== lastCount) {
      forgetRun(k);
      const view = route().parts[0];
      if (["runs", "episodes", "matrix", ""].includes(view)) await render();
    }
    lastCount = st.episodes;
  } catch (e) { /* the server may be restarting: try again next time */ }
}

// -- boot ---------------------------------------------------------------------------------
async function boot() {
  const runs = await api("runs");
  const sel = document.getElementById("run-select");
  runs.forEach(r => sel.appendChild(h("option", { value: r.run }, r.name)));
  sel.hidden = runs.length < 2;
  sel.value = String(currentRun());
  sel.addEventListener("change", () => { location.hash = "#/runs?run=" + sel.value; });
  window.addEventListener("hashchange", render);
  document.getElementById("search-form").addEventListener("submit", e => {
    e.preventDefault(); location.hash = href("search", { q: document.getElementById("search-box").value }); });
  await render();
  if (MODE === "server" && runs.length) { await poll(); setInterval(poll, Number(window.APGYM_POLL_MS || 2000)); }
}
boot().catch(e => { document.getElementById("main").replaceChildren(h("p", { class: "error" }, "Could not start: " + e.message)); });
