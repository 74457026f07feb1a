"""The package's layers, read from its source: the import graph between ap-gym's parts has
no cycle and no edge that shared/DESIGN.md's rules do not allow, and no function is longer
than a screen.

Every import counts, at module level or inside a function: an import deferred to call
time is still a dependency, and deferring it was how cycles hid before.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ap_gym"

#: Modules anyone may import: they import nothing of ap-gym above them.
CORE = {"errors", "paths", "types", "text", "prompts", "seeding", "options", "processes", "net"}
#: Group -> the groups (or "group.module" for one module of it) it may import, besides CORE.
RULES: dict[str, set[str]] = {
    "envs": set(),
    "wrappers": set(),
    "backbones": set(),
    "memory": set(),
    "policies": {"backbones", "memory"},
    "rollout": {"wrappers"},
    "protocol": {"envs", "wrappers", "backbones", "memory", "policies", "rollout", "vector"},
    # the audit's judge labeller calls a model; everything else of a report is results
    "report": {"protocol.results", "backbones"},
    "view": {"protocol.results", "report"},
    "studies": {"envs", "wrappers", "backbones", "memory", "policies", "rollout", "vector", "protocol", "report"},
    "demo": {"envs", "wrappers", "backbones", "memory", "policies", "rollout", "vector", "protocol", "report"},
    "training": {"envs", "wrappers", "backbones", "policies", "rollout", "vector"},
    "vector": {"wrappers"},
    "cli": {"*"},
    "": {"envs", "rollout", "wrappers", "vector"},  # the package's __init__: its public face
}


def _group(module: str) -> str:
    parts = module.split(".")[1:]
    return parts[0] if parts else ""


def _imports(path: Path) -> set[str]:
    module = "ap_gym." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")
    if module == "ap_gym.__init__":
        module = "ap_gym"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("ap_gym")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("ap_gym"):
                out.add(name)
                out |= {f"{name}.{a.name}" for a in node.names if (PACKAGE / Path(*f"{name}.{a.name}".split(".")[1:])).with_suffix(".py").exists()}
    return out


def graph() -> dict[str, set[str]]:
    """Module -> the ap_gym modules it imports (every file of the package)."""
    edges = {}
    for path in PACKAGE.rglob("*.py"):
        name = "ap_gym." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        edges[name.removesuffix(".__init__")] = _imports(path)
    return edges


def _allowed(source: str, target: str) -> bool:
    src, dst = _group(source), _group(target)
    if target == "ap_gym":  # the package's face registers the envs: what it imports, the importer may
        return src == "" or all(_allowed(source, f"ap_gym.{g}") for g in RULES[""])
    if dst in CORE or src == dst:
        return True
    if src in CORE:
        return dst in CORE
    allowed = RULES.get(src, set())
    sub = ".".join(target.split(".")[1:3])
    return "*" in allowed or dst in allowed or sub in allowed


def test_every_import_follows_the_layer_rules():
    bad = sorted(f"{s} -> {t}" for s, targets in graph().items() for t in targets if not _allowed(s, t))
    assert not bad, "imports across the layers of shared/DESIGN.md:\n" + "\n".join(bad)


def test_no_cycle_between_the_parts():
    edges: dict[str, set[str]] = defaultdict(set)
    for s, targets in graph().items():
        for t in targets:
            if _group(s) != _group(t):
                edges[_group(s)].add(_group(t))
    seen: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(edges[node]):
            assert seen.get(nxt) != 1, "import cycle: " + " -> ".join([*path, node, nxt])
            if nxt not in seen:
                visit(nxt, [*path, node])
        seen[node] = 2

    for node in sorted(edges):
        if node not in seen:
            visit(node, [])


def test_no_function_is_longer_than_a_screen():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if length > 60:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, "functions over 60 lines:\n" + "\n".join(sorted(long))
