"""The viewer in a real Chromium (Debian's /usr/bin/chromium, driven by Playwright).

Each test checks what the page shows against the run's JSONL and memory, never against
the viewer's own API. ``pytest -m browser`` runs them alone. Without Chromium they are
skipped, except where ``AP_GYM_REQUIRE_BROWSER`` is set (CI), where that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ap_gym.protocol.results import load_abstractions, load_episodes, load_record_keys

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = os.environ.get("AP_GYM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        message = f"no Chromium at {CHROMIUM}: apt-get install chromium (make browser does this), or set AP_GYM_CHROMIUM"
        if os.environ.get("AP_GYM_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(view_run):
    """``ap-gym view RUN`` as a user starts it: a free port on loopback, printed."""
    proc = subprocess.Popen([sys.executable, "-m", "ap_gym.cli", "view", str(view_run)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert match, f"ap-gym view did not print its address: {line!r}"
        yield match.group(0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _watch(page) -> list[str]:
    """The uncaught exceptions and console errors ``page`` will log (a test asserts none)."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return errors


@pytest.fixture()
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors = _watch(page)
    yield page
    context.close()
    assert not errors, f"the page logged errors: {errors}"


def _eval(run, **match):
    return [x for x in load_episodes(run) if x.header.phase == "eval" and all(getattr(x.header, k) == v for k, v in match.items())]


def test_runs_page_shows_the_settings_and_the_curves(server, page, view_run):
    page.goto(server + "#/runs")
    page.wait_for_selector("#settings-table tbody tr")
    rows = page.locator("#settings-table tbody tr")
    lines = _eval(view_run)
    settings = {(x.header.setting, x.header.iteration) for x in lines}
    assert rows.count() == len(settings)
    for i in range(rows.count()):
        row = rows.nth(i)
        key, it = row.get_attribute("data-setting"), int(row.get_attribute("data-iteration"))
        eps = [x for x in lines if x.header.setting == key and x.header.iteration == it]
        rate = sum(x.header.success for x in eps) / len(eps)
        assert row.locator("[data-col=success]").inner_text().startswith(f"{rate:.2f}".rstrip("0").rstrip(".")
                                                                          if rate in (0, 1) else f"{rate:.2f}")
    assert page.locator(".panel .uplot").count() >= 1
    # every point has its interval bar, and coinciding lines differ by dash (issue 43: 5 of 6 policies
    # at 0 % showed as one line, without bands)
    panel = page.locator(".panel[data-panel^='shop']").first
    points = {(x.header.policy, x.header.iteration) for x in lines if not x.header.infrastructure_failure}
    page.wait_for_function("document.querySelector(\".panel[data-panel^='shop']\").dataset.intervals !== undefined")
    assert panel.get_attribute("data-intervals") == str(len(points))
    styles = panel.locator(".u-legend .u-series .u-marker").evaluate_all("els => els.map(e => getComputedStyle(e).borderStyle)")
    assert len(styles) == 1 + len({p for p, _ in points}) and styles[1] == "solid" and len(set(styles[1:])) == 3
    # the statistics and audit of ap-gym report arrive after the page
    page.wait_for_selector("#report [data-table=stats]")
    notes = page.locator("#report-notes").inner_text()  # the marks the tables use are explained beside them
    assert all(f"{mark} marks" in notes for mark in "†‡§")
    # hovering a point shows its numbers; clicking it opens its episodes
    over = page.locator(".panel .u-over").first
    box = over.bounding_box()
    page.mouse.move(box["x"] + 2, box["y"] + box["height"] - 2)
    page.mouse.move(box["x"] + 3, box["y"] + box["height"] - 3)
    tip = page.locator("#tooltip")
    tip.wait_for(state="visible")
    policy, iteration = tip.get_attribute("data-policy"), tip.get_attribute("data-iteration")
    assert "success" in tip.inner_text()
    page.mouse.click(box["x"] + 3, box["y"] + box["height"] - 3)
    page.wait_for_selector("#episodes-table")
    expected = _eval(view_run, policy=policy, iteration=int(iteration))
    assert page.locator("#episode-count").inner_text().startswith(f"{len(expected)} episodes")


