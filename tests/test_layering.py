"""The architecture, checked: which package may import which, and no import cycles.

Layers, top to bottom: the front ends (``app``), the tools (``tools.<name>``, one package per tool, none
importing another), the services (``experiments``: runs; ``analysis``: what a client script configures;
``swarm``: live swarm servers, which reads the runs' registry; ``gpus``), the foundations (``agentjet``: the
one place that knows AgentJet; ``hosts``: where things run), and ``core``. A package imports only from the
layers below it (and from itself). Only the MCP front end imports the MCP SDK. Imports under
``if TYPE_CHECKING:`` count too: a type is a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "skill_server"

#: Package -> the packages it may import from (besides itself). ``tools`` stands for each tool package.
ALLOWED: dict[str, set[str]] = {
    "app": {"tools", "experiments", "environments", "analysis", "swarm", "gpus", "agentjet", "hosts", "core"},
    "tools": {"experiments", "environments", "analysis", "swarm", "gpus", "agentjet", "hosts", "core"},
    "environments": {"experiments", "analysis", "gpus", "agentjet", "hosts", "core"},
    "swarm": {"experiments", "agentjet", "hosts", "core"},
    "experiments": {"gpus", "agentjet", "hosts", "core"},
    "analysis": {"agentjet", "core"},
    "gpus": {"hosts", "core"},
    "agentjet": {"core"},
    "hosts": {"core"},
    "core": set(),
}
#: Third-party packages only one module may import.
EXCLUSIVE = {"mcp": "skill_server.app.mcp_server", "uvicorn": "skill_server.app.mcp_server"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(module: str, path: Path, *, runtime_only: bool = False) -> set[str]:
    """Absolute names this module imports (``from a.b import c`` gives ``a.b.c`` when that is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    if runtime_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped |= {id(n) for n in ast.walk(node)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            out.add(base)
            out |= {f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES}
    return out


def _package(module: str) -> str | None:
    """The layering unit of a module: ``tools.<name>`` for tools, else its top package under skill_server."""
    parts = module.split(".")
    if len(parts) < 2:
        return None  # skill_server itself, __main__ is handled as app
    if parts[1] == "__main__":
        return "app"
    if parts[1] == "tools" and len(parts) >= 3:
        return f"tools.{parts[2]}"
    return parts[1]


def _layer(package: str) -> str:
    return "tools" if package.startswith("tools.") else package


def test_every_package_has_a_layer():
    unknown = sorted({_layer(p) for m in MODULES if (p := _package(m)) and p != "tools"} - set(ALLOWED))
    assert not unknown, f"packages without a place in tests/test_layering.py's ALLOWED: {unknown}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_follow_the_layers(module: str):
    own = _package(module)
    if own is None or own == "tools":
        return
    bad = []
    for name in sorted(_imports(module, MODULES[module])):
        if name == "skill_server" or not name.startswith("skill_server."):
            top = name.split(".")[0]
            if top in EXCLUSIVE and EXCLUSIVE[top] != module:
                bad.append(f"{name} (only {EXCLUSIVE[top]} imports {top})")
            continue
        other = _package(name)
        if other is None or other == own or other == "tools":
            continue
        if _layer(other) == "tools" and _layer(own) == "tools":
            bad.append(f"{name} (tool packages never import one another: move what they share to a service)")
        elif _layer(other) not in ALLOWED[_layer(own)]:
            bad.append(f"{name} ({_layer(own)} may not import {_layer(other)})")
    assert not bad, f"{module} imports: " + "; ".join(bad)


def import_cycles(*, runtime_only: bool = True) -> list[list[str]]:
    """Strongly connected groups of more than one module in the import graph (Tarjan): the runtime one, or with
    the imports made for type checkers only."""
    graph = {m: sorted(n for n in _imports(m, p, runtime_only=runtime_only) if n in MODULES and n != m)
             for m, p in MODULES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                group.append(item)
                if item == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return groups


def _ignoring_package_inits(group: list[str]) -> bool:
    """A package importing its own submodule that imports the package back (``__init__`` re-exports) is the
    one cycle Python resolves by design; everything else is a design circle."""
    return len(group) == 2 and any(MODULES[m].name == "__init__.py" and other.startswith(m + ".")
                                    for m in group for other in group)


def test_no_import_cycles():
    cycles = [g for g in import_cycles() if not _ignoring_package_inits(g)]
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(g) for g in cycles)


def test_the_analysis_package_has_no_type_circles():
    """Its data types live in ``analysis.script.model``: no module of the package imports another one back, even
    for a type checker (a type is a dependency)."""
    cycles = [g for g in import_cycles(runtime_only=False)
              if any(m.startswith("skill_server.analysis.") for m in g) and not _ignoring_package_inits(g)]
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(g) for g in cycles)
