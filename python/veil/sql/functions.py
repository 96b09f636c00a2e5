"""What DuckDB's own catalog says about a function: aggregate? volatile?

The planner must know which calls aggregate rows (a block with one must not
be treated as per-row work) and which give a new value per call (they are
not constants the client may evaluate once). sqlglot knows only the
functions it has classes for: ``histogram``, ``product``, ``fsum``,
``sumkahan``, ``geomean`` ... parse as anonymous functions. So the answer
comes from ``duckdb_functions()`` of the DuckDB Veil runs the local plan in:

- aggregate: ``function_type = 'aggregate'``, and macros whose body calls
  one (``geomean`` is ``exp(avg(ln(x)))``);
- volatile: ``stability = 'VOLATILE'`` (``random``, ``uuid``, ``nextval``);
- varying between runs (a cached plan must not freeze them): volatile, or
  fixed only within one query (``now``, ``current_date``), or table functions.

``normalize_functions`` rewrites anonymous aggregate calls into
``exp.AnonymousAggFunc`` nodes right after parsing, so every later test for
``exp.AggFunc`` sees them, and flags calls whose class sqlglot would
misjudge as ``UnknownFunctionError`` (the planner then runs the query on
the client, the always-correct split).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from veil.cache_dir import cache_dir, write_cache_file


class UnknownFunctionError(Exception):
    """A call the planner cannot classify safely (internal: triggers the fallback)."""


@functools.cache
def aggregate_names() -> frozenset[str]:
    """Lower-case names of every aggregate function and aggregate macro DuckDB knows."""
    return _with_macros(lambda f: f.kind == "aggregate", aggregates=True)


@functools.cache
def table_function_names() -> frozenset[str]:
    """Lower-case names of DuckDB's table functions and table macros that are nothing else.

    (``histogram`` is an aggregate too, ``repeat`` a string function: only a
    call in a FROM clause says which is meant.)
    """
    others = _catalog_names(lambda f: f.kind not in ("table", "table_macro", "pragma"))
    return _catalog_names(lambda f: f.kind in ("table", "table_macro")) - others


@functools.cache
def volatile_names() -> frozenset[str]:
    """Lower-case names of functions that may return a new value on every call."""
    return _catalog_names(lambda f: f.stability == "VOLATILE")


@functools.cache
def varying_names() -> frozenset[str]:
    """Names of calls whose value may differ between two runs of one statement.

    Volatile functions, those fixed only within a query (``now``,
    ``current_date``), table functions (``read_csv`` of a file that changes)
    and macros calling any of them.
    """
    return _with_macros(
        lambda f: (
            f.stability in ("VOLATILE", "CONSISTENT_WITHIN_QUERY")
            or f.kind in ("table", "table_macro")
        ),
        aggregates=False,
    )


def is_repeatable(tree: exp.Expr) -> bool:
    """Whether running ``tree`` again means the same computation (its plan may be reused).

    A tree whose sequence calls (``nextval``) were replaced by their values
    (``veil.session.defaults.with_sequence_values``) is not: the next run takes new numbers.
    """
    if tree.meta.get("veil_sequences_called"):
        return False
    varying = varying_names()
    for node in tree.find_all(exp.Func):
        name = type(node).__name__
        if name.startswith(("Current", "Local")) or isinstance(
            node, exp.Rand | exp.Randn | exp.Uuid
        ):
            return False
        if function_name(node) in varying:
            return False
    return not any(isinstance(t.this, exp.Func) for t in tree.find_all(exp.Table))


def _catalog_names(condition: Callable[[_Function], bool]) -> frozenset[str]:
    return frozenset(f.name for f in _catalog() if condition(f))


def _with_macros(condition: Callable[[_Function], bool], *, aggregates: bool) -> frozenset[str]:
    """The functions meeting ``condition`` and the macros whose body calls one."""
    names = set(_catalog_names(condition))
    macros = [f for f in _catalog() if f.kind == "macro" and f.calls is not None]
    # macros may call macros: repeat until nothing changes
    changed = True
    while changed:
        changed = False
        for macro in macros:
            if macro.name in names:
                continue
            if (
                macro.unreadable
                or (aggregates and macro.aggregates)
                or (macro.calls or frozenset()) & names
            ):
                names.add(macro.name)
                changed = True
    return frozenset(names)


@dataclass(frozen=True)
class _Function:
    """One row of ``duckdb_functions()``, a macro's body read by sqlglot."""

    name: str  # lower case
    kind: str  # function_type
    stability: str
    calls: frozenset[str] | None = None  # a macro's: the names its body calls
    aggregates: bool = False  # a macro body's call sqlglot knows as an aggregate
    unreadable: bool = False  # sqlglot cannot parse the macro's body: assume the worst


