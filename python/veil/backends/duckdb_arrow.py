"""A query's rows as Arrow from DuckDB, its statement bound once (issue 40).

DuckDB's relation API (``connection.sql(text).to_arrow_table()``) binds a
statement to describe the relation it returns, then runs it, which binds it
again: 0.8-1.3 ms of a TPC-DS local plan's 3-12 ms at SF 0.1, and the same
for each server statement, which weighs most on the short queries. Running
the relation is one call on the connection with the statement's text and
values (``_submit``), the same call made here without the describing bind, so
the rows and their Arrow types are the relation's own. A DuckDB without that
call (another release) returns None, and the caller goes through a relation.

Only queries go this way: a statement that writes or defines runs through
the relation API, as before.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import duckdb
import pyarrow as pa

# the relation API's batch size for Arrow results (``duckdb._seam.DEFAULT_BATCH_SIZE``)
BATCH_ROWS = 131072
_QUERY = re.compile(r"^\s*(SELECT|WITH)\b", re.IGNORECASE)


def query_arrow(
    connection: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object] | None = None
) -> pa.Table | None:
    """The rows of the query ``sql`` as the relation API gives them, or None when this
    DuckDB has no direct run or ``sql`` is not a query (then use a relation)."""
    submit = getattr(connection, "_submit", None)
    if submit is None or not _QUERY.match(sql):
        return None
    values = list(params) if params else None  # the relation API's "no values"
    return submit(sql, values, "arrow", BATCH_ROWS).arrow_table()
