"""ALFWorld games generated offline from what the ``alfworld`` package ships.

ALFWorld's official game files come from a download; its engine, PDDL domain
(``alfred.pddl``), text grammar (``alfred.twl2``), goal library, object constraints
(``gen/constants.py``) and the receptacle layouts of 120 ALFRED scenes do ship. A game
here is a PDDL problem written against the shipped domain for one scene: the scene's
receptacles (from its layout, with ALFRED-style ids that alfworld's demangler shows as
"cabinet 1"), objects of the scene's types placed in receptacles that can hold them
(distractors included), closed openable receptacles, and a goal from alfworld's goal
library for one of the six task types. It is wrapped as ``game.tw-pddl`` (domain,
grammar with the task description added by alfworld's ``add_task_to_grammar``,
problem) beside a minimal ``traj_data.json``.

Every game is checked before it is used: the planner's plan (fast-downward, through
TextWorld) is replayed and must win, or the next candidate seed is tried.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ap_gym.envs.isolated import isolated
from ap_gym.paths import cache_dir, publish_dir

__all__ = ["TASK_TYPES", "AlfGameSpec", "ensure_alfworld_game", "game_cached", "generate_alfworld_game",
           "held_out_goals", "scenes"]

TASK_TYPES = (
    "pick_and_place_simple",
    "pick_two_obj_and_place",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
)
#: Which receptacle type a task type's state change needs in the scene.
_NEEDS = {"pick_clean_then_place_in_recep": "SinkBasin", "pick_heat_then_place_in_recep": "Microwave",
          "pick_cool_then_place_in_recep": "Fridge"}
_ACTION = {"pick_clean_then_place_in_recep": "Cleanable", "pick_heat_then_place_in_recep": "Heatable",
           "pick_cool_then_place_in_recep": "Coolable"}
GENERATOR_VERSION = "1"


def _alfworld() -> tuple[Any, Any, str, str]:
    os.environ.setdefault("ALFWORLD_DATA", str(cache_dir("alfworld", "data")))  # importing alfworld writes here
    import alfworld
    from alfworld.gen import constants
    from alfworld.gen import goal_library as glib

    base = Path(alfworld.__file__).parent
    return constants, glib, (base / "data" / "alfred.pddl").read_text(), (base / "data" / "alfred.twl2").read_text()


@cache
def scenes() -> dict[int, dict[str, Any]]:
    """Scene number -> {"receptacles": [(type, id)], "objects": [types]} from the shipped layouts."""
    import alfworld

    constants, *_ = _alfworld()
    folder = Path(alfworld.__file__).parent / "gen" / "layouts"
    out = {}
    for path in sorted(folder.glob("FloorPlan*-openable.json")):
        number = int(path.name[len("FloorPlan"):].split("-")[0])
        ids = sorted(json.loads(path.read_text()))
        kinds = json.loads((folder / f"FloorPlan{number}-objects.json").read_text())
        receptacles = []
        for rid in ids:
            rtype = rid.split("|")[0]
            if rtype == "Sink":
                receptacles.append(("SinkBasin", rid + "|SinkBasin"))
            elif rtype == "Bathtub":
                receptacles.append(("BathtubBasin", rid + "|BathtubBasin"))
            elif rtype in constants.RECEPTACLES:
                receptacles.append((rtype, rid))
        objects = sorted({k for k in kinds if k in constants.OBJECTS and k not in constants.RECEPTACLES
                          and k not in constants.MOVABLE_RECEPTACLES_SET or k in ("Mug", "Bowl", "Cup", "Plate", "Pan", "Pot")})
        out[number] = {"receptacles": receptacles, "objects": objects}
    return out


@dataclass(frozen=True)
class AlfGameSpec:
    """One generated game: task type, scene and seed, and optionally its goal.

    ``goal`` fixes the task's object and the receptacle type it must end in (or, for
    ``look_at_obj_in_light``, the lamp type): the held-out suite assigns it so that no two
    held-out games share a scene and a goal (such twins differ only by where the objects
    lie, and count one task twice). ``None`` (the training games) lets the seed draw it.
    """

    task_type: str
    scene: int
    seed: int
    goal: tuple[str, str] | None = None

    @property
    def task_id(self) -> str:
        return f"{self.task_type}/FloorPlan{self.scene}/s{self.seed}"


def _mangle(text: str) -> str:
    for a, b in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        text = text.replace(a, b)
    return text


def _object_id(otype: str, rng: random.Random) -> str:
    x, y, z = (rng.uniform(-3, 3) for _ in range(3))
    return f"{otype}|{x:+06.2f}|{y:+06.2f}|{z:+06.2f}"


def build_game(spec: AlfGameSpec) -> dict[str, Any] | None:
    """The game files' contents for ``spec``, or None if the scene cannot host the task."""
    constants, glib, domain, grammar = _alfworld()
    from alfworld.agents.utils.misc import add_task_to_grammar

    rng = random.Random(f"{spec.task_type}|{spec.scene}|{spec.seed}")
    scene = scenes()[spec.scene]
    target = _target(spec, rng, constants, scene)
    if target is None:
        return None
    obj, parent, toggle = target
    world = _world(spec, rng, constants, scene, obj, parent, toggle)
    if world is None:
        return None
    objects, init = world
    goal = glib.gdict[spec.task_type]["pddl"].format(obj=obj, recep=parent, toggle=toggle, mrecep="")
    goal = goal.replace("#", "-")
    problem = (f"(define (problem {_mangle(spec.task_id.replace('/', '_'))})\n(:domain alfred)\n(:objects\n"
               + "\n".join(objects) + "\n)\n(:init\n" + "\n".join(init) + "\n)\n" + goal)
    traj = {"task_type": spec.task_type, "scene": f"FloorPlan{spec.scene}", "generated_by": "ap-gym",
            "pddl_params": {"object_target": obj, "parent_target": parent if spec.task_type != "look_at_obj_in_light" else "",
                            "toggle_target": toggle, "mrecep_target": "", "object_sliced": False}}
    state = random.getstate()  # alfworld's templater draws from the global generator
    random.seed(f"{spec.task_id}|template")
    try:
        task_grammar = add_task_to_grammar(grammar, traj)
    finally:
        random.setstate(state)
    return {"game": {"pddl_domain": domain, "grammar": task_grammar, "pddl_problem": problem, "solvable": True},
            "traj_data": traj}


