"""Veil's server functions on DuckDB, registered as vectorised Arrow UDFs.

The kernels are ``veil.backends.arrow_functions``'. DuckDB has no Python aggregate
functions, so the HOM sum is a scalar UDF over a list aggregate:
``veil_hom_sum(list(c), n_square)``; DuckDB hands the UDF one Arrow list per group for a
whole vector of groups at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
import duckdb.func

from veil.backends.arrow_functions import (
    HOM_SUM,
    JOINADJ_REKEY,
    LAYER_XOR_BYTES,
    LAYER_XOR_INT,
    SEARCH_MATCH,
    hom_sum_lists,
    joinadj_rekey_column,
    layer_xor_blobs,
    layer_xor_ints,
    search_match_column,
)

__all__ = ["HOM_SUM", "SEARCH_MATCH", "register"]


def register(con: duckdb.DuckDBPyConnection) -> None:
    """Make Veil's server functions callable on this connection."""
    blob, bigint = duckdb.sqltypes.BLOB, duckdb.sqltypes.BIGINT
    functions: list[tuple[str, Callable[..., Any], list[Any], Any]] = [
        (HOM_SUM, hom_sum_lists, [duckdb.list_type(blob), blob], blob),
        (SEARCH_MATCH, search_match_column, [blob, blob], duckdb.sqltypes.BOOLEAN),
        (LAYER_XOR_INT, layer_xor_ints, [blob, bigint, bigint], bigint),
        (LAYER_XOR_BYTES, layer_xor_blobs, [blob, bigint, blob], blob),
        (JOINADJ_REKEY, joinadj_rekey_column, [blob, blob], blob),
    ]
    for name, function, parameters, result in functions:
        con.create_function(
            name,
            function,
            parameters,
            result,
            type=duckdb.func.PythonUDFType.ARROW,
            null_handling=duckdb.func.FunctionNullHandling.SPECIAL,
        )
