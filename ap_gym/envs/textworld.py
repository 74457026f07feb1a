"""TextWorld (Côté et al., 2018) as ``ap_gym/TextWorld-v0``, with a generated default suite.

The default suite holds 60 games made offline by TextWorld's own generator (the
challenges behind ``tw-make``): 15 each of ``tw-simple``, ``tw-coin_collector``,
``tw-treasure_hunter`` and ``tw-cooking``, spread over difficulty. Each game is fixed
by its challenge settings and seed, generated on first use (3-5 s) and cached under the
user cache directory (``ap-gym games textworld`` makes them all ahead of time). In each
challenge, every third game by difficulty is held out: 40 training games, 20 held-out.

The instruction states the goal, never the route, and the first observation holds neither
TextWorld's banner nor its own objective (:func:`first_observation`): the room, as later
observations show rooms. TextWorld's own objectives for
``tw-coin_collector`` and ``tw-treasure_hunter`` paraphrase the walkthrough step by step
("First of all, go north. With that done, go west. ...": the instruction would be the
solution, and memory could only interfere), and ``tw-cooking`` shows one generic line in
every game. So the default suite's instruction is written from each game's win condition
and recipe (:func:`goal_of`): "Find the coin and pick it up." for a coin collector, the
object to hold and the room to hold it in for a treasure hunt, the dish's ingredients
and directions for cooking. ``tw-simple`` games use ``--goal brief``, already goal-only.

Users add their own games (``.z8``/``.ulx`` made by ``tw-make`` or Inform 7) with
``gym.make("ap_gym/TextWorld-v0", games=[...])``: a list of files or a directory serves
the same games in both splits; ``{"train": [...], "test": [...]}`` splits them. The
task id is the file's stem and the family is ``"custom"``.

Success is TextWorld's ``won``. TextWorld's ``score`` is the running total, so the step
reward is its change. Admissible commands are cheap here and on by default. Reset
option ``walkthrough=True`` puts the game's walkthrough in ``info["walkthrough"]``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ap_gym.envs.base import SPLITS, StartResult, StepResult, TextEnv
from ap_gym.envs.engine_process import EngineProcess
from ap_gym.envs.isolated import isolated, prepare
from ap_gym.errors import EnvInfrastructureError
from ap_gym.paths import atomic_write_json, cache_dir, publish_dir
from ap_gym.text import FAILED_FEEDBACK, Grammar
from ap_gym.types import WorldFacts

__all__ = ["SUITES", "GameSpec", "TextWorldEnv", "default_suite", "ensure_game", "first_observation", "generate_game", "goal_of",
           "treasure_suite"]


@dataclass(frozen=True)
class GameSpec:
    """A generated game: a TextWorld challenge, its settings and a seed."""

    challenge: str
    settings: tuple[tuple[str, Any], ...]
    seed: int
    difficulty: int

    @property
    def task_id(self) -> str:
        parts = [f"{k}-{v}" if not isinstance(v, bool) else k for k, v in self.settings if v is not False]
        return f"{self.challenge}/{'_'.join(parts)}_s{self.seed}"

    @property
    def digest(self) -> str:
        key = json.dumps([self.challenge, self.settings, self.seed, "textworld-1.7.0"])
        return hashlib.sha1(key.encode()).hexdigest()[:12]


def _suite() -> list[GameSpec]:
    specs: list[GameSpec] = []
    rewards = ["dense", "balanced", "sparse"]
    for i in range(15):
        settings: tuple[tuple[str, Any], ...] = (("rewards", rewards[i % 3]), ("goal", "brief"), ("test", False))
        specs.append(GameSpec("tw-simple", settings, 100 + i, difficulty=i % 3))
    for i, level in enumerate([1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 102, 104, 106, 108, 110]):
        specs.append(GameSpec("tw-coin_collector", (("level", level),), 200 + i, difficulty=level))
    for i, level in enumerate(range(1, 30, 2)):
        specs.append(GameSpec("tw-treasure_hunter", (("level", level),), 300 + i, difficulty=level))
    cooking = [
        (1, 0, 1, False, False, False), (1, 1, 1, False, False, False), (1, 1, 1, True, False, False),
        (1, 1, 6, False, False, False), (1, 1, 6, True, False, False), (2, 1, 1, False, True, False),
        (2, 1, 1, False, False, True), (2, 2, 6, True, False, False), (1, 1, 6, True, True, False),
        (2, 1, 6, True, False, True), (2, 2, 6, False, True, True), (3, 1, 1, True, True, True),
        (3, 2, 6, False, True, False), (2, 2, 9, True, False, False), (3, 3, 6, True, True, True),
    ]
    for i, (recipe, take, go, open_, cook, cut) in enumerate(cooking):
        settings = (("recipe", recipe), ("take", take), ("go", go), ("open", open_),
                    ("cook", cook), ("cut", cut), ("drop", False), ("recipe_seed", i))
        specs.append(GameSpec("tw-cooking", settings, 400 + i, difficulty=recipe + take + go + open_ + cook + cut))
    return specs


def default_suite() -> dict[str, list[GameSpec]]:
    """The default 60-game suite, split 40 training / 20 held-out (every third by difficulty)."""
    split: dict[str, list[GameSpec]] = {"train": [], "test": []}
    by_challenge: dict[str, list[GameSpec]] = {}
    for spec in _suite():
        by_challenge.setdefault(spec.challenge, []).append(spec)
    for specs in by_challenge.values():
        ranked = sorted(specs, key=lambda s: (s.difficulty, s.seed))
        for j, spec in enumerate(ranked):
            split["test" if j % 3 == 1 else "train"].append(spec)
    return split


def treasure_suite() -> dict[str, list[GameSpec]]:
    """TextWorld's treasure hunter at levels 1-20 (rooms, distractor objects, closed doors
    from level 11): 6 training and 2 held-out games per level, on seeds of their own. The
    instruction names the object and the room; taking another object loses the game. Held-out
    games are other worlds than training ones, and no held-out walkthrough is a training one
    (``benchmarks/agent.py`` counts them again)."""
    def spec(level: int, seed: int) -> GameSpec:
        return GameSpec("tw-treasure_hunter", (("level", level),), seed, difficulty=level)

    def held_out(level: int) -> list[GameSpec]:
        seeds = (20_000 + 100 * level + i for i in range(100))
        return [spec(level, seed) for seed in seeds if seed not in _SHARED_ROUTES][:2]

    return {"train": [spec(lv, 10_000 + 100 * lv + i) for lv in range(1, 21) for i in range(6)],
            "test": [g for lv in range(1, 21) for g in held_out(lv)]}


#: Held-out seeds whose game's walkthrough is also a training game's (TextWorld 1.7.0: short
#: routes such as ``take latchkey`` repeat), left out so that held-out routes are new.
_SHARED_ROUTES = frozenset({20100, 20200, 20201, 20202, 20501, 20601})


#: The generated suites the env serves by name (``suite=``).
SUITES: dict[str, Callable[[], dict[str, list[GameSpec]]]] = {"default": default_suite,
                                                                 "treasure_hunter": treasure_suite}


def _game_dir() -> Path:
    return cache_dir("textworld", "games-1.7.0")


def _game_complete(final: Path) -> bool:
    return (final / "game.z8").exists() and (final / "game.json").exists()


def ensure_game(spec: GameSpec) -> Path:
    """The path of ``spec``'s game file, generating it first if the cache lacks it.

    Generation (Inform 7's compiler, native code) runs in a helper process
    (:mod:`ap_gym.envs.isolated`), so a crash there cannot take the caller down.
    """
    final = _game_dir() / spec.digest
    game = final / "game.z8"
    if game.exists() and (final / "game.json").exists():
        return game
    return isolated(generate_game, spec, what=f"generating {spec.task_id}")


def generate_game(spec: GameSpec) -> Path:
    """Generate (in this process) and cache ``spec``'s game. It is written into a temporary
    directory that is renamed into place, so a killed generation never leaves a game that
    looks complete."""
    final = _game_dir() / spec.digest
    game = final / "game.z8"
    if _game_complete(final):
        return game
    import textworld
    import textworld.challenges
    from textworld.generator import compile_game

    tmp = Path(tempfile.mkdtemp(dir=_game_dir(), prefix=".tmp-"))
    try:
        _, make, add_arguments = textworld.challenges.CHALLENGES[spec.challenge]
        import argparse

        parser = argparse.ArgumentParser()
        add_arguments(parser)
        defaults = {a.dest: a.default for a in parser._actions if a.dest != "help"}
        settings = {**defaults, **dict(spec.settings)}
        from textworld.generator.chaining import QuestGenerationError

        for attempt in range(20):  # a seed whose map admits no quest of the level's length: the next one
            options = textworld.GameOptions()
            options.seeds = spec.seed + 1_000_003 * attempt
            options.path = str(tmp / "game.z8")
            options.file_ext = ".z8"
            options.force_recompile = True
            try:
                game_obj = make(settings=settings, options=options)
                break
            except QuestGenerationError:
                if attempt == 19:
                    raise
        compile_game(game_obj, options)
        if not (tmp / "game.json").exists():
            game_obj.save(str(tmp / "game.json"))
        (tmp / "spec.json").write_text(json.dumps({"task_id": spec.task_id, "seed": spec.seed,
                                                   "generated_with_seed": options.seeds}))
        publish_dir(tmp, final, _game_complete)  # another process's complete copy is as good as ours
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return game


@functools.cache
def goal_of(game_file: Path, challenge: str) -> str | None:
    """What a default-suite game asks, without the route (see the module docstring);
    ``None`` where TextWorld's own objective already says only that (``tw-simple``).

    Kept beside the game once worked out: loading a game's logic takes ~0.5 s, paid
    otherwise by every process (worker, resumed run) that starts the game.
    """
    if challenge not in ("tw-coin_collector", "tw-treasure_hunter", "tw-cooking"):
        return None
    kept = Path(game_file).parent / f"goal-{challenge}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # a damaged copy is worked out again
        return str(json.loads(kept.read_text())["goal"])
    goal = _work_out_goal(game_file, challenge)
    with contextlib.suppress(OSError):  # a read-only cache only costs the time again
        atomic_write_json(kept, {"goal": goal})
    return goal


#: TextWorld parses a game's logic with one module-level parser (tatsu), which is not
#: thread-safe: lanes that start new games at once crashed it ("pop from empty list").
_PARSER_LOCK = threading.Lock()


def _load_game(path: Path) -> Any:
    """``textworld.Game.load``, one thread at a time."""
    import textworld

    with _PARSER_LOCK:
        return textworld.Game.load(str(path))


def _work_out_goal(game_file: Path, challenge: str) -> str:

    game = _load_game(Path(game_file).with_suffix(".json"))
    if challenge == "tw-cooking":
        recipe = game.metadata.get("recipe", "")
        ingredients = _section(recipe, "Ingredients:")
        directions = _section(recipe, "Directions:")
        if not ingredients:
            raise ValueError(f"{game_file}: no recipe in the game's metadata")
        steps = [d for d in directions if d != "prepare meal"]
        return (f"Cook the meal of the recipe in the kitchen's cookbook, then eat it. It needs "
                f"{_listing(ingredients)}" + (f"; {_listing(steps)} first" if steps else "") + ".")

    def name(var: Any) -> str:
        info = game.infos.get(var.name)
        return info.name if info is not None and info.name else var.name

    condition = game.quests[0].win_events[0].condition
    held = [p.arguments[0] for p in condition.preconditions if p.name == "in" and p.arguments[1].name == "I"]
    rooms = [p.arguments[1] for p in condition.preconditions if p.name == "at" and p.arguments[0].name == "P"]
    if not held:
        raise ValueError(f"{game_file}: its win condition holds no object ({condition})")
    goal = f"Find the {name(held[0])} and pick it up"
    return goal + (f", and be in the {name(rooms[0])} with it." if rooms else ".")


#: The longest command, in bytes, that jericho passes to frotz whole (it truncates
#: longer ones with a warning).
ZMACHINE_COMMAND_BYTES = 198


def zmachine_command(action: str) -> str:
    """``action`` as one line the Z-machine interpreter can only read as a command.

    TextWorld's games run in jericho's dumb-frotz, which reads a backslash anywhere in
    its input as one of its own escapes, not the game's: ``\\U`` (undo) crashed the
    whole process with a segmentation fault, ``\\q``, ``\\R``, ``\\P`` or ``\\help``
    left it waiting on the terminal forever, and a newline inside an action split it into
    two commands, the second answered a step late. Gymnasium's ``check_env`` samples
    random printable text, which found this on CI (a crashed test run). Backslashes
    and whitespace runs become single spaces, and the line is cut to what jericho passes
    whole (``TextEnv.step`` has already made it printable ASCII: a character is a byte).
    """
    return " ".join(action.replace("\\", " ").split())[:ZMACHINE_COMMAND_BYTES].rstrip()


_ROOM = re.compile(r"^-= .+ =-$", re.M)
#: TextWorld's prompt and status line at the end of an observation: ">   ...   -= Room =-0/1".
_STATUS = re.compile(r"\n*>\s*(?:-= .* =-\S*)?\s*$")


def first_observation(feedback: str, objective: str) -> str:
    """What the agent sees first: the room, without TextWorld's banner (ASCII art) and its
    own objective, which spells the whole route for coin collectors and treasure hunts
    ("First of all, go north. ...") and would hand the agent the solution; the env's
    instruction states the goal instead (:func:`goal_of`). A game without a room header
    keeps its text, minus the objective."""
    room = _ROOM.search(feedback)
    text = feedback[room.start():] if room else feedback
    if objective.strip():
        text = text.replace(objective.strip(), "")
    return text.strip("\n")


def _section(text: str, title: str) -> list[str]:
    lines = text.split(title, 1)[1].splitlines() if title in text else []
    out: list[str] = []
    for line in lines[1:] if lines and not lines[0].strip() else lines:
        if not line.strip():
            if out:
                break
            continue
        if line.strip().endswith(":"):
            break
        out.append(line.strip())
    return out


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _user_games(games: str | Path | Sequence[str | Path] | Mapping[str, Iterable[str | Path]]) -> dict[str, dict[str, Path]]:
    def collect(items: str | Path | Iterable[str | Path]) -> dict[str, Path]:
        paths: list[Path] = []
        for item in [items] if isinstance(items, str | Path) else items:
            p = Path(item).expanduser()
            if p.is_dir():
                paths += sorted(q for q in p.rglob("*") if q.suffix in {".z8", ".ulx"})
            elif p.suffix in {".z8", ".ulx"} and p.exists():
                paths.append(p)
            else:
                raise FileNotFoundError(f"TextWorld game {p} not found (expected a .z8/.ulx file or a directory)")
        if not paths:
            raise FileNotFoundError(f"no .z8/.ulx games found in {items!r}")
        out: dict[str, Path] = {}
        for p in paths:
            key = p.stem if p.stem not in out else f"{p.parent.name}/{p.stem}"
            out[key] = p.resolve()
        return out

    if isinstance(games, Mapping):
        return {s: collect(games.get(s, [])) if games.get(s) else {} for s in SPLITS}
    both = collect(games)
    return {s: dict(both) for s in SPLITS}


class _Engine:
    """TextWorld's engine (jericho's frotz), in an engine process of its own
    (:class:`~ap_gym.envs.engine_process.EngineProcess`): a native crash of the interpreter
    ends that child, not the caller. A game stays loaded between resets."""

    def __init__(self) -> None:
        self._tw: Any = None
        self._key: tuple[str, bool] | None = None

    def start(self, path: str, admissible: bool, walkthrough: bool) -> dict[str, Any]:
        import textworld

        if self._tw is None or self._key != (path, admissible):
            self.close()
            infos = textworld.EnvInfos(objective=True, score=True, max_score=True, won=True, lost=True,
                                       admissible_commands=admissible, extras=["walkthrough"])
            self._tw = textworld.start(path, infos)
            self._key = (path, admissible)
        state = self._tw.reset()
        walk = state.get("extra.walkthrough") if walkthrough else None
        return {"feedback": state.feedback or "", "objective": state.get("objective") or "",
                "score": float(state.get("score") or 0), "max_score": float(state.get("max_score") or 0),
                "admissible": list(state.get("admissible_commands") or []) if admissible else None,
                "walkthrough": list(walk) if walk is not None else None}

    def step(self, command: str) -> dict[str, Any]:
        if self._tw is None:
            raise RuntimeError("no game started")
        state, score, _ = self._tw.step(command)
        return {"feedback": state.feedback or "", "score": float(score or 0), "won": bool(state.get("won")),
                "lost": bool(state.get("lost")),
                "admissible": list(state.get("admissible_commands") or []) if self._key and self._key[1] else None}

    def close(self) -> None:
        tw, self._tw, self._key = self._tw, None, None
        if tw is not None:
            with contextlib.suppress(Exception):
                tw.close()


class TextWorldEnv(TextEnv):
    """TextWorld games behind the ap-gym text contract; see the module docstring.

    Args:
        split: ``"train"`` or ``"test"``.
        games: the user's own games instead of a generated suite (files, a directory,
            or a mapping from split to either).
        suite: the generated suite: ``"default"`` (60 games of four challenges) or
            ``"treasure_hunter"`` (160 treasure hunts, levels 1-20, :func:`treasure_suite`;
            its task families are bands of five levels).
        admissible_commands: put the engine's admissible commands in ``info`` (default on).
        status_line: keep TextWorld's prompt and status line (``> -= Room =-0/1``) and its
            runs of padding at the end of each observation; ``False`` drops them, so that
            equal states give equal observations (state matching, as GiGPO's anchors need).
        render_mode: ``"ansi"`` or ``"human"``.
        engine_timeout_s: the longest one engine call may take (the engine runs in a child
            process, which is killed past it; loading a game gets three times as long).
    """

    benchmark = "textworld"
    stand_in = "TextWorld: ap-gym's own benchmark, not one of the paper's (never in its tables)"
    grammar = Grammar.of({"look", "inventory", "go", "take", "drop", "put", "insert", "open", "close", "unlock",
                          "lock", "examine", "eat", "drink", "cook", "slice", "chop", "dice", "prepare", "read",
                          "north", "south", "east", "west"})
    #: Inform 7's parser and library refusals (an incomplete command asks "What do you want to ...?")
    refused = re.compile(FAILED_FEEDBACK.pattern + r"|what do you want to|who do you want to|is closed|is locked"
                         r"|already|you'll have to|nothing to", re.I)

    def __init__(
        self,
        *,
        split: str = "train",
        games: Any = None,
        suite: str = "default",
        admissible_commands: bool = True,
        status_line: bool = True,
        render_mode: str | None = None,
        engine_timeout_s: float = 60.0,
    ) -> None:
        super().__init__(split=split, admissible_commands=admissible_commands, render_mode=render_mode)
        if engine_timeout_s <= 0:
            raise ValueError("engine_timeout_s must be > 0")
        self.status_line = status_line
        self._engine = EngineProcess(_Engine, name="TextWorld", timeout_s=engine_timeout_s, recycle_every=0)
        if suite not in SUITES:
            raise ValueError(f"suite must be one of {', '.join(SUITES)}, not {suite!r}")
        self.suite = suite
        if games is None:
            specs = SUITES[suite]()
            self._specs = {s.task_id: s for split_specs in specs.values() for s in split_specs}
            self._ids = {split_: [s.task_id for s in specs[split_]] for split_ in SPLITS}
            self._paths: dict[str, Path] = {}
        else:
            user = _user_games(games)
            self._specs = {}
            self._ids = {s: list(user[s]) for s in SPLITS}
            self._paths = {k: v for s in SPLITS for k, v in user[s].items()}

    def _task_ids(self, split: str) -> list[str]:
        return self._ids[split]

    def has_task(self, task_id: str) -> bool:
        return task_id in self._specs or task_id in self._paths

    def task_family(self, task_id: str) -> str:
        spec = self._specs.get(task_id)
        if spec is not None and self.suite == "treasure_hunter":
            low = (spec.difficulty - 1) // 5 * 5 + 1
            return f"treasure_hunter-levels-{low}-{low + 4}"
        return spec.challenge if spec else "custom"

    def world_facts(self, task_id: str) -> WorldFacts | None:
        """The game's facts (its ``.json``): where each object starts, which key each lock
        takes, what is closed, the knife cutting needs, and the walkthrough."""
        path = self.game_path(task_id).with_suffix(".json")
        try:
            return textworld_facts(json.loads(path.read_text()), task_id, self.task_family(task_id))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def game_path(self, task_id: str) -> Path:
        """The game file of ``task_id`` (generated first if needed)."""
        if task_id in self._paths:
            return self._paths[task_id]
        return ensure_game(self._specs[task_id])

    def _start(self, task_id: str, options: Mapping[str, Any]) -> StartResult:
        path = self.game_path(task_id)
        self._engine.new_game()
        try:
            state = self._engine.call("start", str(path), self._admissible, bool(options.get("walkthrough")),
                                      timeout_s=3 * self._engine.timeout_s)
        except EnvInfrastructureError as e:
            raise EnvInfrastructureError(f"TextWorld could not start {path}: {e}") from e
        extra: dict[str, Any] = {}
        if options.get("walkthrough"):
            if state["walkthrough"] is None:
                raise ValueError(f"game {path} carries no walkthrough (its .json metadata lacks one)")
            extra["walkthrough"] = state["walkthrough"]
        return StartResult(
            observation=self._text(first_observation(state["feedback"], state["objective"])),
            instruction=self._goal(task_id, path) or state["objective"],
            score=state["score"],
            max_score=state["max_score"] or None,
            admissible_commands=state["admissible"],
            extra=extra,
        )

    def walkthrough(self, task_id: str) -> list[str]:
        """The game's own walkthrough (TextWorld writes it into the game's metadata)."""

        path = self.game_path(task_id)
        walkthrough = _load_game(path.with_suffix(".json")).metadata.get("walkthrough")
        if walkthrough is None:
            raise ValueError(f"game {path} carries no walkthrough (its .json metadata lacks one)")
        return list(walkthrough)

    def prepare_suite(self, workers: int = 1, progress: Callable[[int, int], None] | None = None) -> int:
        """Generate every game of the default suite into the cache (user games need nothing)."""
        missing = [s for s in self._specs.values() if not _game_complete(_game_dir() / s.digest)]
        return prepare(generate_game, missing, workers, "TextWorld game generation", progress)

    def _goal(self, task_id: str, path: Path) -> str | None:
        spec = self._specs.get(task_id)
        return goal_of(path, spec.challenge) if spec is not None else None

    def _advance(self, action: str) -> StepResult:
        try:
            state = self._engine.call("step", zmachine_command(action))
        except EnvInfrastructureError as e:
            self._abandon()
            raise EnvInfrastructureError(f"TextWorld's engine failed on {action!r} ({e}); call reset()") from e
        won = state["won"]
        lost = state["lost"] and not won
        return StepResult(self._text(state["feedback"]), state["score"], won, lost, state["admissible"])

    def close(self) -> None:
        self._engine.close()
        super().close()

    def _text(self, observation: str) -> str:
        if self.status_line:
            return observation
        text = _STATUS.sub("", observation)
        return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


#: Verbs TextWorld answers "Cutting something requires a knife." to, without one in hand.
_CUTTING = ("cut", "slice", "chop", "dice")


def textworld_facts(game: Mapping[str, Any], task_id: str, family: str) -> WorldFacts:
    """:class:`~ap_gym.types.WorldFacts` from a TextWorld game's JSON (its world facts,
    entity names and walkthrough)."""
    names = {str(i): (info.get("name") or "") for i, info in game.get("infos", [])}
    inside: dict[str, set[str]] = {}
    needs: dict[str, tuple[str, ...]] = {}
    closed = []
    facts = [(f["name"], [a["name"] for a in f.get("arguments", [])]) for f in game.get("world", [])]
    for pred, args in facts:
        if pred in ("at", "in", "on") and len(args) == 2 and args[0] not in ("P", "I") and names.get(args[0]):
            holder = "inventory" if args[1] == "I" else names.get(args[1])  # what the player carries at the start
            if holder:
                inside.setdefault(names[args[0]], set()).add(holder)
        elif pred in ("closed", "locked") and args and names.get(args[0]):
            closed.append(names[args[0]])
        elif pred == "match" and len(args) == 2 and names.get(args[0]) and names.get(args[1]):
            for verb in ("unlock", "open"):  # a locked door or container opens after its key unlocks it
                needs[f"{verb} {names[args[1]]}"] = (names[args[0]],)
    where: dict[str, tuple[str, ...]] = {}
    for obj, holders in inside.items():  # an object in a chest is also in the chest's room
        found, todo = set(holders), list(holders)
        while todo:
            for up in inside.get(todo.pop(), ()):
                if up not in found:
                    found.add(up)
                    todo.append(up)
        where[obj] = tuple(sorted(found))
    objects = sorted({n for n in names.values() if n})
    if any("knife" in o for o in objects):
        needs.update({verb: tuple(o for o in objects if "knife" in o) for verb in _CUTTING})
    if closed:
        needs["closed"] = tuple(sorted(set(closed)))
    plan: list[str] = (game.get("metadata") or {}).get("walkthrough") or \
        next((q.get("commands") for q in game.get("quests") or [] if q.get("commands")), [])
    return WorldFacts(task_id, family, where, needs, tuple(plan), tuple(objects), "TextWorld game facts")