def _target(spec: AlfGameSpec, rng: random.Random, constants: Any, scene: dict[str, Any]
            ) -> tuple[str, str, str] | None:
    """The task's object, the receptacle type to put it in, and the lamp (look tasks)."""
    lamps = [o for o in scene["objects"] if o in ("DeskLamp", "FloorLamp")]
    if spec.task_type == "look_at_obj_in_light" and not lamps:
        return None
    choices = goal_choices(spec.task_type, scene, constants)
    if spec.goal is not None:  # fixed by the suite (held-out games): the lamp is the goal's second part
        obj, second = spec.goal
        if spec.task_type == "look_at_obj_in_light":
            return (obj, next(t for o, t in choices if o == obj), second) if second in lamps and \
                any(o == obj for o, _ in choices) else None
        return (obj, second, "") if (obj, second) in choices else None
    if not choices:
        return None
    obj, parent = rng.choice(sorted(choices))
    toggle = rng.choice(lamps) if spec.task_type == "look_at_obj_in_light" else ""
    return obj, parent, toggle


def goal_choices(task_type: str, scene: dict[str, Any], constants: Any) -> list[tuple[str, str]]:
    """Every (object type, receptacle type) a game of ``task_type`` in ``scene`` can ask for:
    an object the scene has (one the task's appliance can change), and a receptacle type of
    the scene that holds it and is not that appliance."""
    rtypes = {t for t, _ in scene["receptacles"]}
    holds = constants.VAL_RECEPTACLE_OBJECTS
    need = _NEEDS.get(task_type)
    if need and need not in rtypes:
        return []
    pool = [o for o in scene["objects"] if any(o in holds.get(t, set()) for t in rtypes)]
    if task_type in _ACTION:
        pool = [o for o in pool if o in constants.VAL_ACTION_OBJECTS[_ACTION[task_type]]]
    # the target receptacle type must hold the object and not be the state-change appliance
    return sorted((o, t) for o in pool for t in sorted(rtypes - constants.MOVABLE_RECEPTACLES_SET)
                  if o in holds.get(t, set()) and t != need and t not in ("SinkBasin", "BathtubBasin"))


