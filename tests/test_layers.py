"""The package's layers, read from its source, against one executable table (:data:`LAYERS`).

The table is the dependency rule of shared/DESIGN.md; README.md's "Layers" section is
rendered from it (``python tests/test_layers.py`` prints it) and a test fails when the two
differ, so the prose and the check cannot drift apart.

What counts as an edge: every ``import`` (module level or inside a function: an import
deferred to call time is still a dependency, and deferring it was how cycles hid), an
``importlib.import_module``/``__import__`` of a constant or an f-string prefix, and an
entry-point string (``"ap_gym.envs.alfworld:ALFWorldEnv"``, which ``gym.make`` imports).
Imports under ``if TYPE_CHECKING:`` load nothing and do not count.

The check is transitive: everything a group's modules reach, through any number of other
modules (its own included), must be allowed to that group. A relay inside one group (a
module of ``protocol`` that ``report`` may read importing one it may not) is a violation
of ``report``'s rule. And no module takes part in an import cycle.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ap_gym"

#: Modules anyone may import: they import nothing of ap-gym above them.
CORE = ("types", "errors", "paths", "options", "text", "prompts", "seeding", "processes", "_child", "net", "trainlog")


@dataclass(frozen=True)
class Layer:
    """A part of the package: where it lives, what it may import (groups, or
    ``group.module`` for one module of a group; ``*`` for everything) and why."""

    place: str
    imports: frozenset[str] = field(default_factory=frozenset)
    why: str = ""


def _layer(place: str, *imports: str, why: str = "") -> Layer:
    return Layer(place, frozenset(imports), why)


#: The dependency rule: group -> what it may import besides :data:`CORE` and itself.
LAYERS: dict[str, Layer] = {
    "envs": _layer("ap_gym/envs/", "wrappers.action_syntax",
                   why="its benchmark's engine; ALFWorld is registered with the action-syntax adapter"),
    "wrappers": _layer("ap_gym/wrappers/", why="Gymnasium"),
    "backbones": _layer("ap_gym/backbones/", why="transformers, HTTP"),
    "memory": _layer("ap_gym/memory/", why="SQLite, numpy, FAISS"),
    "policies": _layer("ap_gym/policies/", "backbones", "memory"),
    "rollout": _layer("ap_gym/rollout.py", "wrappers", why="the env and policy protocols"),
    "vector": _layer("ap_gym/vector.py", "wrappers"),
    "training": _layer("ap_gym/training/", "envs", "wrappers", "backbones", "memory", "policies", "rollout", "vector",
                       "protocol.config", why="the one trainer; a training config imports a user's envs and "
                       "names its run as a run config does (protocol.config)"),
    "protocol": _layer("ap_gym/protocol/", "envs", "wrappers", "backbones", "memory", "policies", "rollout", "vector",
                       why="the registries, and the rollout stepper"),
    "report": _layer("ap_gym/report/", "protocol.results", "memory", "backbones.base",
                     why="results only (a setting's memory.sqlite is read through protocol.results); a judge "
                         "backbone is passed in, never built here"),
    "frames": _layer("ap_gym/frames.py", "protocol.results", "memory", why="a run's episodes as data frames (pandas)"),
    "view": _layer("ap_gym/view/", "protocol.results", "memory", "report", "backbones.base",
                   why="results and the report's tables, read-only"),
    "studies": _layer("ap_gym/studies/", "envs", "wrappers", "backbones", "memory", "policies", "rollout", "vector",
                      "protocol", "report"),
    "demo": _layer("ap_gym/demo.py", "envs", "wrappers", "backbones", "memory", "policies", "rollout", "vector",
                   "protocol", "report"),
    "cli": _layer("ap_gym/cli.py", "*", why="everything, thinly"),
    "": _layer("ap_gym/__init__.py", "envs", "wrappers", "backbones", "memory", "policies", "rollout", "vector",
               "protocol.config", why="the public face: the extension names, re-exported (lazily, but for the env "
                                      "registration)"),
}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def group(module: str) -> str:
    parts = module.split(".")[1:]
    return parts[0] if parts else ""


def _type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _nodes(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:`` (they load nothing)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                todo += child.orelse
            else:
                todo.append(child)


def _resolve(names: set[str], known: set[str]) -> set[str]:
    """Names to known modules: a module itself, or every module under a prefix ending in '.'."""
    out = set()
    for name in names:
        if name.endswith("."):
            out |= {m for m in known if m.startswith(name)}
        elif name in known:
            out.add(name)
        elif name.rsplit(".", 1)[0] in known:  # `from pkg import attribute`
            out.add(name.rsplit(".", 1)[0])
    return out


def edges_of(path: Path, known: set[str], package: Path = PACKAGE) -> set[str]:
    """The ap_gym modules ``path`` imports (see the module docstring)."""
    module = module_name(path, package)
    names: set[str] = set()
    for node in _nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: against this module's package
                base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            names |= {name} | {f"{name}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module",
                                                                         "__import__") and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.add(arg.value)
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                prefix = str(arg.values[0].value)
                names.add(prefix if prefix.endswith(".") else prefix + ".")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = re.fullmatch(r"(ap_gym(?:\.\w+)*):\w+", node.value)  # an entry point
            if match:
                names.add(match.group(1))
    return {m for m in _resolve({n for n in names if n.startswith("ap_gym")}, known) if m != module}


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the ap_gym modules it imports (every file of the package)."""
    paths = {module_name(p, package): p for p in package.rglob("*.py")}
    known = set(paths)
    return {m: edges_of(p, known, package) for m, p in paths.items()}


