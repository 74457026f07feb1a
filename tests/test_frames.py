"""``ap_gym.frames.episodes_df`` says what ``episodes.jsonl`` says."""

from __future__ import annotations

import json

from ap_gym.frames import episodes_df, steps_df
from ap_gym.protocol import RunConfig, run
from tests.helpers import TINY_AGENT, config


def test_episodes_df_equals_the_jsonl(tmp_path):
    policies = [{"name": "no_memory", "options": {"agent": TINY_AGENT["agent"]}},
                {"name": "anti_persistence", "options": TINY_AGENT}]
    run_dir = run(RunConfig.from_dict(config(tmp_path, policies=policies, benchmarks=["shop"], iterations=1,
                                             train_per_iter=2, heldout=2)), progress=False)
    lines = [json.loads(line) for path in sorted(run_dir.rglob("episodes.jsonl"))
             for line in path.read_text().splitlines()]
    df = episodes_df(run_dir)
    assert len(df) == len(lines)
    got = {(r.setting.split("/")[1], r.phase, r.iteration, r.index): (r.task_id, bool(r.success), r.num_steps)
           for r in df.itertuples()}
    want = {(x["head"]["policy"], x["head"]["phase"], x["head"]["iteration"], x["head"]["index"]):
            (x["head"]["task_id"], bool(x["head"]["success"]), x["head"]["num_steps"]) for x in lines}
    assert got == want
    assert set(df.policy) == {"no_memory", "anti_persistence"} and df["mode"].notna().any()
    assert df.loc[df.policy == "anti_persistence", "mode"].notna().all()
    steps = steps_df(run_dir)
    assert len(steps) == sum(len(x["steps"]) for x in lines)
    first = next(x for x in lines if x["steps"])
    row = steps[(steps.phase == first["head"]["phase"]) & (steps.iteration == first["head"]["iteration"])
                & (steps["index"] == first["head"]["index"]) & (steps.step == 0)
                & steps.setting.str.contains(first["head"]["policy"])].iloc[0]
    assert row.action == first["steps"][0]["action"]
