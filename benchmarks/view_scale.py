"""How fast ``ap-gym view`` opens a 100,000-episode run (target: first page under 3 s).

Writes a synthetic run (``--episodes`` lines over 20 settings: 4 policies x 5 seeds, 10
iterations of 100 training and 400 held-out episodes each, 10 steps per episode with
short prompts) and times, in Debian's Chromium through Playwright:

* **index build**: ``RunIndex`` on the run with no index (once per repetition, the cache
  removed first);
* **first page, cold**: from starting ``ap-gym view`` with no index to the settings
  table shown (index build included);
* **first page, warm**: the same with the index already built (every later open);
* **episodes page**: from the Runs page to the first page of a filtered episode list;
* **open an episode**: from the list to its timeline;
* **search index ready**: from starting ``ap-gym view`` with no search index to the
  background thread having read every episode (the first page never waits for it);
* **a search**: from submitting a query in the page to its hits shown (index ready);
* **static bundle**: ``ap-gym view --static`` of the run: files written, time to write, and
  from opening ``index.html`` from disk to the settings table, and to an episode.

Each is repeated ``--repeats`` times (median, min-max). The run is synthetic: its sizes,
not its contents, are what the viewer's speed depends on.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.protocol.results import EpisodeLine  # noqa: E402
from ap_gym.types import Episode, Step, StepTrace, Termination, Usage  # noqa: E402
from benchmarks._bench import emit, machine, spread  # noqa: E402

POLICIES = ("no_memory", "trajectory", "abstraction", "anti_persistence")


def write_run(root: Path, episodes: int) -> Path:
    run = root / "scale"
    settings = [(p, s) for p in POLICIES for s in range(5)]
    per_setting = episodes // len(settings)
    iterations = 10
    per_it = per_setting // iterations
    train = per_it // 5
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({
        "config": {"name": "scale", "description": "synthetic 100k-episode run (benchmarks/view_scale.py)",
                   "policies": [{"name": p, "label": p} for p in POLICIES]},
        "ap_gym_version": "bench", "backbone": {"identity": "synthetic"}}))
    prompt = "[system]\nYou are an agent acting in a text-based environment. " * 6
    for policy, seed in settings:
        directory = run / "shop" / policy / f"seed{seed}"
        directory.mkdir(parents=True)
        with open(directory / "episodes.jsonl", "w") as f:
            for it in range(iterations):
                for i in range(per_it):
                    phase = "train" if i < train else "eval"
                    n = 10
                    success = (hash((policy, seed, it, i)) % 10) < 3 + it // 3
                    steps = tuple(Step(f"search[item {k}]", f"Page {k}: results for item {k}. " * 3, 0.0, 0.0,
                                       trace=StepTrace(prompt + f"step {k}", f"search[item {k}]")) for k in range(n))
                    episode = Episode(
                        task_id=f"shop/{i % 400}", task_family=f"f{i % 7}", instruction=f"Buy item {i}.",
                        initial_observation="Welcome to the shop.", steps=steps, success=bool(success),
                        score=float(success), max_score=1.0,
                        termination=Termination.WON if success else Termination.STEP_LIMIT, wall_time_s=1.0,
                        usage=Usage({"acting": n}, {"acting": 900}, {"acting": 40}, 1), seed=seed,
                        training=phase == "train",
                        policy_info={"mode": "corrective" if policy == "anti_persistence" else None,
                                     "retrieved_records": []})
                    line = EpisodeLine.of(phase, it, i, "shop", policy, seed, 1, episode)
                    f.write(line.to_json() + "\n")
    return run


def open_page(browser, url: str, started: float) -> dict[str, float]:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url + "#/runs")
    page.wait_for_selector("#settings-table tbody tr", timeout=600_000)
    out = {"first page": time.perf_counter() - started}
    t = time.perf_counter()
    page.goto(url + "#/episodes?phase=eval&policy=anti_persistence&seed=3")
    page.wait_for_selector("#episodes-table tbody tr")
    out["episodes page"] = time.perf_counter() - t
    row = page.locator("#episodes-table tbody tr").nth(7)
    ident = row.get_attribute("data-episode-id")
    t = time.perf_counter()
    row.click()
    page.wait_for_selector(f"#view-episode[data-episode-id='{ident}'] .step")
    out["open an episode"] = time.perf_counter() - t
    page.close()
    return out


def search_times(browser, url: str, started: float) -> dict[str, float]:
    import httpx

    out = {}
    while True:
        status = httpx.get(url + "api/run/0/status", timeout=60).json()
        if status["search"] and status["search"]["ready"]:
            break
        time.sleep(0.5)
    out["search index ready"] = time.perf_counter() - started
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url + "#/runs")
    page.wait_for_selector("#settings-table tbody tr")
    t = time.perf_counter()
    page.fill("#search-box", "results for item 7")
    page.press("#search-box", "Enter")
    page.wait_for_selector("#search-hits li")
    out["a search (in the page)"] = time.perf_counter() - t
    page.close()
    return out


def static_times(browser, run: Path, root: Path) -> dict[str, float]:
    from ap_gym.view import write_static

    t = time.perf_counter()
    index = write_static([run], root / "bundle")
    out = {"static bundle: write": time.perf_counter() - t,
           "static bundle: files": float(sum(1 for p in (root / "bundle").rglob("*") if p.is_file()))}
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    t = time.perf_counter()
    page.goto(index.as_uri() + "#/runs")
    page.wait_for_selector("#settings-table tbody tr", timeout=600_000)
    out["static bundle: first page from disk"] = time.perf_counter() - t
    page.goto(index.as_uri() + "#/episodes?phase=eval&policy=anti_persistence&seed=3")
    page.wait_for_selector("#episodes-table tbody tr", timeout=600_000)
    row = page.locator("#episodes-table tbody tr").nth(7)
    ident = row.get_attribute("data-episode-id")
    t = time.perf_counter()
    row.click()
    page.wait_for_selector(f"#view-episode[data-episode-id='{ident}'] .step", timeout=600_000)
    out["static bundle: open an episode"] = time.perf_counter() - t
    page.close()
    shutil.rmtree(root / "bundle", ignore_errors=True)
    return out


def start_view(run: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "ap_gym.cli", "view", str(run)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if not match:
        proc.kill()
        raise SystemExit(f"ap-gym view did not start: {line}{proc.stdout.read()}")
    return proc, match.group(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chromium", default=os.environ.get("AP_GYM_CHROMIUM", "/usr/bin/chromium"))
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from ap_gym.view.index import RunIndex

    root = Path(tempfile.mkdtemp(prefix="view-scale-"))
    try:
        t = time.perf_counter()
        run = write_run(root, args.episodes)
        size = sum(p.stat().st_size for p in run.rglob("episodes.jsonl"))
        print(f"synthetic run: {args.episodes:,} episodes, {size / 2**20:.0f} MiB of JSONL, written in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        times: dict[str, list[float]] = {}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox", "--disable-gpu"])
            for r in range(args.repeats):
                shutil.rmtree(run / ".view", ignore_errors=True)
                t = time.perf_counter()
                RunIndex(run).close()
                times.setdefault("index build", []).append(time.perf_counter() - t)
                # cold and warm alternate first (ABBA over repetitions)
                for cold in ((True, False) if r % 2 == 0 else (False, True)):
                    if cold:
                        shutil.rmtree(run / ".view", ignore_errors=True)
                    started = time.perf_counter()
                    proc, url = start_view(run)
                    try:
                        got = open_page(browser, url, started)
                        if cold:  # the search index is built anew with the run index
                            got.update(search_times(browser, url, started))
                    finally:
                        proc.terminate()
                        proc.wait(timeout=60)
                    label = "cold" if cold else "warm"
                    times.setdefault(f"first page, {label} (view started, index {'built' if cold else 'reused'})",
                                     []).append(got["first page"])
                    if not cold:
                        times.setdefault("episodes page (filtered, warm)", []).append(got["episodes page"])
                        times.setdefault("open an episode (warm)", []).append(got["open an episode"])
                    else:
                        for key in ("search index ready", "a search (in the page)"):
                            times.setdefault(f"{key} (cold start)" if "ready" in key else key, []).append(got[key])
                print(f"repetition {r + 1}/{args.repeats} done", flush=True)
            for name, value in static_times(browser, run, root).items():
                times.setdefault(name, []).append(value)
            browser.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = [(name, spread(values)) for name, values in times.items()]
    lines = [f"`python benchmarks/view_scale.py --episodes {args.episodes} --repeats {args.repeats}`: a synthetic run "
             f"of {args.episodes:,} episodes ({size / 2**20:.0f} MiB of JSONL, 20 settings, 10 steps each), opened in "
             f"Chromium {chromium_version(args.chromium)} through Playwright; seconds, median (min-max) of "
             f"{args.repeats}.", "", "| what | seconds |", "|---|---|"]
    lines += [f"| {name} | {s} |" for name, s in rows]
    warm = statistics.median(times["first page, warm (view started, index reused)"])
    search = statistics.median(times["a search (in the page)"])
    files = int(times["static bundle: files"][0])
    lines += ["", f"Targets: first page under 3 s, a search under 1 s, a static bundle of at most 50 files. Warm "
              f"first page (every open after the first): **{warm:.2f} s**; the first open of a run also builds its "
              f"index (the cold line). A search: **{search:.2f} s**. Static bundle: **{files} files**."]
    emit("view_scale", "`view_scale.py`: `ap-gym view` on a 100,000-episode run", "\n".join(lines), machine())


def chromium_version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
        return out.split()[1] if out else "?"
    except (OSError, IndexError, subprocess.SubprocessError):
        return "?"


if __name__ == "__main__":
    main()