def test_filter_then_open_an_episode(server, page, view_run):
    page.goto(server + "#/episodes")
    page.wait_for_selector("#episodes-table")
    page.select_option("[data-filter=policy]", "anti_persistence")
    page.wait_for_function("location.hash.includes('policy=anti_persistence')")
    page.select_option("[data-filter=phase]", "eval")
    page.wait_for_function("location.hash.includes('phase=eval')")
    expected = _eval(view_run, policy="anti_persistence")
    page.wait_for_selector(f"#episode-count:has-text('{len(expected)} episodes')")
    rows = page.locator("#episodes-table tbody tr")
    assert rows.count() == len(expected)
    assert set(rows.locator("td:nth-child(4)").all_inner_texts()) == {"anti_persistence"}
    opened = rows.first.get_attribute("data-episode-id")
    rows.first.click()
    page.wait_for_selector(f"#view-episode[data-episode-id='{opened}'] #timeline")
    task = page.locator("h2").inner_text().split(": ", 1)[1]
    seed, it = (int(v) for v in re.search(r"seed (\d+) · eval iteration (\d+)", page.locator("#view-episode p").first.inner_text()).groups())
    line = next(x for x in expected if x.header.task_id == task and x.header.seed == seed and x.header.iteration == it)
    assert page.locator(".step .action").all_inner_texts() == [s.action for s in line.steps]
    assert page.locator("#instruction").inner_text() == line.header.instruction.strip()
    assert page.locator("#decision [data-key=mode]").inner_text() == str(line.header.policy_info["mode"])
    # the head's other fields come from the record's declaration (record_fields), with their values
    page.locator("#record-fields summary").click()
    cell = page.locator("#record-fields tr[data-field='task_family'] td").nth(1)
    assert json.loads(cell.inner_text()) == line.header.task_family
    assert page.locator("#record-fields tr[data-field='wall_time_s']").count() == 1
    # the exact prompt of a step, on demand
    page.locator(".step details.raw summary").first.click()
    assert page.locator(".step pre.prompt").first.inner_text().strip() == line.steps[0].trace.prompt.strip()


def test_two_filters_chosen_before_the_server_answers_both_hold(server, page, view_run):
    """A slow server: the second choice is made on the page of the first, whose answer is held.

    The episode answers are held until both choices are made, then the later one is released
    first: the page must show both filters, and the earlier answer, arriving last, must not
    overwrite it (CI hit both on a loaded machine).
    """
    page.goto(server + "#/episodes")
    page.wait_for_selector("#episodes-table")
    held, holding = [], [True]
    page.route("**/api/run/*/episodes?*", lambda route: held.append(route) if holding[0] else route.continue_())
    page.select_option("[data-filter=policy]", "anti_persistence")
    page.wait_for_function("location.hash.includes('policy=anti_persistence')")
    page.select_option("[data-filter=phase]", "eval")
    page.wait_for_function("location.hash.includes('phase=eval')")
    assert "policy=anti_persistence" in page.evaluate("location.hash"), "the second filter dropped the first"
    for _ in range(200):
        if len(held) >= 2:
            break
        page.wait_for_timeout(50)
    assert len(held) == 2, f"expected the two episode queries to be held, got {[r.request.url for r in held]}"
    holding[0] = False
    later = next(r for r in held if "phase=eval" in r.request.url)
    earlier = next(r for r in held if r is not later)
    expected = _eval(view_run, policy="anti_persistence")
    later.continue_()
    page.wait_for_selector(f"#episode-count:has-text('{len(expected)} episodes')")
    with page.expect_response(lambda r: r.url == earlier.request.url):
        earlier.continue_()
    page.wait_for_timeout(200)
    assert page.locator("#episode-count").inner_text().startswith(f"{len(expected)} episodes")
    assert set(page.locator("#episodes-table tbody tr td:nth-child(6)").all_inner_texts()) == {"eval"}