@functools.cache
def _catalog() -> tuple[_Function, ...]:
    """DuckDB's functions, from the cache file of these versions if there is one.

    Reading the catalog and parsing ~600 macro bodies with sqlglot took 1.5-3 s
    of a fresh process's first query; the answer depends only on DuckDB's and
    sqlglot's versions, so one process computes it and later ones read it
    (``$VEIL_CACHE_DIR/functions-<duckdb>-<sqlglot>.json``).
    """
    path = cache_dir() / f"functions-{duckdb.__version__}-{sqlglot.__version__}.json"
    try:
        return tuple(
            _Function(n, k, s, None if c is None else frozenset(c), bool(a), bool(u))
            for n, k, s, c, a, u in json.loads(path.read_text())
        )
    except (OSError, ValueError, TypeError):
        pass  # no cache yet, or unreadable: compute it
    with duckdb.connect() as con:
        rows = con.sql(
            "SELECT DISTINCT function_name, function_type, stability, macro_definition "
            "FROM duckdb_functions()"
        ).fetchall()
    functions = tuple(
        _parsed_macro(str(n).lower(), str(k), str(s), body)
        if k == "macro" and body is not None
        else _Function(str(n).lower(), str(k), str(s))
        for n, k, s, body in rows
    )
    document = [
        [f.name, f.kind, f.stability, _sorted(f.calls), f.aggregates, f.unreadable]
        for f in functions
    ]
    write_cache_file(path, json.dumps(document))
    return functions


def _sorted(calls: frozenset[str] | None) -> list[str] | None:
    return None if calls is None else sorted(calls)


def _parsed_macro(name: str, kind: str, stability: str, body: str) -> _Function:
    try:
        tree = sqlglot.parse_one(body, read="duckdb")
    except ParseError:
        return _Function(name, kind, stability, frozenset(), unreadable=True)
    calls = list(tree.find_all(exp.Func))
    return _Function(
        name,
        kind,
        stability,
        frozenset(function_name(node) for node in calls),
        aggregates=any(isinstance(node, exp.AggFunc) for node in calls),
    )


def function_name(node: exp.Func) -> str:
    """The name a call is spelled with in SQL, lower case."""
    if isinstance(node, exp.Anonymous | exp.AnonymousAggFunc):
        return str(node.this).lower()
    return node.sql_name().lower()


def is_volatile(node: exp.Expr) -> bool:
    """Whether ``node`` is a call that may give a new value each time."""
    return isinstance(node, exp.Rand) or (
        isinstance(node, exp.Func) and function_name(node) in volatile_names()
    )


def normalize_functions(tree: exp.Expr) -> exp.Expr:
    """Anonymous aggregate calls become ``exp.AnonymousAggFunc`` (in place)."""
    aggregates = aggregate_names()
    for node in list(tree.find_all(exp.Anonymous)):
        if str(node.this).lower() in aggregates:
            node.replace(exp.AnonymousAggFunc(this=node.this, expressions=list(node.expressions)))
    return tree


def check_functions(tree: exp.Expr) -> None:
    """Raise ``UnknownFunctionError`` for a call sqlglot types as per-row that aggregates."""
    aggregates = aggregate_names()
    for node in tree.find_all(exp.Func):
        if isinstance(node, exp.AggFunc | exp.Anonymous | exp.Window):
            continue
        if function_name(node) in aggregates and node.find_ancestor(exp.AggFunc) is None:
            raise UnknownFunctionError(f"{node.sql('duckdb')}: an aggregate of unknown shape")
