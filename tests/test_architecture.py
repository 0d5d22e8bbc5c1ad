"""The house rules of imports (docs/architecture.md), checked on the source with ``ast``.

- No import circles anywhere in the package: every ``import`` counts, at the top of a module,
  inside a function (a function-level import that closes a circle is a circle postponed, not
  removed) or under ``if TYPE_CHECKING:`` (a circle for the reader and the type checker). One
  exception: a module may name, for annotations only (under TYPE_CHECKING), a type its own
  package's ``__init__`` defines (``exporter.sim.Simulation`` in the fake library's modules): the
  package is the room that holds the module, its front door, not a neighbour.
- One door into the simulator: outside ``exporter.sim`` itself, only the backend adapter
  (``exporter.backend.sim``) imports ``exporter.sim``. The CLI reaches it through that adapter
  (``--simulate``); the simulator's fake DCGM bindings (``exporter/sim/fakedcgm/bindings``, imported
  by bare name as DCGM's are) belong to the simulator.

Run ``python3 tests/test_architecture.py`` to print the graph's circles and door crossings.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "exporter"
SIM = "exporter.sim"
SIM_DOORS = {"exporter.backend.sim"}  # the backend adapter: the one exporter module that imports the simulator
BARE_NAME_DIRS = (PACKAGE / "sim" / "fakedcgm" / "bindings",)  # DCGM-named modules, not package modules


def module_files() -> dict[str, Path]:
    """{dotted module name: file} of every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(parent in BARE_NAME_DIRS for parent in path.parents):
            continue
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool):
    """(imported name, line, kind) of every import statement; kind: "top" (runs at import),
    "function" (runs when called) or "type" (under TYPE_CHECKING: never runs)."""
    def visit(node: ast.AST, top: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for inner in child.body:
                    yield from visit(ast.Module(body=[inner], type_ignores=[]), "type")
                for other in child.orelse:
                    yield from visit(ast.Module(body=[other], type_ignores=[]), top)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, child.lineno, top
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    package = package[: len(package) - (child.level - 1)]
                    base = ".".join(package + ([base] if base else []))
                for alias in child.names:
                    yield (f"{base}.{alias.name}" if alias.name != "*" else base), child.lineno, top
            else:
                function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                yield from visit(child, "function" if function and top == "top" else top)

    yield from visit(tree, "top")


RANK = {"top": 0, "function": 1, "type": 2}


@functools.lru_cache(maxsize=1)
def import_graph() -> dict[str, dict[str, tuple[int, str]]]:
    """{module: {imported package module: (line, kind)}}: ``from a.b import c`` is an edge to a.b.c
    when c is a module, else to a.b; modules outside the package are left out. Of several imports
    of one module the one that runs earliest is kept (top, then function, then type)."""
    files = module_files()
    graph: dict[str, dict[str, tuple[int, bool]]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges: dict[str, tuple[int, str]] = {}
        for name, line, kind in _imports(tree, module, path.name == "__init__.py"):
            target = name
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != module:
                old = edges.get(target)
                if old is None or RANK[kind] < RANK[old[1]]:
                    edges[target] = (line, kind)
        graph[module] = edges
    return graph


def counted(graph):
    """The graph without type-only imports of a module's own enclosing package (the exception above)."""
    return {module: {target: edge for target, edge in edges.items()
                     if not (edge[1] == "type" and module.startswith(target + "."))}
            for module, edges in graph.items()}


def cycles(graph: dict[str, dict[str, tuple[int, str]]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))

    def connect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def describe(component: list[str], graph) -> str:
    members = set(component)
    where = {"top": "", "function": ", in a function", "type": ", under TYPE_CHECKING"}
    edges = [f"{a} -> {b} (line {line}{where[kind]})"
             for a in component for b, (line, kind) in sorted(graph[a].items()) if b in members]
    return "; ".join(edges)


def door_crossings(graph) -> list[str]:
    """Imports of exporter.sim from outside it, other than through the backend adapter."""
    return [f"{module} -> {target} (line {line})"
            for module, edges in sorted(graph.items())
            if not (module == SIM or module.startswith(SIM + ".")) and module not in SIM_DOORS
            for target, (line, _) in sorted(edges.items())
            if target == SIM or target.startswith(SIM + ".")]


def test_the_graph_is_the_package():
    """The builder sees the modules and edges it must: a check on the checker."""
    graph = import_graph()
    assert "exporter.cli" in graph and "exporter.sim.fakedcgm.spec" in graph
    assert not any(name.startswith("exporter.sim.fakedcgm.bindings") for name in graph)
    # cli imports its commands by name (importlib), errors directly; the adapter imports the simulator.
    assert "exporter.errors" in graph["exporter.cli"]
    assert any(target.startswith(SIM) for target in graph["exporter.backend.sim"])
    # a function-level import is an edge too, marked as such; so is one under TYPE_CHECKING
    assert graph["exporter.commands"]["exporter.backend.sim"][1] == "function"
    assert graph["exporter.sim.setup"]["exporter.sim.state"][1] == "top"
    assert graph["exporter.sim.fakelib"]["exporter.sim"][1] == "type"
    assert "exporter.sim" not in counted(graph)["exporter.sim.fakelib"]


def test_no_import_circles():
    graph = counted(import_graph())
    found = cycles(graph)
    assert not found, "import circles:\n" + "\n".join(describe(c, graph) for c in found)


def test_cycle_finder_finds_a_circle():
    graph = {"a": {"b": (1, "top")}, "b": {"c": (2, "function")}, "c": {"a": (3, "type")}, "d": {"a": (1, "top")}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert "b -> c (line 2, in a function)" in describe(["a", "b", "c"], graph)
    # a type-only import of the module's own package is left out; one of a neighbour is not
    assert counted({"p.m": {"p": (1, "type"), "q": (2, "type")}}) == {"p.m": {"q": (2, "type")}}


def test_one_door_into_the_simulator():
    crossings = door_crossings(import_graph())
    assert not crossings, "exporter modules that import the simulator other than through exporter.backend.sim:\n" + \
        "\n".join(crossings)


if __name__ == "__main__":
    g = counted(import_graph())
    for component in cycles(g):
        print("circle:", describe(component, g))
    for crossing in door_crossings(g):
        print("door:", crossing)