def test_follow_a_retrieved_record_to_its_source_episode(server, page, view_run):
    episodes = [x for x in load_episodes(view_run) if x.header.policy_info.get("retrieved_records")]
    assert episodes, "the tiny run retrieved no record: the fixture no longer exercises links"
    x = episodes[-1]
    page.goto(server + "#/episodes?" + "&".join(f"{k}={getattr(x.header, k)}" for k in ("policy", "seed", "phase", "iteration"))
              + f"&task_id={x.header.task_id}")
    page.wait_for_selector("#episodes-table tbody tr")
    opened = page.locator("#episodes-table tbody tr").first.get_attribute("data-episode-id")
    page.locator("#episodes-table tbody tr").first.click()
    page.wait_for_selector(f"#view-episode[data-episode-id='{opened}']")
    link = page.locator("#retrieved a").first
    link.wait_for()
    record = int(link.get_attribute("data-record"))
    assert record == x.header.policy_info["retrieved_records"][0]
    task, iteration = {rid: (t, it) for rid, t, it in load_record_keys(view_run / x.header.setting)}[record]
    source = link.get_attribute("data-source-episode")
    link.click()
    page.wait_for_selector(f"#view-episode[data-episode-id='{source}'] #timeline")
    assert page.locator("h2").inner_text().endswith(task)
    assert f"train iteration {iteration}" in page.locator("#view-episode p").first.inner_text()


def test_compare_two_policies_on_a_held_out_task(server, page, view_run):
    task = _eval(view_run)[0].header.task_id
    a = _eval(view_run, task_id=task, policy="no_memory", seed=0)[-1]
    b = _eval(view_run, task_id=task, policy="anti_persistence", seed=0)[-1]
    page.goto(server + "#/compare")
    page.wait_for_selector("[data-compare=task]")
    page.select_option("[data-compare=task]", task)
    page.wait_for_selector("[data-compare=a]")
    ids = {}
    for side, x in (("a", a), ("b", b)):
        option = page.locator(f"[data-compare={side}] option", has_text=f"{x.header.policy} · seed 0 · eval it {x.header.iteration}")
        value = option.first.get_attribute("value")
        page.select_option(f"[data-compare={side}]", value)
        page.wait_for_selector(f"#compare-table[data-{side}='{value}']")
        ids[side] = value
    page.wait_for_selector(f"#compare-table[data-a='{ids['a']}'][data-b='{ids['b']}'] tr[data-step]")
    rows = page.locator("#compare-table tr[data-step]")
    assert rows.count() == max(len(a.steps), len(b.steps))
    first = rows.first.locator("td")
    assert first.nth(1).locator(".action").inner_text() == a.steps[0].action
    assert first.nth(2).locator(".action").inner_text() == b.steps[0].action


def test_the_provenance_graph_shows_every_stored_abstraction(server, page, view_run):
    stored = load_abstractions(view_run / "shop" / "abstraction" / "seed0")
    assert stored
    page.goto(server + "#/provenance")
    page.select_option("[data-provenance=setting]", "shop/abstraction/seed0")
    page.wait_for_function("location.hash.includes('setting=shop')")
    page.wait_for_selector("#provenance-graph")
    nodes = page.locator("#provenance-graph [data-abstraction]")
    assert nodes.count() == len(stored)
    assert page.locator("#audit-row td").first.inner_text() == str(len(stored))
    nodes.nth(0).click()
    page.wait_for_selector("#abstraction-detail")
    assert page.locator("#abstraction-detail pre").inner_text().strip() == stored[0].text.strip()
    sources = page.locator("#abstraction-detail [data-source-episode]")
    assert sources.count() == len(stored[0].sources)


def test_the_static_bundle_opens_from_disk(browser, view_run, tmp_path):
    from ap_gym.view import write_static

    index = write_static([view_run], tmp_path / "bundle")
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(index.as_uri() + "#/episodes?phase=eval&policy=abstraction")
    expected = _eval(view_run, policy="abstraction")
    page.wait_for_selector(f"#episode-count:has-text('{len(expected)} episodes')")
    page.locator("#episodes-table tbody tr").first.click()
    page.wait_for_selector("#timeline .step")
    page.goto(index.as_uri() + "#/provenance")
    page.wait_for_selector("#provenance-graph")
    # a one-run bundle's Diff compares the run with itself (A = B): both sides load one key at once,
    # which once left the page on "loading..." for ever (issue 43)
    page.goto(index.as_uri() + "#/diff")
    page.wait_for_selector("#diff-summary:has-text('0 key(s) differ')", timeout=15_000)
    for view in ("runs", "compare", "matrix", "curves", "training", "lineage"):  # every page of the bundle
        page.goto(index.as_uri() + f"#/{view}")
        page.wait_for_selector(f"nav a.active[data-nav='{view}']")
        page.wait_for_function("document.getElementById('status').textContent === ''", timeout=15_000)
        assert not page.locator("#main p.error").count(), (view, page.locator("#main").inner_text()[:300])
    context.close()
    assert not errors


