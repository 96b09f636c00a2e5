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

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError


class UnknownFunctionError(Exception):
    """A call the planner cannot classify safely (internal: triggers the fallback)."""


@functools.cache
def aggregate_names() -> frozenset[str]:
    """Lower-case names of every aggregate function and aggregate macro DuckDB knows."""
    return _with_macros("function_type = 'aggregate'", aggregates=True)


@functools.cache
def table_function_names() -> frozenset[str]:
    """Lower-case names of DuckDB's table functions and table macros that are nothing else.

    (``histogram`` is an aggregate too, ``repeat`` a string function: only a
    call in a FROM clause says which is meant.)
    """
    others = _catalog_names("function_type NOT IN ('table', 'table_macro', 'pragma')")
    return _catalog_names("function_type IN ('table', 'table_macro')") - others


@functools.cache
def volatile_names() -> frozenset[str]:
    """Lower-case names of functions that may return a new value on every call."""
    return _catalog_names("stability = 'VOLATILE'")


@functools.cache
def varying_names() -> frozenset[str]:
    """Names of calls whose value may differ between two runs of one statement.

    Volatile functions, those fixed only within a query (``now``,
    ``current_date``), table functions (``read_csv`` of a file that changes)
    and macros calling any of them.
    """
    return _with_macros(
        "stability IN ('VOLATILE', 'CONSISTENT_WITHIN_QUERY') OR function_type IN ('table', 'table_macro')",
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


def _catalog_names(condition: str) -> frozenset[str]:
    with duckdb.connect() as con:
        rows = con.sql(
            f"SELECT DISTINCT function_name FROM duckdb_functions() WHERE {condition}"
        ).fetchall()
    return frozenset(str(r[0]).lower() for r in rows)


def _with_macros(condition: str, *, aggregates: bool) -> frozenset[str]:
    """The functions meeting ``condition`` and the macros whose body calls one."""
    names = set(_catalog_names(condition))
    with duckdb.connect() as con:
        macros = con.sql(
            "SELECT DISTINCT function_name, macro_definition FROM duckdb_functions() "
            "WHERE function_type = 'macro' AND macro_definition IS NOT NULL"
        ).fetchall()
    # macros may call macros: repeat until nothing changes
    changed = True
    while changed:
        changed = False
        for name, body in macros:
            if str(name).lower() not in names and _calls_any(str(body), names, aggregates):
                names.add(str(name).lower())
                changed = True
    return frozenset(names)


def _calls_any(body: str, names: set[str], aggregates: bool) -> bool:
    try:
        tree = sqlglot.parse_one(body, read="duckdb")
    except ParseError:
        return True  # unreadable: assume the worst
    return any(
        (aggregates and isinstance(node, exp.AggFunc)) or function_name(node) in names
        for node in tree.find_all(exp.Func)
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