def held_out_goals(task_type: str, scene: dict[str, Any]) -> list[tuple[str, str]]:
    """The goals a held-out game of ``task_type`` in ``scene`` can be given (see
    :class:`AlfGameSpec`): (object, receptacle type), or (object, lamp type) for look tasks."""
    constants, *_ = _alfworld()
    holds = constants.VAL_RECEPTACLE_OBJECTS
    fixed = set(constants.RECEPTACLES) - constants.MOVABLE_RECEPTACLES_SET
    rtypes = {t for t, _ in scene["receptacles"]} & fixed
    # the object must start somewhere other than the goal's receptacle type (else the goal is met at the start)
    choices = [(o, t) for o, t in goal_choices(task_type, scene, constants)
               if any(o in holds.get(r, set()) and r != t for r in rtypes)]
    if task_type == "look_at_obj_in_light":
        lamps = sorted({o for o in scene["objects"] if o in ("DeskLamp", "FloorLamp")})
        return sorted({(o, lamp) for o, _ in choices for lamp in lamps})
    return choices


def _world(spec: AlfGameSpec, rng: random.Random, constants: Any, scene: dict[str, Any], obj: str, parent: str,
           toggle: str) -> tuple[list[str], list[str]] | None:
    """The PDDL problem's objects and initial facts: the scene's receptacles, the target
    (twice for pick-two), the lamp and distractors placed where they can be."""
    holds = constants.VAL_RECEPTACLE_OBJECTS
    rtype_names = sorted(set(constants.RECEPTACLES) - constants.MOVABLE_RECEPTACLES_SET)
    otype_names = sorted(constants.OBJECTS_SET - set(rtype_names))
    objects = ["agent1 - agent"] + [f"{t}Type - otype" for t in otype_names] + [f"{t}Type - rtype" for t in rtype_names]
    init = ["(= (totalCost) 0)"]
    locations = ["loc_bar_start"]
    rec_ids = []
    for rtype, rid in scene["receptacles"]:
        name, loc = _mangle(rid), f"loc_bar_{len(locations)}"
        locations.append(loc)
        rec_ids.append((rtype, name, loc))
        objects += [f"{name} - receptacle", f"{loc} - location"]
        init += [f"(receptacleType {name} {rtype}Type)", f"(receptacleAtLocation {name} {loc})"]
        if rtype in constants.OPENABLE_CLASS_LIST:
            init.append(f"(openable {name})")
    objects.append("loc_bar_start - location")
    init.append("(atLocation agent1 loc_bar_start)")
    for rt in rtype_names:
        for ot in sorted(holds.get(rt, set())):
            if ot in otype_names:
                init.append(f"(canContain {rt}Type {ot}Type)")
    n_target = 2 if spec.task_type == "pick_two_obj_and_place" else rng.randint(1, 2)
    placed = [obj] * n_target + ([toggle] if toggle else [])
    others = [o for o in scene["objects"] if o not in (obj, toggle, "DeskLamp", "FloorLamp")]
    placed += rng.sample(others, min(len(others), rng.randint(4, 8)))
    for otype in placed:
        facts = _place(otype, obj, parent, rng, constants, rec_ids, rtype_names)
        if facts is None:
            if otype == obj:
                return None
            continue
        objects.append(facts[0])
        init += facts[1:]
    init += [f"(= (distance {a} {b}) 1)" for a in locations for b in locations if a != b]
    return objects, init


_LAMP_STANDS = ("Desk", "SideTable", "Dresser", "Shelf", "Nightstand", "CounterTop", "DiningTable", "CoffeeTable",
                "TVStand", "Sofa", "ArmChair")


