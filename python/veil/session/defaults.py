"""What a write's omitted values become: DEFAULTs and identity columns' numbers.

A DEFAULT is computed by the client's catalogue, whose table carries it
(``catalog_column``), when it runs the INSERT to compute its
rows; an identity column's catalogue column has none, so the rows that omit
it come back null and ``number_rows`` gives them the next values of the
column's server counter, taken atomically (``veil.session.row_ids.allocate``):
concurrent inserts get distinct numbers, and a statement that fails skips
the numbers it took, as PostgreSQL's sequences do.
"""

from __future__ import annotations

import re
import weakref

import numpy as np
import pyarrow as pa
from sqlglot import exp

from veil.design.model import Column, TableDesign
from veil.errors import DomainError
from veil.exec.server import FetchStats, run_remote
from veil.session.constraints import not_null_violation
from veil.session.context import SessionContext
from veil.session.row_ids import allocate
from veil.sql.errors import GeneratedAlwaysError, QueryError, UnsupportedStatementError
from veil.sql.remote import ID_COUNTER_COLUMN


def catalog_column(column: Column) -> str:
    """A column of the catalogue's table, whose INSERT computes a row as DuckDB would.

    It checks NOT NULL and computes DEFAULT; an identity column is left nullable
    with no default, so the rows that omit it come back null, for the client to
    number from the server's counter (``number_rows``).
    """
    sql = f'"{column.label or column.name}" {column.type}'
    if column.identity:
        return sql
    if column.default is not None:
        sql += f" DEFAULT {column.default}"
    return sql + (" NOT NULL" if column.not_null else "")


def is_default(node: exp.Expr) -> bool:
    """``DEFAULT`` where a value goes (sqlglot reads it as a variable or a column)."""
    if isinstance(node, exp.Var):
        return node.name.upper() == "DEFAULT"
    if isinstance(node, exp.Column) and not node.table:
        name = node.this
        return isinstance(name, exp.Identifier) and not name.quoted and name.name == "DEFAULT"
    return False


def default_value(table: TableDesign, column: Column) -> exp.Expr:
    """The value ``SET column = DEFAULT`` writes."""
    if column.identity:
        raise UnsupportedStatementError(
            f"SET {column.name} = DEFAULT: Veil numbers identity columns of {table.name} "
            "on INSERT only; give the value"
        )
    if column.default is None:
        return exp.null()
    return exp.maybe_parse(column.default, dialect="duckdb")


def number_rows(
    session: SessionContext, table: TableDesign, tree: exp.Insert, rows: pa.Table
) -> pa.Table:
    """``rows`` (what ``tree`` inserts) with their omitted identity values numbered."""
    for column in (c for c in table.columns if c.identity):
        omitted = _omitted(tree, table, column, len(rows))
        values = rows.column(column.name)
        if column.identity == "always" and not omitted.all():
            raise GeneratedAlwaysError(
                f'cannot insert a non-DEFAULT value into column "{column.name}": it is '
                f"GENERATED ALWAYS AS IDENTITY; omit it or write DEFAULT"
            )
        given_null = np.asarray(values.is_null()) & ~omitted
        if given_null.any():
            raise not_null_violation(table.name, column.name)
        count = int(omitted.sum())
        if not count:
            continue
        first = allocate(session.backend, table, count, counter=column.sequence)
        _current.setdefault(session, {})[column.sequence] = first + count - 1  # currval
        numbers = values.fill_null(0).to_numpy().astype(np.int64)
        numbers[omitted] = np.arange(first, first + count, dtype=np.int64)
        try:
            typed = pa.array(numbers, pa.int64()).cast(values.type)
        except pa.ArrowInvalid:
            raise DomainError(
                f"the identity column {table.name}.{column.name} reached the largest value "
                f"its type {column.type} holds"
            ) from None
        rows = rows.set_column(rows.column_names.index(column.name), column.name, typed)
    return rows


def _omitted(tree: exp.Insert, table: TableDesign, column: Column, count: int) -> np.ndarray:
    """Which of the ``count`` inserted rows leave ``column`` to its default."""
    if tree.args.get("default"):  # DEFAULT VALUES
        return np.ones(count, dtype=bool)
    target = tree.this
    listed = (
        [c.name.lower() for c in target.expressions]
        if isinstance(target, exp.Schema)
        else [c.name for c in table.columns]
    )
    if column.name not in listed:
        return np.ones(count, dtype=bool)
    source = tree.expression
    if not isinstance(source, exp.Values):
        return np.zeros(count, dtype=bool)  # a query's rows give every listed column
    at = listed.index(column.name)
    flags = [
        is_default(row.expressions[at]) if isinstance(row, exp.Tuple) else False
        for row in source.expressions
    ]
    return np.array(flags, dtype=bool)


# -- sequences: nextval, currval, setval, pg_get_serial_sequence, RESTART --------------
#
# An identity column's counter is PostgreSQL's sequence ``{table}_{column}_seq``: the
# client knows it by that name, the server only by the counter's opaque table name
# (``Column.sequence``), so no sequence name reaches the server.

SEQUENCE_FUNCTIONS = ("nextval", "currval", "setval", "pg_get_serial_sequence")
SEQUENCES_CALLED = "veil_sequences_called"  # a tree's meta: its calls were evaluated
# the value each session's nextval/setval last gave each sequence (PostgreSQL's currval)
_current: weakref.WeakKeyDictionary[object, dict[str, int]] = weakref.WeakKeyDictionary()
_RESTART = re.compile(
    r"^\s*ALTER\s+(?:TABLE\s+(?:ONLY\s+)?(?P<table>\S+)\s+ALTER\s+(?:COLUMN\s+)?(?P<column>\S+)"
    r"|SEQUENCE\s+(?P<sequence>\S+))\s+RESTART(?:\s+(?:WITH\s+)?(?P<value>[-+]?\d+))?\s*;?\s*$",
    re.IGNORECASE,
)


