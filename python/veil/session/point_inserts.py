"""One-row INSERT ... VALUES planned once per statement shape (issue 41).

``INSERT INTO history (tid, bid, aid, delta, mtime) VALUES (?, ?, ?, ?, CURRENT_TIMESTAMP)``
used to pay, every run, for parsing and binding the statement and for the
client's catalogue DuckDB making the row (BEGIN, the INSERT, a SELECT of the
row, ROLLBACK: ~3 ms of pgbench's ~11 ms INSERT). Here a shape (its text and
its parameters' types, under one design version) keeps where each of the
table's columns takes its value from:

- a bare parameter whose value the column's type holds exactly (an int in an
  integer type's range, a str in a VARCHAR) goes into the row as it is, with
  no DuckDB at all;
- a constant that means the same every run (a literal, ``'a' || 'b'``) is
  computed once, by the catalogue DuckDB, when the shape is kept;
- ``CURRENT_TIMESTAMP`` into a TIMESTAMP or TIMESTAMPTZ column is read from
  Python's clock, in the catalogue's time zone (a DuckDB statement costs
  0.5-3 ms here, most of what is left of the INSERT's own work);
- everything else (a DEFAULT, a parameter the column casts, such as a str
  into a DATE) is cast to the column's type in one SELECT on the catalogue
  DuckDB per run, the cast DuckDB's INSERT applies.

The row then takes the general path's own steps (``dml.write_new_rows``):
identity numbering, NOT NULL and CHECK, domains, foreign keys, one
transaction under the onion layers, with ``dml.retried`` around it. A value
the SELECT refuses (``'x'`` into an INTEGER) falls back to the general path,
which refuses it in DuckDB's words; nothing was written by then.

Only the plainest shape is kept: one row of VALUES into a table, no ON
CONFLICT, RETURNING, WITH, OR REPLACE, BY NAME or sequence call, each value a
bare parameter, DEFAULT or a constant without columns or subqueries, and no
column named twice. Everything else runs ``veil.session.dml`` as before.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import duckdb
import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import SqlglotError

from veil.design.model import Column, TableDesign
from veil.encoding import exact_arrow
from veil.errors import VeilError
from veil.exec.server import FetchStats
from veil.session import dml
from veil.session.context import SessionContext
from veil.session.defaults import calls_sequences, is_default, mentions_sequences, number_rows
from veil.session.plan_cache import Key, Recent
from veil.session.result import Result
from veil.sql.functions import is_repeatable
from veil.sql.parse import literal
from veil.sql.slots import PARAM

_KEPT_SIZE = 256
# the arguments an INSERT of this path may have (sqlglot's names); any other set refuses it
_PLAIN_ARGS = frozenset({"this", "expression"})
# how far apart Python's clock and the catalogue's CURRENT_TIMESTAMP may be, read together
_CLOCKS_AGREE = dt.timedelta(seconds=5)


@dataclass(frozen=True)
class Source:
    """Where one column of the new row comes from."""

    param: int | None = None  # a bare parameter's index
    negated: bool = False  # ``-?``: the parameter's value negated (``-2345`` written in)
    fixed: pa.Array | None = None  # a constant, computed once (one value)
    sql: str | None = None  # DuckDB SQL of the value, cast to the column's type, per run
    clock: ZoneInfo | None = None  # CURRENT_TIMESTAMP, read in the catalogue's time zone


@dataclass
class PointInsert:
    """A one-row INSERT's shape: the table and each column's source."""

    table: TableDesign  # as planned (its server tables: a rebuild makes another)
    stamp: int  # the design file's version it was planned on
    tree: exp.Insert  # as first bound: its column list and DEFAULTs (``number_rows``)
    schema: pa.Schema  # the rows' Arrow types, as the catalogue's INSERT makes them
    sources: list[Source]


class _Fallback(Exception):
    """The kept shape cannot make this row (design moved, a value to refuse): nothing written."""


# the INSERT shapes of this process, by client directory, access and shape key (None: a
# statement this path does not take)
_KEPT: Recent[tuple[object, ...], PointInsert | None] = Recent(_KEPT_SIZE)


def kept(scope: object, shape: Key) -> PointInsert | None:
    """The INSERT kept for a statement's ``shape`` (``answer``'s key; None: none yet, or
    not one this path takes)."""
    return _KEPT.peek((scope, *shape))


def answer(
    session: SessionContext,
    sql: str,
    params: Sequence[object],
    key: tuple[object, ...],
    fits: Callable[[], bool] | None,
) -> Result | None:
    """The INSERT run as its kept shape; None: the general path runs it (nothing written).

    ``key``: the shape's key, as ``veil.session.point_writes.answer`` keeps its writes
    by (scope, text, parameter types, design version); ``fits`` as there.
    """
    known, insert = _KEPT.get(key)
    if known and insert is None:
        return None
    try:
        if insert is None:
            if fits is not None and not fits():
                return None
            if mentions_sequences(sql):
                # admitting a statement evaluates its sequence calls: refused after that, it
                # would take new numbers again on the general path (nextval gives one a call)
                _KEPT.put(key, None)
                return None
            insert = prepared(session, session.admitted(sql, list(params)))
            _KEPT.put(key, insert)
            if insert is None:
                return None
        return dml.retried(session, "INSERT", insert.table, lambda: _run(session, insert, params))
    except _Fallback:
        _KEPT.discard(key)
        return None


def prepared(session: SessionContext, tree: exp.Expr) -> PointInsert | None:
    """``tree``'s one-row INSERT shape (bound with its first values); None if not one.

    Raises ``_Fallback`` if the catalogue refuses ``tree`` (its shape or its values).
    """
    if not isinstance(tree, exp.Insert) or not _plain(tree):
        return None
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    table = session.design.tables.get(target.name.lower())
    if table is None or not isinstance(target, exp.Table) or target.args.get("db"):
        return None
    given = _given(table, tree)
    if given is None:
        return None
    try:
        dml.check(session, tree)  # the binder's verdict on the shape, as the general path's
    except VeilError:  # these values' fault, maybe: the general path reports it
        raise _Fallback from None
    schema = exact_arrow(session.catalog, f'SELECT * FROM "{table.name}" LIMIT 0')
    schema = pa.schema(
        [pa.field(c.name, f.type) for c, f in zip(table.columns, schema, strict=True)]
    )
    sources = [
        _source(session, c, given.get(c.name), f.type)
        for c, f in zip(table.columns, schema, strict=True)
    ]
    if any(s is None for s in sources):
        return None
    return PointInsert(
        table=table,
        stamp=session.design_file_stamp(),
        tree=tree,
        schema=schema,
        sources=[s for s in sources if s is not None],
    )


def _plain(tree: exp.Insert) -> bool:
    """One row of VALUES, nothing else, no sequence call, no subquery."""
    if {k for k, v in tree.args.items() if v} - _PLAIN_ARGS:
        return False
    if tree.meta.get("veil_sequences_called") or calls_sequences(tree):
        return False
    values = tree.expression
    if not isinstance(values, exp.Values) or len(values.expressions) != 1:
        return False
    row = values.expressions[0]
    return isinstance(row, exp.Tuple) and not any(row.find_all(exp.Subquery, exp.Select))


def _given(table: TableDesign, tree: exp.Insert) -> dict[str, exp.Expr] | None:
    """Each column the row names, with its value's expression; None if the shape is not
    plain (a column unknown or named twice, a count that differs: DuckDB refuses)."""
    row = tree.expression.expressions[0].expressions
    if isinstance(tree.this, exp.Schema):
        names = [c.name.lower() for c in tree.this.expressions]
    else:  # PostgreSQL fills the first len(row) columns (``dml.name_leading_columns``)
        names = [c.name for c in table.columns][: len(row)]
    if len(names) != len(row) or len(set(names)) != len(names):
        return None
    if any(table.column(n) is None for n in names):
        return None
    return dict(zip(names, row, strict=True))


def _source(
    session: SessionContext, column: Column, node: exp.Expr | None, kind: pa.DataType
) -> Source | None:
    """Where ``column`` (of Arrow type ``kind``) takes its value from; None: no source
    this path can keep."""
    if node is None or is_default(node):
        if column.identity or column.default is None:  # an identity: ``number_rows`` numbers it
            return Source(fixed=pa.nulls(1, kind))
        try:
            node = exp.maybe_parse(column.default, dialect="duckdb")
        except SqlglotError:
            return Source(sql=f"CAST(({column.default}) AS {column.type})")
    if PARAM in node.meta:
        return Source(param=node.meta[PARAM][1])
    if isinstance(node, exp.Neg) and PARAM in node.this.meta:  # a negative number written in
        return Source(param=node.this.meta[PARAM][1], negated=True)
    if any(PARAM in n.meta for n in node.walk()) or any(node.find_all(exp.Column)):
        return None  # an expression over parameters or columns
    sql = f"CAST(({node.sql(dialect='duckdb')}) AS {column.type})"
    if not is_repeatable(node):
        return _clock(session, node, sql, kind) or Source(sql=sql)
    try:
        return Source(fixed=exact_arrow(session.catalog, f"SELECT {sql}").column(0).chunk(0))
    except duckdb.Error:
        return None


def _clock(session: SessionContext, node: exp.Expr, sql: str, kind: pa.DataType) -> Source | None:
    """``CURRENT_TIMESTAMP`` cast to a microsecond timestamp column, read from Python's
    clock; None: the catalogue computes it.

    DuckDB's value is the start of the catalogue's transaction, which the general
    path opens for the INSERT alone: the time of the statement, as here. A TIMESTAMP
    is its wall time in the catalogue's zone; the zone is read once, and the two
    clocks must agree now (a zone Python reads differently keeps DuckDB's cast).
    """
    if not isinstance(node, exp.CurrentTimestamp) or any(node.args.values()):
        return None
    if not pa.types.is_timestamp(kind) or kind.unit != "us":
        return None
    try:
        (zone,) = session.catalog.execute("SELECT current_setting('TimeZone')").fetchall()[0]
        source = Source(clock=ZoneInfo(zone))
        theirs = exact_arrow(session.catalog, f"SELECT {sql}").column(0)[0].as_py()
    except (duckdb.Error, ZoneInfoNotFoundError, ValueError):
        return None
    ours = _now(source, kind)[0].as_py()
    return source if abs(ours - theirs) < _CLOCKS_AGREE else None


def _now(source: Source, kind: pa.DataType) -> pa.Array:
    """The current time as a one-value array of the timestamp type ``kind``."""
    assert source.clock is not None
    if kind.tz is None:  # DuckDB's TIMESTAMPTZ -> TIMESTAMP: the wall time in its zone
        return pa.array([dt.datetime.now(source.clock).replace(tzinfo=None)], kind)
    return pa.array([dt.datetime.now(dt.UTC)], kind)


def _run(session: SessionContext, insert: PointInsert, params: Sequence[object]) -> Result:
    """One run of ``insert`` with ``params``: the row made, then written as the general
    path writes it."""
    if session.design_file_stamp() != insert.stamp:
        raise _Fallback  # a peel, DDL, a redesign: plan on the new design
    table = session.design.table(insert.table.name)
    # a key's columns are NOT NULL in the design (``primary_key``): ``write_new_rows`` checks
    plain = number_rows(session, table, insert.tree, _row(session, insert, params))
    dml.write_new_rows(session, table, plain)
    return Result(pa.table({}), 1, FetchStats())


def _row(session: SessionContext, insert: PointInsert, params: Sequence[object]) -> pa.Table:
    """The new row, each column as the catalogue's INSERT would make it."""
    columns: list[pa.Array | None] = []
    cast: list[tuple[int, str]] = []  # the columns the catalogue DuckDB computes, by position
    for at, (source, field) in enumerate(zip(insert.sources, insert.schema, strict=True)):
        if source.fixed is not None:
            columns.append(source.fixed)
        elif source.clock is not None:
            columns.append(_now(source, field.type))
        elif source.sql is not None:
            columns.append(None)
            cast.append((at, source.sql))
        else:
            assert source.param is not None
            value = params[source.param]
            exact = _exact(value, field.type, negated=source.negated)
            columns.append(pa.array([exact], field.type) if exact is not None else None)
            if exact is None:
                sql = _cast_sql(value, insert.table.columns[at], negated=source.negated)
                cast.append((at, sql))
    if cast:
        select = ", ".join(f'{sql} AS "c{at}"' for at, sql in cast)
        try:
            computed = exact_arrow(session.catalog, f"SELECT {select}")
        except duckdb.Error:
            raise _Fallback from None  # the general path refuses it in DuckDB's words
        for (at, _), made in zip(cast, computed.columns, strict=True):
            columns[at] = made.chunk(0).cast(insert.schema.field(at).type)
    return pa.Table.from_arrays(columns, schema=insert.schema)


def _cast_sql(value: object, column: Column, *, negated: bool) -> str:
    """A parameter's value cast to its column's type, written as the general path binds it."""
    written = literal(value).sql(dialect="duckdb")
    return f"CAST(({'-' if negated else ''}({written})) AS {column.type})"


def _exact(value: object, kind: pa.DataType, *, negated: bool = False) -> object | None:
    """``value`` (``negated``: its negation) as it goes into a column of Arrow type ``kind``
    with no cast; None: cast it.

    An int in the range of a signed integer type, a str in a VARCHAR (without NUL,
    which a literal does not carry): what the cast would give back unchanged.
    """
    if isinstance(value, str):
        text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
        return str(value) if text and not negated and "\x00" not in value else None
    if isinstance(value, int) and not isinstance(value, bool) and pa.types.is_signed_integer(kind):
        number = -int(value) if negated else int(value)
        bits = kind.bit_width - 1
        return number if -(2**bits) <= number < 2**bits else None
    return None