def _place(otype: str, obj: str, parent: str, rng: random.Random, constants: Any,
           rec_ids: list[tuple[str, str, str]], rtype_names: list[str]) -> list[str] | None:
    """One object placed in a receptacle that can hold it: its declaration, then its facts."""
    holds = constants.VAL_RECEPTACLE_OBJECTS
    spots = [(rt, n, loc) for rt, n, loc in rec_ids if otype in holds.get(rt, set()) and rt in rtype_names
             and not (otype == obj and rt == parent)]  # the goal is not already met
    lamp = otype in ("DeskLamp", "FloorLamp")
    if lamp:
        spots = [(rt, n, loc) for rt, n, loc in rec_ids if rt in _LAMP_STANDS] or spots
    if not spots:
        return None
    _, rname, loc = rng.choice(spots)
    oname = _mangle(_object_id(otype, rng))
    facts = [f"{oname} - object", f"(objectType {oname} {otype}Type)", f"(inReceptacle {oname} {rname})",
             f"(objectAtLocation {oname} {loc})", f"(toggleable {oname})" if lamp else f"(pickupable {oname})"]
    for prop, key in (("cleanable", "Cleanable"), ("heatable", "Heatable"), ("coolable", "Coolable")):
        if otype in constants.VAL_ACTION_OBJECTS[key]:
            facts.append(f"({prop} {oname})")
    if otype in constants.MOVABLE_RECEPTACLES_SET:
        facts.append(f"(isReceptacleObject {oname})")
    return facts


def _check(game_file: Path) -> list[str] | None:
    """The planner's plan if replaying it wins the game, else None."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, policy_commands=True)
    env = textworld.start(str(game_file), infos, wrappers=[AlfredDemangler(), AlfredInfos()])
    try:
        state = env.reset()
        plan = list(state["policy_commands"] or [])
        if not plan:
            return None
        for command in plan:
            state, _, done = env.step(command)
            if done:
                break
        return plan if state["won"] else None
    except Exception:
        return None
    finally:
        env.close()


def _complete(final: Path) -> bool:
    return all((final / f).exists() for f in ("game.tw-pddl", "traj_data.json", "walkthrough.json"))


def _cached(spec: AlfGameSpec) -> tuple[Path, bool]:
    name = spec.task_id.replace("/", "__") + (f"__{spec.goal[0]}-{spec.goal[1]}" if spec.goal else "")
    final = cache_dir("alfworld", f"games-v{GENERATOR_VERSION}") / name  # a goal is part of the game's name
    return final / "game.tw-pddl", _complete(final)


def game_cached(spec: AlfGameSpec) -> bool:
    """Whether the cache holds ``spec``'s checked game."""
    return _cached(spec)[1]


def ensure_alfworld_game(spec: AlfGameSpec, attempts: int = 20) -> Path:
    """The checked ``game.tw-pddl`` of ``spec``, generated on first use and cached.

    Generation (with fast-downward's planner, native code) runs in a helper process
    (:mod:`ap_gym.envs.isolated`), so a crash there cannot take the caller down.
    """
    game, done = _cached(spec)
    return game if done else isolated(generate_alfworld_game, spec, attempts, what=f"generating {spec.task_id}")


def generate_alfworld_game(spec: AlfGameSpec, attempts: int = 20) -> Path:
    """Generate (in this process) and cache the checked game of ``spec``.

    Candidates are tried in a fixed order (the spec's seed, then derived ones) until one
    is hostable and its plan wins; the cache holds only checked games, written to a
    temporary directory and renamed into place.
    """
    game, done = _cached(spec)
    if done:
        return game
    final = game.parent
    for attempt in range(attempts):
        candidate = AlfGameSpec(spec.task_type, spec.scene, spec.seed * 1000 + attempt, spec.goal)
        built = build_game(candidate)
        if built is None:
            continue
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
        (tmp / "game.tw-pddl").write_text(json.dumps(built["game"]))
        (tmp / "traj_data.json").write_text(json.dumps(built["traj_data"], indent=1))
        plan = _check(tmp / "game.tw-pddl")
        if plan is None:
            shutil.rmtree(tmp, ignore_errors=True)
            continue
        (tmp / "walkthrough.json").write_text(json.dumps(plan))
        publish_dir(tmp, final, _complete)  # another process's complete copy is as good as ours
        return game
    raise RuntimeError(f"no solvable ALFWorld game for {spec.task_id} in {attempts} attempts")
