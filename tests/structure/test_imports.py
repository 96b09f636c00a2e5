"""The package tree is the architecture: no import cycles, tooling stays out of shipping code.

Every ``import`` in every module under ``python/veil`` (the shipping package)
and ``python/veil_dev`` (the tooling of a checkout, not in the wheel) is read
with ``ast`` (function-level and ``TYPE_CHECKING`` imports included: a lazy
import is still a dependency). A module belongs to its *area*: the package it
sits in (``veil.sql``, ``veil.kv``, ``veil_dev.bench``, ...) or, for a
top-level module, the module itself (``veil.dbapi``). The tests check the graph
of areas and of modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SOURCE = Path(__file__).resolve().parents[2] / "python"

# What ``pip install veil`` ships.
SHIPPING = "veil"
# Benchmarks, TPC-H, private test servers and ``veil demo``: run by developers from a
# checkout. The tooling may import veil; no module of veil imports the tooling, not even
# the command line, which looks its commands up by name (``veil.cli.TOOLING_MODULE``).
TOOLING = "veil_dev"
PACKAGES = (SHIPPING, TOOLING)
# The one crypto module the (untrusted, keyless) server side may import.
BACKEND_CRYPTO = "veil.crypto.server_ops"


@dataclass(frozen=True)
class Edge:
    """``importer`` (a module) imports ``imported`` (a module or package) at ``line``."""

    importer: str
    imported: str
    line: int

    def __str__(self) -> str:
        return f"{area(self.importer)} -> {area(self.imported)}: {self.importer}:{self.line} imports {self.imported}"


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def area(module: str) -> str:
    """``veil.sql.passes.find_scans`` -> ``veil.sql``; ``veil.dbapi`` -> ``veil.dbapi``."""
    return ".".join(module.split(".")[:2])


def top_level(module: str) -> str:
    """``veil.sql.planner`` -> ``veil``; ``veil_dev.bench.tpch`` -> ``veil_dev``."""
    return module.partition(".")[0]


def modules() -> dict[str, Path]:
    paths = sorted(p for name in PACKAGES for p in (SOURCE / name).rglob("*.py"))
    return {module_name(path): path for path in paths}


def module_names() -> set[str]:
    """Python modules and the native one (known by its stubs, ``veil/_native.pyi``)."""
    return {module_name(p) for name in PACKAGES for p in (SOURCE / name).rglob("*.py*")}


def imports_of(module: str, path: Path, known: Iterable[str]) -> Iterator[Edge]:
    """Every Veil (or tooling) module or package that ``module`` imports, wherever the
    import stands."""
    known = set(known)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            # ``from veil.kv import store`` imports a module, ``from veil.kv import Store`` a name.
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for name in sorted(set(names)):
            if top_level(name) in PACKAGES:
                yield Edge(module, name, node.lineno)


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def all_edges() -> list[Edge]:
    known = module_names()
    return [edge for name, path in modules().items() for edge in imports_of(name, path, known)]


def cycle_edges(edges: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """The edges that lie on a cycle: both ends in one strongly connected component."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    component = _components(graph)
    return {(a, b) for a, targets in graph.items() for b in targets if component[a] == component[b]}


def _components(graph: dict[str, set[str]]) -> dict[str, int]:
    """Tarjan's strongly connected components: node -> component number."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    component: dict[str, int] = {}

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target not in component:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            while True:
                member = stack.pop()
                component[member] = index[node]
                if member == node:
                    break

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return component


def area_cycle_edges() -> list[Edge]:
    edges = [e for e in all_edges() if area(e.importer) != area(e.imported)]
    cyclic = cycle_edges((area(e.importer), area(e.imported)) for e in edges)
    return [e for e in edges if (area(e.importer), area(e.imported)) in cyclic]


def _listing(edges: Iterable[Edge]) -> str:
    return "\n  " + "\n  ".join(sorted(map(str, edges)))


def test_the_walk_sees_every_kind_of_import() -> None:
    found = modules()
    assert {"veil", "veil.dbapi", "veil.sql.passes", "veil.kv.backends.base"} <= set(found)
    edges = {(e.importer, e.imported) for e in all_edges()}
    assert ("veil", "veil.dbapi") in edges  # module level, from-import of a name
    assert ("veil.backends.arrow_functions", BACKEND_CRYPTO) in edges  # inside a function


def test_a_function_level_circle_is_found() -> None:
    # the walk sees an import inside a function, so a circle closed by one is a circle
    edges = {(e.importer, e.imported) for e in all_edges()}
    assert ("veil.backends.arrow_functions", BACKEND_CRYPTO) in edges
    assert cycle_edges([*edges, (BACKEND_CRYPTO, "veil.backends.arrow_functions")])


def test_cycle_edges_finds_exactly_the_edges_on_cycles() -> None:
    edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d"), ("x", "a")]
    assert cycle_edges(edges) == {("a", "b"), ("b", "c"), ("c", "a"), ("d", "e"), ("e", "d")}
    assert cycle_edges([("a", "b"), ("b", "c")]) == set()


def test_no_cycles_between_packages() -> None:
    offending = area_cycle_edges()
    assert not offending, "import cycles between Veil's packages:" + _listing(offending)


def module_cycle_edges() -> list[Edge]:
    """Imports between two modules of one import circle (a package's ``__init__`` counts
    as the module it is)."""
    edges = [e for e in all_edges() if e.importer != e.imported]
    cyclic = cycle_edges((e.importer, e.imported) for e in edges)
    return [e for e in edges if (e.importer, e.imported) in cyclic]


def test_no_cycles_between_modules() -> None:
    # Every import counts, inside a function or under TYPE_CHECKING too: a function-level
    # import that closes a circle hides a knot (each side needs the other) instead of
    # untying it. Where a module needs to call back into its caller it gets a Protocol
    # (``veil.session.context``, ``veil.cost.context``, ``veil.sql.rewrite_server``).
    offending = module_cycle_edges()
    assert not offending, "import cycles between Veil's modules:" + _listing(offending)


def imports_of_tooling(edges: Iterable[Edge]) -> list[Edge]:
    """The edges from a shipping module to the tooling (the other way is allowed)."""
    return [
        e for e in edges if top_level(e.importer) == SHIPPING and top_level(e.imported) == TOOLING
    ]


def test_shipping_code_never_imports_tooling() -> None:
    offending = imports_of_tooling(all_edges())
    assert not offending, f"{SHIPPING} imports the tooling ({TOOLING}):" + _listing(offending)


def test_the_walk_sees_the_tooling_and_its_imports_of_veil() -> None:
    # the check above is only as good as the walk: it must see tooling modules and edges
    edges = all_edges()
    assert {"veil_dev.bench.cli", "veil_dev.servers.postgres", "veil_dev.demo"} <= set(modules())
    pairs = {(e.importer, e.imported) for e in edges}
    assert ("veil_dev.demo", "veil_dev.bench.compare") in pairs
    assert ("veil_dev.demo", "veil.session.session") in pairs
    assert not imports_of_tooling(e for e in edges if e.importer == "veil_dev.demo")
    assert imports_of_tooling([Edge("veil.cli", "veil_dev.cli", 1)])


def test_backends_import_only_keyless_crypto() -> None:
    offending = [
        e
        for e in all_edges()
        if area(e.importer) == "veil.backends"
        and area(e.imported) == "veil.crypto"
        and e.imported != BACKEND_CRYPTO
    ]
    assert not offending, f"backends may import only {BACKEND_CRYPTO} from crypto:" + _listing(
        offending
    )
