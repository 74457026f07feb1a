"""ALFWorld (Shridhar et al., 2021) as ``ap_gym/ALFWorld-v0``, offline.

Without the official data (a download), the suite is generated from what the
``alfworld`` package ships (:mod:`ap_gym.envs.alfworld_gen`): 180 training and 134
held-out games over the six task types, balanced as in ALFWorld's ``valid_unseen``
(pick 24, clean 31, heat 23, cool 21, look 18, pick two 17 held-out; the same
proportions for training). Held-out games use scenes that training games never use (3
of each room type, fixed by a seed), as ``valid_unseen`` does. Games are generated on
first use (1-20 s each, planner-checked) and cached; ``ap-gym games alfworld`` makes
them all ahead of time with a progress bar.

With the official data (``ALFWORLD_DATA`` pointing at a folder holding
``json_2.1.1/train`` and ``json_2.1.1/valid_unseen`` with their ``game.tw-pddl`` files)
the same env serves the official games: 180 training games sampled with a fixed seed
from ``train``, and the 134 of ``valid_unseen``.

Contract: the instruction is ALFWorld's "Your task is to: ..."; admissible commands are
on; ``task_family`` is the task type; success is ALFWorld's ``won`` (there is no loss:
only the 50-step limit ends a failing episode). The engine speaks ``move X to Y``;
``gym.make`` adds :class:`~ap_gym.wrappers.PutToMove` (registered as an additional
wrapper), which accepts the old ``put X in/on Y`` and rewrites it.
The engine runs in a process of its own (:mod:`ap_gym.envs.engine_process`), replaced every
``recycle_every`` resets: it leaks native memory that only the end of its process frees.
Reset option ``walkthrough=True`` gives the expert plan (the planner's) in
``info["walkthrough"]``, so :class:`~ap_gym.policies.WalkthroughPolicy` is the expert.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Literal

from ap_gym.envs.alfworld_gen import (
    TASK_TYPES,
    AlfGameSpec,
    ensure_alfworld_game,
    game_cached,
    generate_alfworld_game,
    held_out_goals,
    scenes,
)
from ap_gym.envs.base import SPLITS, StartResult, StepResult, TextEnv
from ap_gym.envs.engine_process import EngineProcess
from ap_gym.envs.isolated import prepare
from ap_gym.errors import APGymError, EnvInfrastructureError
from ap_gym.text import Grammar
from ap_gym.types import WorldFacts

__all__ = ["HELDOUT_COUNTS", "HELDOUT_SEED_BASE", "TRAIN_COUNTS", "ALFWorldEnv", "alfworld_suite"]

HELDOUT_COUNTS = {"pick_and_place_simple": 24, "pick_clean_then_place_in_recep": 31,
                  "pick_heat_then_place_in_recep": 23, "pick_cool_then_place_in_recep": 21,
                  "look_at_obj_in_light": 18, "pick_two_obj_and_place": 17}
TRAIN_COUNTS = {"pick_and_place_simple": 32, "pick_clean_then_place_in_recep": 42,
                "pick_heat_then_place_in_recep": 31, "pick_cool_then_place_in_recep": 28,
                "look_at_obj_in_light": 24, "pick_two_obj_and_place": 23}
SPLIT_SEED = 2021
ROOMS = {"kitchen": range(1, 31), "livingroom": range(201, 231), "bedroom": range(301, 331), "bathroom": range(401, 431)}


def _hosts(task_type: str, scene: dict[str, Any]) -> bool:
    rtypes = {t for t, _ in scene["receptacles"]}
    need = {"pick_clean_then_place_in_recep": "SinkBasin", "pick_heat_then_place_in_recep": "Microwave",
            "pick_cool_then_place_in_recep": "Fridge"}.get(task_type)
    if need and need not in rtypes:
        return False
    if task_type == "look_at_obj_in_light":
        return any(o in ("DeskLamp", "FloorLamp") for o in scene["objects"])
    return True


#: The held-out games' seeds start here (10_000 before their goals were fixed: a cache of
#: those games is never mistaken for these).
HELDOUT_SEED_BASE = 30_000


@cache
def alfworld_suite(seed: int = SPLIT_SEED) -> dict[str, list[AlfGameSpec]]:
    """The generated suite: held-out games on unseen scenes, training games on the rest.

    Held-out games never share a scene and a goal (task type, object and receptacle or
    lamp): each scene's goals are dealt out without repeats, so a held-out success rate
    counts distinct tasks, not one task and its twins that differ only by where objects
    lie. Training games draw their goals from their seeds (duplicates there are more data).
    """
    rng = random.Random(seed)
    available = scenes()
    unseen = {s for room in ROOMS.values() for s in rng.sample([s for s in room if s in available], 3)}
    suite: dict[str, list[AlfGameSpec]] = {"train": [], "test": []}
    for split, counts in (("test", HELDOUT_COUNTS), ("train", TRAIN_COUNTS)):
        pool = sorted(s for s in available if (s in unseen) == (split == "test"))
        for task_type in TASK_TYPES:
            hosts = [s for s in pool if _hosts(task_type, available[s])]
            rng.shuffle(hosts)
            if split == "train":
                suite[split] += [AlfGameSpec(task_type, hosts[i % len(hosts)], 20_000 + i)
                                 for i in range(counts[task_type])]
                continue
            goals = {s: held_out_goals(task_type, available[s]) for s in hosts}
            for s in hosts:
                random.Random(f"{seed}|{task_type}|{s}").shuffle(goals[s])
            made, turn = 0, 0
            while made < counts[task_type]:
                scene = hosts[turn % len(hosts)]
                turn += 1
                if goals[scene]:
                    suite[split].append(AlfGameSpec(task_type, scene, HELDOUT_SEED_BASE + made, goals[scene].pop()))
                    made += 1
                elif not any(goals.values()):
                    raise RuntimeError(f"the unseen scenes offer only {made} distinct {task_type} goals; "
                                       f"{counts[task_type]} were asked for")
    return suite


def _official(data: Path, seed: int) -> dict[str, dict[str, Path]] | None:
    root = data / "json_2.1.1"
    if not (root / "train").is_dir() or not (root / "valid_unseen").is_dir():
        return None

    def games(split: str) -> dict[str, Path]:
        found = sorted(root.joinpath(split).glob("*/*/game.tw-pddl"))
        return {f"{p.parent.parent.name}/{p.parent.name}": p for p in found}

    train = games("train")
    keys = sorted(train)
    random.Random(seed).shuffle(keys)
    return {"train": {k: train[k] for k in sorted(keys[:180])}, "test": games("valid_unseen")}


class ALFWorldEnv(TextEnv):
    """ALFWorld behind the ap-gym text contract; see the module docstring.

    Args:
        split: ``"train"`` (180 games) or ``"test"`` (134 held-out games).
        data: the official data folder; default ``$ALFWORLD_DATA`` when it holds
            ``json_2.1.1``, else the generated suite.
        split_seed: fixes the unseen scenes (generated) or the training sample (official).
        engine_timeout_s: the longest one engine call may take before its process is killed;
            loading a game gets three times that, and starting the engine process its own
            budget (:class:`~ap_gym.envs.engine_process.EngineProcess`).
        recycle_every: start a new engine process after this many resets. The engine
            leaks native memory (~1.4 MB per reset, in fast-downward) that only the end of
            its process returns; 0 never recycles.
    """

    benchmark = "alfworld"
    grammar = Grammar.of({"go", "take", "put", "move", "open", "close", "toggle", "heat", "cool", "clean", "slice",
                          "use", "look", "inventory", "examine"}, numbered_objects=True)
    #: the engine's one reply to a command it will not carry out
    refused = re.compile(r"^\s*Nothing happens\.\s*$")

    def __init__(self, *, split: str = "train", data: str | Path | None = None, split_seed: int = SPLIT_SEED,
                 games: Literal["auto", "official", "generated"] = "auto", admissible_commands: bool = True,
                 render_mode: str | None = None, engine_timeout_s: float = 120.0, recycle_every: int = 50) -> None:
        super().__init__(split=split, admissible_commands=admissible_commands, render_mode=render_mode)
        if recycle_every < 0 or engine_timeout_s <= 0:
            raise ValueError("recycle_every must be >= 0 and engine_timeout_s > 0")
        if games not in ("auto", "official", "generated"):
            raise ValueError(f"games must be 'auto', 'official' or 'generated', not {games!r}")
        self._engine = EngineProcess(_Engine, name="ALFWorld", timeout_s=engine_timeout_s,
                                     recycle_every=recycle_every)
        data = data or os.environ.get("ALFWORLD_DATA")
        self._official = _official(Path(data), split_seed) if data and games != "generated" else None
        if games == "official" and self._official is None:
            raise APGymError(
                f"ALFWorld's official games were asked for (games: official) but {data or '$ALFWORLD_DATA (unset)'} "
                "holds no json_2.1.1/train and valid_unseen: download them (alfworld-download) and set "
                "ALFWORLD_DATA, or choose the generated games explicitly (env_options: {alfworld: {games: generated}})")
        if self._official is not None:
            self._ids = {s: list(self._official[s]) for s in SPLITS}
            self._specs: dict[str, AlfGameSpec] = {}
        else:
            suite = alfworld_suite(split_seed)
            self._specs = {g.task_id: g for s in SPLITS for g in suite[s]}
            self._ids = {s: [g.task_id for g in suite[s]] for s in SPLITS}
            self.stand_in = ("ALFWorld games generated offline from the alfworld package's domain and scenes "
                             "(not the official game files; set ALFWORLD_DATA for those)")

    def _task_ids(self, split: str) -> list[str]:
        return self._ids[split]

    def has_task(self, task_id: str) -> bool:
        return task_id in self._specs or any(task_id in self._ids[s] for s in SPLITS)

    def task_family(self, task_id: str) -> str:
        if task_id in self._specs:
            return self._specs[task_id].task_type
        return task_id.split("-")[0]

    def game_path(self, task_id: str) -> Path:
        if self._official is not None:
            return next(self._official[s][task_id] for s in SPLITS if task_id in self._official[s])
        return ensure_alfworld_game(self._specs[task_id])

    def world_facts(self, task_id: str) -> WorldFacts | None:
        """The PDDL problem's initial state, in the names the agent reads (ALFWorld's own
        numbering): where each object starts, which receptacles start closed, which
        appliance heating, cooling and cleaning need, and a generated game's checked plan
        (an official game's plan would need the planner: left empty)."""
        path = self.game_path(task_id)
        try:
            problem = json.loads(path.read_text())["pddl_problem"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        walkthrough_file = path.parent / "walkthrough.json"
        plan = json.loads(walkthrough_file.read_text()) if walkthrough_file.exists() else []
        return alfworld_facts(problem, task_id, self.task_family(task_id), plan)

    def walkthrough(self, task_id: str) -> list[str]:
        """The expert plan: a generated game's checked plan, or the planner's (which loads the
        game in the engine and so ends the episode in progress)."""
        walkthrough_file = self.game_path(task_id).parent / "walkthrough.json"
        if walkthrough_file.exists():
            return list(json.loads(walkthrough_file.read_text()))
        _, info = self.reset(options={"task_id": task_id, "walkthrough": True})
        self._abandon()
        return list(info["walkthrough"])

    def prepare_suite(self, workers: int = 1, progress: Callable[[int, int], None] | None = None) -> int:
        """Generate (and plan-check) every game of the generated suite; official games need nothing."""
        missing = [g for g in self._specs.values() if not game_cached(g)]
        return prepare(generate_alfworld_game, missing, workers, "ALFWorld game generation", progress)

    def _start(self, task_id: str, options: Mapping[str, Any]) -> StartResult:
        path = self.game_path(task_id)
        walkthrough_file = path.parent / "walkthrough.json"
        want_plan = bool(options.get("walkthrough")) and not walkthrough_file.exists()
        self._engine.new_game()
        try:
            # loading a game (parsing its PDDL, and planning when asked) gets three times
            # a step's limit, as ScienceWorld's loading does
            state = self._engine.call("start", str(path), want_plan, timeout_s=3 * self._engine.timeout_s)
        except EnvInfrastructureError as e:
            raise EnvInfrastructureError(f"ALFWorld could not start {path}: {e}") from e
        feedback = state["feedback"]
        instruction = feedback.split("Your task is to:")[-1].strip() if "Your task is to:" in feedback else ""
        extra: dict[str, Any] = {}
        if options.get("walkthrough"):
            extra["walkthrough"] = (json.loads(walkthrough_file.read_text()) if walkthrough_file.exists()
                                    else state["plan"])
        return StartResult(feedback, instruction, 0.0, 1.0, self._admissible_of(state), extra)

    def _admissible_of(self, state: Mapping[str, Any]) -> list[str] | None:
        return state["admissible"] if self._admissible else None

    def _advance(self, action: str) -> StepResult:
        try:
            state = self._engine.call("step", action)
        except EnvInfrastructureError as e:
            self._abandon()
            raise EnvInfrastructureError(f"ALFWorld's engine failed on {action!r} ({e}); call reset()") from e
        won = state["won"]
        return StepResult(state["feedback"], 1.0 if won else 0.0, won=won, lost=False,
                          admissible_commands=self._admissible_of(state))

    def close(self) -> None:
        self._engine.close()
        super().close()


class _Engine:
    """ALFWorld's TextWorld engine, in the engine process (:class:`EngineProcess`)."""

    def __init__(self) -> None:
        self._tw: Any = None

    def start(self, path: str, want_plan: bool) -> dict[str, Any]:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        self.close()
        infos = textworld.EnvInfos(won=True, admissible_commands=True, policy_commands=want_plan)
        self._tw = textworld.start(path, infos, wrappers=[AlfredDemangler(), AlfredInfos()])
        state = self._tw.reset()
        return {"feedback": state.feedback or "", "admissible": list(state["admissible_commands"] or []),
                "plan": list(state["policy_commands"] or []) if want_plan else []}

    def step(self, action: str) -> dict[str, Any]:
        if self._tw is None:
            raise RuntimeError("no game started")
        state, _, _ = self._tw.step(action)
        return {"feedback": state.feedback or "", "won": bool(state["won"]),
                "admissible": list(state["admissible_commands"] or [])}

    def close(self) -> None:
        tw, self._tw = self._tw, None
        if tw is not None:
            with contextlib.suppress(Exception):
                tw.close()


#: What ALFWorld's domain requires of a state-changing action (the appliance it is done with).
ALFWORLD_NEEDS = {"heat": ("microwave",), "cool": ("fridge",), "clean": ("sinkbasin",), "slice": ("knife",)}


def alfred_names(ids: list[str]) -> dict[str, str]:
    """PDDL object ids to the names the agent reads ("mug 1", "sinkbasin 2"), numbered as
    ALFWorld's ``Demangler`` numbers them (ids sorted; each name's numbers handed out from
    the highest down)."""
    ids = sorted(ids)
    count: dict[str, int] = {}

    def base(i: str) -> str | None:
        parts = i.split("_bar_", 1)
        return parts[0] + ("basin" if "basin" in i else "") if len(parts) > 1 else None

    for i in ids:
        if (name := base(i)) is not None:
            count[name] = count.get(name, 0) + 1
    numbers = {name: list(range(1, n + 1)) for name, n in count.items()}
    return {i: f"{name} {numbers[name].pop()}" if (name := base(i)) is not None else i for i in ids}


def alfworld_facts(problem: str, task_id: str, family: str, plan: list[str]) -> WorldFacts:
    """:class:`~ap_gym.types.WorldFacts` from an ALFWorld PDDL problem (its objects and
    initial state)."""
    problem = problem.lower()
    objects_part = problem[problem.index("(:objects") + len("(:objects"):problem.index("(:init")]
    ids = [line.split()[0] for line in objects_part.splitlines() if line.strip() and not line.strip().startswith(")")]
    names = alfred_names(ids)
    init = problem[problem.index("(:init"):]
    where: dict[str, tuple[str, ...]] = {}
    for obj, holder in re.findall(r"\(inreceptacle (\S+) (\S+)\)", init):
        if obj in names and holder in names:
            where[names[obj]] = (*where.get(names[obj], ()), names[holder])
    opened = {names[r] for r in re.findall(r"\(opened (\S+)\)", init) if r in names}
    closed = sorted({names[r] for r in re.findall(r"\(openable (\S+)\)", init) if r in names} - opened)
    objects = sorted({n for i, n in names.items() if "_bar_" in i})
    needs = {verb: tuple(o for o in objects if o.split()[0] in kinds) or kinds
             for verb, kinds in ALFWORLD_NEEDS.items()}
    if closed:
        needs["closed"] = tuple(closed)
    return WorldFacts(task_id, family, where, needs, tuple(plan), tuple(objects), "ALFWorld PDDL initial state")