def sequence_name(table: str, column: str) -> str:
    """PostgreSQL's name of the sequence behind a serial or identity column."""
    return f"{table}_{column}_seq"


def sequence_column(session: SessionContext, name: str) -> tuple[TableDesign, Column]:
    """The identity column whose sequence is ``name`` (``[public.]t_c_seq``)."""
    bare = name.split(".")[-1].strip('"').lower()
    for table in session.design.tables.values():
        for column in table.columns:
            if column.sequence and sequence_name(table.name, column.name) == bare:
                return table, column
    raise QueryError(f'relation "{name}" does not exist (no serial or identity column has it)')


_SEQUENCE_CALL = re.compile(rf"\b(?:{'|'.join(SEQUENCE_FUNCTIONS)})\s*\(", re.IGNORECASE)


def mentions_sequences(sql: str) -> bool:
    """Whether ``sql``'s text may call a sequence function (a string that merely spells
    one counts too): read before admitting it, since admitting evaluates the calls."""
    return _SEQUENCE_CALL.search(sql) is not None


def calls_sequences(tree: exp.Expr) -> bool:
    """Whether ``tree`` calls a sequence function (its value then changes each run)."""
    return any(_sequence_call(node) for node in tree.find_all(exp.Anonymous))


def with_sequence_values(session: SessionContext, tree: exp.Expr) -> exp.Expr:
    """``tree`` with each sequence function's call replaced by its value, in the order
    PostgreSQL evaluates them (VALUES row by row), each ``nextval`` taking one number.

    A call in a query over rows would be evaluated once per row: refused, since Veil
    evaluates it once (an identity column numbers rows on INSERT instead).
    """
    calls = [node for node in tree.find_all(exp.Anonymous) if _sequence_call(node)]
    if not calls:
        return tree
    replaced = tree.copy()
    replaced.meta[SEQUENCES_CALLED] = True  # never cached: the next run takes new numbers
    for node in [n for n in replaced.find_all(exp.Anonymous) if _sequence_call(n)]:
        select = node.find_ancestor(exp.Select)
        if select is not None and select.args.get("from_") is not None:
            raise UnsupportedStatementError(
                f"{node.name}() in a query over rows is not supported: Veil evaluates it once "
                "per statement; call it in VALUES or a SELECT without FROM, or number rows "
                "with a serial or identity column"
            )
        node.replace(_sequence_value(session, node))
    return replaced


def _sequence_call(node: exp.Anonymous) -> bool:
    return str(node.this).lower() in SEQUENCE_FUNCTIONS


def _constant(node: exp.Expr, what: str) -> object:
    if isinstance(node, exp.Literal):
        return node.name if node.is_string else int(node.name)
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Cast):
        return _constant(node.this, what)
    raise UnsupportedStatementError(f"{what} must be a constant (or a parameter)")


def _sequence_value(session: SessionContext, node: exp.Anonymous) -> exp.Expr:
    name = str(node.this).lower()
    args = [_constant(a, f"an argument of {name}()") for a in node.expressions]
    if name == "pg_get_serial_sequence":
        table = session.design.tables.get(str(args[0]).split(".")[-1].strip('"').lower())
        column = table.column(str(args[1]).lower()) if table is not None else None
        if table is None or column is None:
            raise QueryError(f"column {args[1]} of relation {args[0]} does not exist")
        if not column.sequence:
            return exp.null()
        return exp.Literal.string(f"public.{sequence_name(table.name, column.name)}")
    table, column = sequence_column(session, str(args[0]))
    current = _current.setdefault(session, {})
    key = column.sequence
    if name == "nextval":
        current[key] = allocate(session.backend, table, 1, counter=column.sequence)
    elif name == "setval":
        value, called = int(str(args[1])), len(args) < 3 or bool(args[2])
        restart(session, column, value + 1 if called else value)
        if called:  # as PostgreSQL's: setval(s, n, false) leaves currval as it was
            current[key] = value
        return exp.cast(exp.Literal.number(value), exp.DataType.build("BIGINT"))
    elif key not in current:  # currval
        raise QueryError(f'currval of sequence "{args[0]}" is not yet defined in this session')
    return exp.cast(exp.Literal.number(current[key]), exp.DataType.build("BIGINT"))


def restart(session: SessionContext, column: Column, next_value: int) -> None:
    """Make ``next_value`` the next number ``column``'s counter hands out; at once, outside
    any transaction, as PostgreSQL's setval (its sequences are not transactional)."""
    backend = session.backend.autonomous() if session.backend.in_transaction else session.backend
    update = exp.update(
        exp.to_table(column.sequence), {ID_COUNTER_COLUMN: exp.Literal.number(next_value)}
    )
    run_remote(update, backend, FetchStats())


def restart_statement(session: SessionContext, sql: str) -> bool:
    """``ALTER TABLE t ALTER [COLUMN] c RESTART [[WITH] n]`` or ``ALTER SEQUENCE s RESTART
    [[WITH] n]``, run; False if ``sql`` is neither. (Without WITH: from 1.)"""
    found = _RESTART.match(sql)
    if found is None:
        return False
    if found["sequence"]:
        table, column = sequence_column(session, found["sequence"])
    else:
        table = session.design.table(found["table"].strip('"').lower())
        named = table.column(found["column"].strip('"').lower())
        if named is None or not named.identity:
            raise QueryError(
                f'column "{found["column"]}" of relation "{table.name}" is not an identity column'
            )
        column = named
    restart(session, column, int(found["value"]) if found["value"] else 1)
    return True
