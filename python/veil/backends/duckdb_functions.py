"""Veil's server functions on DuckDB, registered as vectorised Arrow UDFs.

The kernels are ``veil.backends.arrow_functions``'. DuckDB has no Python aggregate
functions, so the HOM sum is a scalar UDF over a list aggregate:
``veil_hom_sum(list(c), n_square)``; DuckDB hands the UDF one Arrow list per group for a
whole vector of groups at once.
"""

from __future__ import annotations

from typing import Any

import duckdb
import duckdb.func

from veil.backends.arrow_functions import HOM_SUM, SEARCH_MATCH, SIGNATURES

__all__ = ["HOM_SUM", "SEARCH_MATCH", "register"]


def register(con: duckdb.DuckDBPyConnection) -> None:
    """Make Veil's server functions callable on this connection."""
    blob = duckdb.sqltypes.BLOB
    types: dict[str, Any] = {
        "blob": blob,
        # the connection's own: ``duckdb.list_type`` opens the module's default in-memory
        # database first, ~60 ms of a fresh process's first query (issue 41)
        "blob list": con.list_type(blob),
        "bigint": duckdb.sqltypes.BIGINT,
        "boolean": duckdb.sqltypes.BOOLEAN,
    }
    for function in SIGNATURES:
        con.create_function(
            function.name,
            function.kernel,
            [types[kind] for kind in function.arguments],
            types[function.result],
            type=duckdb.func.PythonUDFType.ARROW,
            null_handling=duckdb.func.FunctionNullHandling.SPECIAL,
        )