def allowed(source_group: str, target: str) -> bool:
    """Whether a module of ``source_group`` may import (or reach) ``target``."""
    dst = group(target)
    if dst in CORE or dst == source_group or target == "ap_gym":  # the face: what it reaches is checked on
        return True
    if source_group in CORE:
        return False
    rules = LAYERS[source_group].imports
    sub = ".".join(target.split(".")[1:3])
    return "*" in rules or dst in rules or sub in rules


def violations(edges: dict[str, set[str]]) -> list[str]:
    """Every module a group reaches that its rule does not allow, with the path to it."""
    found = []
    for start in sorted(edges):
        src = group(start)
        if src not in LAYERS and src not in CORE:
            found.append(f"{start}: in no group of LAYERS; add it to the table")
            continue
        before = {start: ""}
        queue = deque([start])
        while queue:
            module = queue.popleft()
            for target in sorted(edges.get(module, ())):
                if target in before:
                    continue
                before[target] = module
                if not allowed(src, target):
                    path = [target]
                    while before[path[-1]]:
                        path.append(before[path[-1]])
                    found.append(" -> ".join(reversed(path)))
                    continue
                queue.append(target)
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected sets of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def markdown() -> str:
    """The dependency rule as README.md (and shared/DESIGN.md) show it."""
    rows = ["| place | may import (besides the core leaves) | why |", "|---|---|---|"]
    for layer in LAYERS.values():
        imports = "everything" if "*" in layer.imports else ", ".join(f"`{i}`" for i in sorted(layer.imports)) or "nothing"
        rows.append(f"| `{layer.place}` | {imports} | {layer.why} |")
    rows.append(f"| core leaves: {', '.join(f'`{c}`' for c in CORE)} | nothing of ap-gym above them | shared records, "
                "errors, paths, option base, text rules, prompt pieces, seeds, child processes, network rules, the "
                "training log format |")
    return "\n".join(rows)


# ----------------------------------------------------------------------------------- tests
def test_every_module_reaches_only_what_its_layer_allows():
    bad = violations(graph())
    assert not bad, "imports across the layers (tests/test_layers.py LAYERS):\n" + "\n".join(bad)


def test_no_import_cycle_between_modules():
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_groups_form_no_cycle():
    between: dict[str, set[str]] = defaultdict(set)
    for source, targets in graph().items():
        between[group(source)] |= {group(t) for t in targets if group(t) != group(source)}
    found = cycles(between)
    assert not found, "cycles between parts: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_readme_shows_the_table_the_test_uses():
    text = (ROOT / "README.md").read_text()
    start, end = "<!-- layers: rendered by tests/test_layers.py -->", "<!-- /layers -->"
    assert start in text and end in text, "README.md has no layers section"
    shown = text.split(start, 1)[1].split(end, 1)[0].strip()
    assert shown == markdown(), "README.md's layers section differs from LAYERS: paste `python tests/test_layers.py`"


def _planted(tmp_path: Path, file: str, line: str) -> dict[str, set[str]]:
    """The package's import graph with ``line`` appended to one of its files (a copy)."""
    import shutil

    copy = tmp_path / "ap_gym"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "static"))
    target = copy / file
    target.write_text(target.read_text() + "\n" + line + "\n")
    return graph(copy)


def test_the_check_fails_on_each_kind_of_hidden_edge(tmp_path):
    """A relay inside one group, an importlib edge, an entry-point string and a module cycle
    inside one group each fail it (each passed the check before this one)."""
    relay = violations(_planted(tmp_path / "a", "protocol/results.py", "from ap_gym.protocol import setting"))
    assert any(v.startswith("ap_gym.report") and "ap_gym.protocol.setting" in v for v in relay), relay
    lazy = violations(_planted(tmp_path / "b", "report/tables.py",
                               "def _later():\n    import importlib\n    return importlib.import_module('ap_gym.protocol.loop')"))
    assert any(v.startswith("ap_gym.report.tables -> ap_gym.protocol.loop") for v in lazy), lazy
    entry = violations(_planted(tmp_path / "c", "report/plots.py", "_ENTRY = 'ap_gym.policies.react:NoMemory'"))
    assert any(v.startswith("ap_gym.report.plots -> ap_gym.policies.react") for v in entry), entry
    loop = cycles(_planted(tmp_path / "d", "report/stats.py", "def _later():\n    from ap_gym.report import tables"))
    assert any({"ap_gym.report.stats", "ap_gym.report.tables"} <= set(c) for c in loop), loop
    assert not violations(graph()) and not cycles(graph())  # and the package as it is passes


def test_no_function_is_longer_than_a_screen():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1  # type: ignore[operator]  (always set by the parser)
                if length > 60:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, "functions over 60 lines:\n" + "\n".join(sorted(long))


if __name__ == "__main__":
    print(markdown())