def _word_count(run, word):
    """The documents (instruction, guidance, each step's action and observation, as the
    server's search index cuts them) that hold ``word`` as a word, counted from the files."""
    import re as _re

    from ap_gym.view.search import MAX_CHARS

    n = 0
    for x in load_episodes(run):
        texts = [x.header.instruction[:MAX_CHARS]]
        guidance = x.header.policy_info.get("guidance")
        if isinstance(guidance, str) and guidance:
            texts.append(guidance[:MAX_CHARS])
        texts += [f"{st.action}\n{st.observation[:MAX_CHARS]}" for st in x.steps]
        n += sum(word in {w.lower() for w in _re.findall(r"\w+", t)} for t in texts if t.strip())
    return n


def test_the_bundle_searches_in_the_page_and_agrees_with_the_server(browser, server, view_run, tmp_path):
    """The bundle's search (MiniSearch in the page) finds what the server's (SQLite FTS5)
    finds: the same count, which is the files' own, and hits that open their step."""
    import time as _time
    import urllib.request

    from ap_gym.view import write_static

    word = next(w.lower() for x in load_episodes(view_run) for st in x.steps for w in st.action.replace("[", " ").split()
                if w.isalpha() and len(w) > 3)
    expected = _word_count(view_run, word)
    for _ in range(120):  # the server builds its search index in the background
        answer = json.loads(urllib.request.urlopen(server + f"api/run/0/search?q={word}&limit=5").read())
        if answer["status"]["ready"]:
            break
        _time.sleep(0.5)
    assert answer["total"] == expected > 0
    index = write_static([view_run], tmp_path / "bundle")
    context = browser.new_context()
    page = context.new_page()
    errors = _watch(page)
    page.goto(index.as_uri() + f"#/search?q={word}")
    page.wait_for_selector("#search-status")
    status = page.locator("#search-status").inner_text()
    assert (f"of {expected} hit(s)" in status) if expected > 100 else (status == f"{expected} hit(s)"), status
    page.locator("#search-hits li a").first.click()
    page.wait_for_selector("#timeline .step")
    context.close()
    assert not errors, errors


