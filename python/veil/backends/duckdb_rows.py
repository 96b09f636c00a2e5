"""A repeated read with a few rows, fetched as rows instead of through a relation (issue 41).

DuckDB's relation API (``connection.sql(...).to_arrow_table()``) binds a
statement before it runs it, and running binds it again: ~0.4 ms of a point
query's ~0.55 ms on the server. Its DB-API (``execute`` then ``fetchmany``)
binds once, but gives Python rows, whose Arrow types a statement does not
say. A statement that ran once through a relation is remembered with its
result's Arrow schema when that result was a few rows of plain types
(integers, floats, booleans, strings, binaries, dates: what ciphertexts, row
ids and counts are). The next run of the same text goes through the DB-API,
and its rows become a table of that schema; a run that returns more rows
takes the rest as Arrow, and the text is forgotten.

Only SELECTs are remembered, so a statement never runs twice when building
its table fails (a value its remembered type cannot hold): the relation
runs it again, as the first time.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

FEW = 64  # rows a remembered statement's result may have
_KEPT = 512  # statements remembered per backend, least recently used out


class RowReads:
    """The remembered statements of one DuckDB connection: each one's result schema, and
    its columns' DuckDB types, which a later run's must equal (a table made again under
    the same names with other types, after DDL or a peel, is read through a relation)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[pa.Schema, list[str]]] = OrderedDict()

    def knows(self, sql: str) -> bool:
        return sql in self._kept

    def wants(self, sql: str, table: pa.Table) -> bool:
        """Whether ``sql``, whose result is ``table``, is one to remember: a SELECT whose
        result is a few rows of plain types."""
        return (
            table.num_rows <= FEW and _reads(sql) and all(plain_kind(f.type) for f in table.schema)
        )

    def learn(self, sql: str, table: pa.Table, kinds: Sequence[object]) -> None:
        """Remember ``sql`` (``wants``), whose result is ``table`` of DuckDB types ``kinds``."""
        self._kept[sql] = (table.schema, [str(kind) for kind in kinds])
        self._kept.move_to_end(sql)
        if len(self._kept) > _KEPT:
            self._kept.popitem(last=False)

    def forget(self, sql: str) -> None:
        self._kept.pop(sql, None)

    def run(
        self, connection: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None
    ) -> pa.Table | None:
        """The result of a remembered ``sql``; None if it is not remembered, or if this run's
        rows are not of its remembered types (then it ran, changing nothing: it is a
        SELECT, and the caller runs it again through a relation)."""
        kept = self._kept.get(sql)
        if kept is None:
            return None
        schema, types = kept
        connection.execute(sql, params)
        try:
            # every row, to the end: a DB-API result left unfinished holds the connection
            rows = connection.fetchall()
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                connection.abort()
            raise
        described = [str(column[1]) for column in connection.description or []]
        if described != types or len(rows) > FEW:  # read through a relation from now on
            self._kept.pop(sql, None)
            if described != types:
                return None
        try:
            return _table(rows, schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            self._kept.pop(sql, None)
            return None


def _table(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.Table:
    if not rows:
        return schema.empty_table()
    columns = zip(*rows, strict=True)
    arrays = [
        pa.array(values, type=field.type) for values, field in zip(columns, schema, strict=True)
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _reads(sql: str) -> bool:
    return sql.lstrip()[:6].upper() == "SELECT"


# types whose Python values DuckDB's DB-API gives back as Arrow takes them exactly
_PLAIN = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_boolean,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_date32,
)


def plain_kind(kind: pa.DataType) -> bool:
    """Whether DuckDB's DB-API gives values of ``kind`` as Python values Arrow takes back
    exactly (and, as parameters, binds them exactly)."""
    return any(test(kind) for test in _PLAIN)
