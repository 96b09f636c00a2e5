"""Running a plan's local SQL in the client's DuckDB, bound once from its second run on.

``veil.encoding.exact_arrow`` describes a query before it runs it, to read the
few result types Arrow cannot hold exactly (UHUGEINT, BIT) as text; the
description is a bind of its own (0.8-1.3 ms of a TPC-DS local plan's 3-12 ms
at SF 0.1). A cached plan's local SQL gives the same result types at every
run (its registered tables take their types from the design, and a change of
design or of a table plans afresh), so its first run records whether they are
all exact, and later runs of an exact one skip the description
(``veil.backends.duckdb_arrow``).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from veil.backends.duckdb_arrow import query_arrow
from veil.encoding import _RESULT_TEXT, exact_arrow
from veil.sql.plan import SplitPlan


def local_arrow(connection: duckdb.DuckDBPyConnection, sql: str, plan: SplitPlan) -> pa.Table:
    """The rows of ``plan``'s local SQL ``sql`` as ``exact_arrow`` gives them."""
    if plan.local_exact:
        table = query_arrow(connection, sql)
        if table is not None:
            return table
    relation = connection.sql(sql)
    plan.local_exact = not any(str(kind) in _RESULT_TEXT for kind in relation.types)
    if plan.local_exact:
        return relation.to_arrow_table()
    return exact_arrow(connection, sql)


def query_table(connection: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """The rows of the query ``sql`` (Veil's own, of types Arrow holds exactly), bound once."""
    table = query_arrow(connection, sql)
    return table if table is not None else connection.sql(sql).to_arrow_table()