def _start_view(*runs):
    proc = subprocess.Popen([sys.executable, "-m", "ap_gym.cli", "view", *map(str, runs)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:\d+/", line)
    assert match, f"ap-gym view did not print its address: {line!r}"
    return proc, match.group(0)


def test_a_run_being_written_shows_new_episodes_without_a_restart(browser, view_run, tmp_path):
    run = tmp_path / "live"
    shutil.copytree(view_run, run, ignore=shutil.ignore_patterns(".view"))
    from ap_gym.protocol.loop import mark_running

    (run / "summary.json").unlink(missing_ok=True)  # still running: this process writes it
    marker = mark_running(run)
    episodes = sorted(run.rglob("episodes.jsonl"))[0]
    lines = episodes.read_text().splitlines(keepends=True)
    episodes.write_text("".join(lines[:-1]))
    total = len(load_episodes(run))
    proc, url = _start_view(run)
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(url + "#/episodes")
        page.wait_for_selector(f"#episode-count:has-text('{total} episodes')")
        page.wait_for_selector("#live:has-text('live')")
        with episodes.open("a") as f:  # the run writes its next episode
            f.write(lines[-1])
        page.wait_for_selector(f"#episode-count:has-text('{total + 1} episodes')", timeout=30_000)
        assert page.locator("#live").get_attribute("data-episodes") == str(total + 1)
        marker.unlink()  # the writer stops without a summary (killed): no longer "live" (issue 43)
        page.wait_for_selector("#live[data-state='stopped']:has-text('run the same command again')", timeout=30_000)
    finally:
        context.close()
        proc.terminate()
        proc.wait(timeout=30)


def test_search_finds_an_action_and_links_to_its_step(server, page, view_run):
    line = next(x for x in load_episodes(view_run) if x.steps and any(w.isalpha() and len(w) > 3
                                                                        for w in x.steps[0].action.split()))
    word = next(w for w in line.steps[0].action.split() if w.isalpha() and len(w) > 3)
    page.goto(server + "#/runs")
    page.wait_for_selector("#settings-table")
    page.fill("#search-box", word)
    page.press("#search-box", "Enter")
    page.wait_for_function("document.querySelectorAll('#search-hits li').length > 0", timeout=60_000)
    hit = page.locator("#search-hits li").first
    assert word.lower() in hit.inner_text().lower()
    step = int(hit.get_attribute("data-step"))
    hit.locator("a").click()
    page.wait_for_selector("#timeline .step")
    if step >= 0:  # a step's hit opens the episode at that step
        page.wait_for_selector(f".step.target[data-step='{step + 1}']")


def test_sorting_the_episodes_by_steps(server, page, view_run):
    page.goto(server + "#/episodes?phase=eval")
    page.wait_for_selector("#episodes-table tbody tr")
    page.click("#episodes-table th[data-sort='num_steps']")
    page.wait_for_selector("#episodes-table th.sorted-asc[data-sort='num_steps']")
    page.click("#episodes-table th[data-sort='num_steps']")
    page.wait_for_selector("#episodes-table th.sorted-desc[data-sort='num_steps']")
    shown = [int(r) for r in page.locator("#episodes-table tbody tr td:nth-child(12)").all_inner_texts()]
    expected = sorted((x.header.num_steps for x in _eval(view_run)), reverse=True)[: len(shown)]
    assert shown == expected
    page.goto(server + "#/runs")
    page.wait_for_selector("#settings-table")
    page.click("#settings-table th[data-sort='policy']")
    policies = page.locator("#settings-table tbody tr td:nth-child(3)").all_inner_texts()
    assert policies == sorted(policies)
    page.fill("#settings-filter", "abstraction")
    assert set(page.locator("#settings-table tbody tr td:nth-child(3)").all_inner_texts()) == {"abstraction"}


def test_the_task_policy_matrix_matches_the_episodes(server, page, view_run):
    page.goto(server + "#/matrix")
    page.wait_for_selector("#matrix-table")
    lines = [x for x in _eval(view_run) if x.header.termination != "infrastructure_failure"]
    last = max(x.header.iteration for x in lines)
    for row in page.locator("#matrix-table tbody tr[data-task]").all()[:5]:
        task = row.get_attribute("data-task")
        for cell in row.locator("td[data-column]").all():
            policy = cell.get_attribute("data-column")
            mine = [x for x in lines if x.header.task_id == task and x.header.policy == policy and x.header.iteration == last]
            assert cell.inner_text() == f"{sum(x.header.success for x in mine)}/{len(mine)}"
    page.locator("#matrix-table td[data-column]").first.click()
    page.wait_for_selector("#compare-table")


def test_the_config_diff_of_two_runs(browser, view_run, tmp_path):
    import json as _json

    other = tmp_path / "other"
    shutil.copytree(view_run, other, ignore=shutil.ignore_patterns(".view"))
    meta = _json.loads((other / "config.json").read_text())
    meta["config"]["heldout"] = 77
    (other / "config.json").write_text(_json.dumps(meta))
    proc, url = _start_view(view_run, other)
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(url + "#/diff?a=0&b=1")
        page.wait_for_selector("#diff-table tr[data-key='heldout']")
        row = page.locator("#diff-table tr[data-key='heldout']")
        assert "77" in row.locator("td.diff-b").inner_text()
        assert "1 key(s) differ" in page.locator("#diff-summary").inner_text()
    finally:
        context.close()
        proc.terminate()
        proc.wait(timeout=30)


def _training_logs(root):
    """Two rules' logs as a trainer writes them (different lengths and losses), in a
    directory that is not a run."""
    from ap_gym.trainlog import TrainingLog

    for rule, n, slope in (("grpo", 12, 0.05), ("rebn", 9, -0.03)):
        log = TrainingLog(root / rule / "training.jsonl", run=f"learning/{rule}", rule=rule, config={"lr": 2e-5})
        for u in range(1, n + 1):
            log.write(update=u, reward=min(1.0, slope * u + 0.1 * (u % 3)), loss=round(0.5 - slope * u, 6),
                      episodes=8, wall_s=30.0 * u + (5 if rule == "rebn" else 0))
    return root


def test_training_curves_of_two_rules_overlay_beside_a_run(browser, view_run, tmp_path):
    """A learning benchmark's logs (a directory that is not a run) beside a run: the Training
    page overlays both rules' curves, its table's last values are the files' own, and a
    log unticked leaves the plot; the choices live in the URL."""
    from ap_gym.trainlog import TrainingLog

    logs = _training_logs(tmp_path / "learning")
    proc, url = _start_view(view_run, logs)
    context = browser.new_context()
    page = context.new_page()
    errors = _watch(page)
    try:
        page.goto(url + "#/training?metric=loss")
        page.wait_for_selector("#training-plot[data-series='2'] .u-over")
        for rule in ("grpo", "rebn"):
            rows = TrainingLog.read(logs / rule / "training.jsonl")
            row = page.locator("#training-table tr", has_text=f"learning/{rule}")
            assert row.locator("td[data-col='updates']").inner_text() == str(len(rows))
            assert row.locator("td[data-col='last']").inner_text() == f"{rows[-1]['loss']:.4f}"
            five = [r["loss"] for r in rows[-5:]]
            assert row.locator("td[data-col='mean5']").inner_text() == f"{sum(five) / 5:.4f}"
        assert page.locator("#training-plot .u-legend .u-series").count() == 3  # x and two rules
        page.select_option("select[data-training='x']", "episodes_seen")
        page.wait_for_selector("#training-plot[data-x='episodes_seen']")
        page.locator("input[data-log='1']").uncheck()
        page.wait_for_selector("#training-plot[data-series='1']")
        assert "hide=1" in page.url and "x=episodes_seen" in page.url and "metric=loss" in page.url
        page.goto(url + "#/runs")  # the run is still there
        page.wait_for_selector("#settings-table")
    finally:
        context.close()
        proc.terminate()
        proc.wait(timeout=30)
    assert not errors, errors


def test_a_bundle_of_training_logs_alone_opens_on_its_training_page(browser, tmp_path):
    from ap_gym.view import write_static

    index = write_static([_training_logs(tmp_path / "learning")], tmp_path / "bundle")
    context = browser.new_context()
    page = context.new_page()
    errors = _watch(page)
    page.goto(index.as_uri())
    page.wait_for_selector("#training-plot[data-series='2'][data-metric='reward'] .u-over")
    page.select_option("select[data-training='smooth']", "5")
    page.wait_for_selector("#training-plot[data-series='2'] .u-over")
    assert "smooth=5" in page.url
    context.close()
    assert not errors, errors


def test_two_runs_success_curves_overlay_and_the_values_are_the_files(browser, view_run, tmp_path):
    """Curves: two runs' held-out success per policy on one plot (issue 43), each point the
    mean over seeds of the seed's success rate computed here from the JSONL, and on the cost
    axis the training LLM calls the seeds had spent by then."""
    import statistics

    other = tmp_path / "other"
    shutil.copytree(view_run, other, ignore=shutil.ignore_patterns(".view"))
    proc, url = _start_view(view_run, other)
    context = browser.new_context()
    page = context.new_page()
    errors = _watch(page)
    episodes = [x.header for x in load_episodes(view_run)]
    policies = sorted({h.policy for h in episodes})
    last = max(h.iteration for h in episodes if h.phase == "eval")
    try:
        page.goto(url + "#/curves")
        page.wait_for_selector(f"#curves-plot[data-series='{2 * len(policies)}'] .u-over")
        # the second run is a copy, so each policy's two lines coincide, and policies at one rate
        # coincide too (issue 50; one colour per policy and a dash per run hid 3 of 6 lines): every
        # series has a dash of its own, later ones thinner on top, and every point its interval bar
        styles = json.loads(page.locator("#curves-plot").get_attribute("data-styles"))
        assert len(styles) == 2 * len(policies)
        assert len({tuple(dash) for _, dash, _ in styles}) == len(styles)
        assert [w for _, _, w in styles] == sorted((w for _, _, w in styles), reverse=True)
        points = {(h.policy, h.iteration) for h in episodes if h.phase == "eval" and not h.infrastructure_failure}
        page.wait_for_function("document.querySelector('#curves-plot').dataset.intervals !== undefined")
        assert page.locator("#curves-plot").get_attribute("data-intervals") == str(2 * len(points))
        for policy in policies:
            rates = []
            for seed in sorted({h.seed for h in episodes}):
                ev = [h for h in episodes if h.phase == "eval" and h.policy == policy and h.seed == seed
                      and h.iteration == last and not h.infrastructure_failure]
                rates.append(sum(h.success for h in ev) / len(ev))
            for run in (0, 1):
                cell = page.locator(f"#curves-table tr[data-run='{run}'][data-policy='{policy}'] td[data-iteration='{last}']")
                assert cell.inner_text() == f"{statistics.fmean(rates):.3f}", (policy, run)
        page.select_option("select[data-curves='x']", "train_llm_calls")
        page.wait_for_selector("#curves-plot[data-x='train_llm_calls'] .u-over")
        policy = "anti_persistence"
        spent = statistics.fmean(sum(h.usage.llm_calls for h in episodes if h.phase == "train" and h.policy == policy
                                     and h.seed == seed and h.iteration <= last) for seed in {h.seed for h in episodes})
        cell = page.locator(f"#curves-table tr[data-run='1'][data-policy='{policy}'] td[data-iteration='{last}']")
        assert cell.inner_text().endswith(f"@ {round(spent)}")
        page.select_option("select[data-curves='x']", "train_wall_s")
        page.wait_for_selector("#curves-plot[data-x='train_wall_s'] .u-over")
        seconds = statistics.fmean(sum(h.wall_time_s for h in episodes if h.phase == "train" and h.policy == policy
                                       and h.seed == seed and h.iteration <= last) for seed in {h.seed for h in episodes})
        assert abs(int(cell.inner_text().rsplit("@ ", 1)[1]) - seconds) <= 1  # rounded sums of rounded sums
        page.locator("input[data-run='1']").uncheck()
        page.wait_for_selector(f"#curves-plot[data-series='{len(policies)}']")
        assert "hide=1" in page.url
    finally:
        context.close()
        proc.terminate()
        proc.wait(timeout=30)
    assert not errors, errors


def _build_and_group(page, base, view_run):
    """Build "steps >= 2" in the page, filter to held-out episodes, group by policy: the count
    and each group's episodes and successes are the files' own."""
    heads = [x.header for x in load_episodes(view_run)]
    chosen = [h for h in heads if h.phase == "eval" and h.num_steps >= 2]
    page.goto(base + "#/episodes?phase=eval")
    page.wait_for_selector("#episode-count")
    page.select_option("#cond-column", "num_steps")
    page.select_option("#cond-op", "ge")
    page.fill("#cond-value", "2")
    page.click("#add-condition")
    page.wait_for_selector(f"#episode-count:has-text('{len(chosen)} episodes')")
    page.click("#group-by summary")
    page.locator("input[data-group-by='policy']").check()
    page.wait_for_selector("#groups-table tbody tr")
    for policy in sorted({h.policy for h in chosen}):
        mine = [h for h in chosen if h.policy == policy]
        row = page.locator(f"#groups-table tr[data-group='{json.dumps([policy])}']")
        assert row.locator("td[data-col='episodes']").inner_text() == str(len(mine))
        assert row.locator("td[data-col='successes']").inner_text() == str(sum(h.success and not h.infrastructure_failure
                                                                              for h in mine))
    assert "where=" in page.url and "group=policy" in page.url and "phase=eval" in page.url
    page.click("#column-picker summary")  # a column picked: shown in the table, kept in the URL
    page.locator("input[data-col-toggle='tokens']").check()
    page.wait_for_selector("#episodes-table td[data-col='tokens']")
    assert "cols=" in page.url and page.locator("#groups-table tbody tr").count() == len({h.policy for h in chosen})


def test_a_filter_built_in_the_page_and_a_group_by_give_the_files_counts(server, page, view_run, browser, tmp_path):
    _build_and_group(page, server, view_run)
    from ap_gym.view import write_static  # the bundle computes the same in the page

    index = write_static([view_run], tmp_path / "bundle")
    context = browser.new_context()
    other = context.new_page()
    errors = _watch(other)
    _build_and_group(other, index.as_uri(), view_run)
    context.close()
    assert not errors, errors


def _plant_lineage(view_run, tmp_path):
    """A copy of the run whose abstraction memory holds a planted chain: the earliest stored
    abstraction made ungrammatical (so flagged), a child written from it an iteration later
    and a grandchild two later; the setting's last held-out episode saw both descendants."""
    import sqlite3

    run = tmp_path / "planted"
    shutil.copytree(view_run, run, ignore=shutil.ignore_patterns(".view"))
    setting = run / "shop" / "abstraction" / "seed0"
    conn = sqlite3.connect(setting / "memory.sqlite")
    with conn:
        root, iteration, kind, embedding = conn.execute(
            "SELECT id, iteration, kind, embedding FROM abstractions ORDER BY iteration, id LIMIT 1").fetchone()
        conn.execute("UPDATE abstractions SET text=? WHERE id=?", ('Always type "levitate[basket]" first.', root))
        top = conn.execute("SELECT MAX(id) FROM abstractions").fetchone()[0]
        child, grandchild = top + 1, top + 2
        for new, parent, later in ((child, root, 1), (grandchild, child, 2)):
            conn.execute("INSERT INTO abstractions (id, text, kind, embedding, iteration) VALUES (?,?,?,?,?)",
                         (new, f"Planted descendant {new}: click the first result.", kind, embedding, iteration + later))
            conn.execute("INSERT INTO abstraction_parents VALUES (?, ?)", (new, parent))
    conn.close()
    path = setting / "episodes.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    last = max(i for i, x in enumerate(lines) if x["head"]["phase"] == "eval")
    info = lines[last]["head"].setdefault("policy_info", {})
    info["abstractions_in_prompt"] = [*info.get("abstractions_in_prompt", []), child, grandchild]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run, root, child, grandchild


def test_the_lineage_of_a_planted_flagged_abstraction_shows_every_descendant_and_its_episodes(browser, view_run, tmp_path):
    run, root, child, grandchild = _plant_lineage(view_run, tmp_path)
    lines = [x for x in load_episodes(run) if x.header.setting.startswith("shop/abstraction/seed0")]
    proc, url = _start_view(run)
    context = browser.new_context()
    page = context.new_page()
    errors = _watch(page)
    try:
        page.goto(url + f"#/lineage?setting=shop/abstraction/seed0&abstraction={root}")
        page.wait_for_selector("#lineage-graph")
        assert page.locator(f"#lineage-graph g[data-abstraction='{root}']").get_attribute("data-flagged") == "true"
        descendants = {int(x) for x in page.locator("#lineage-graph g[data-relation='descendant']").evaluate_all(
            "els => els.map(e => e.dataset.abstraction)")}
        stored = load_abstractions(run / "shop" / "abstraction" / "seed0")  # the memory's own parent links
        expected, todo = set(), [root]
        while todo:
            below = {a.id for a in stored if todo[0] in a.parents}
            todo = todo[1:] + sorted(below - expected)
            expected |= below
        assert {child, grandchild} <= expected and descendants == expected
        assert page.locator(f"path[data-edge='{root}-{child}']").count() == 1
        assert page.locator(f"path[data-edge='{child}-{grandchild}']").count() == 1
        for a in (root, child, grandchild):  # the episodes each guided, as the files say
            saw = [x for x in lines if a in x.header.policy_info.get("abstractions_in_prompt", [])]
            cell = page.locator(f"#lineage-table tr[data-abstraction='{a}'] td[data-col='seen'] span[data-count]")
            assert cell.get_attribute("data-count") == str(len(saw)), a
        assert "not run" in page.locator("#audit-estimates tr[data-estimate='randomised_gap']").inner_text()
        page.goto(url + f"#/lineage?setting=shop/abstraction/seed0&abstraction={grandchild}")
        page.wait_for_selector(f"#lineage-graph g[data-abstraction='{grandchild}'].selected")
        ancestors = {int(x) for x in page.locator("#lineage-graph g[data-relation='ancestor']").evaluate_all(
            "els => els.map(e => e.dataset.abstraction)")}
        assert {root, child} <= ancestors  # (the root's own ancestors too, if the run gave it any)
    finally:
        context.close()
        proc.terminate()
        proc.wait(timeout=30)
    assert not errors, errors
