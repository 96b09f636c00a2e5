"""Veil's server functions on DuckDB, registered as vectorised Arrow UDFs.

DuckDB has no Python aggregate functions, so the HOM sum is a scalar UDF over a
list aggregate: ``veil_hom_sum(list(c), n_square)``. DuckDB hands the UDF one
Arrow list per group for a whole vector of groups at once; the UDF multiplies
each group's ciphertexts modulo n^2 (``veil.crypto.hom.sum_ciphertexts``). The
SEARCH match calls ``veil.crypto.search.search_match`` on whole columns.

Both are pure functions of public data: the server needs no key to run them.
The crypto modules are imported when a function first runs, so a server that
never sums or searches does not load them.
"""

from __future__ import annotations

from typing import Any

import duckdb
import duckdb.func
import pyarrow as pa
import pyarrow.compute as pc

HOM_SUM = "veil_hom_sum"
SEARCH_MATCH = "veil_search_match"


def register(con: duckdb.DuckDBPyConnection) -> None:
    """Make Veil's server functions callable on this connection."""
    blob = duckdb.sqltypes.BLOB
    con.create_function(
        HOM_SUM,
        hom_sum_lists,
        [duckdb.list_type(blob), blob],
        blob,
        type=duckdb.func.PythonUDFType.ARROW,
        null_handling=duckdb.func.FunctionNullHandling.SPECIAL,
    )
    con.create_function(
        SEARCH_MATCH,
        search_match_column,
        [blob, blob],
        duckdb.sqltypes.BOOLEAN,
        type=duckdb.func.PythonUDFType.ARROW,
        null_handling=duckdb.func.FunctionNullHandling.SPECIAL,
    )


def hom_sum_lists(groups: Any, n_squares: Any) -> pa.Array:
    """One Paillier sum per list; an empty or all-NULL list (or NULL) sums to NULL."""
    from veil.crypto.hom import sum_ciphertexts

    groups = _combined(groups)
    n_values = _combined(n_squares).to_pylist()
    sums: list[bytes | None] = []
    for index in range(len(groups)):
        ciphertexts = groups[index].values if groups[index].is_valid else None
        if ciphertexts is None or n_values[index] is None:
            sums.append(None)
            continue
        present = ciphertexts.drop_null()
        n_square = int.from_bytes(n_values[index], "big")
        sums.append(sum_ciphertexts(present, n_square) if len(present) else None)
    return pa.array(sums, type=pa.binary())


def search_match_column(ciphertexts: Any, tokens: Any) -> pa.Array:
    """SWP match of each ciphertext against its row's token (NULL in -> NULL out)."""
    from veil.crypto.search import search_match

    ciphertexts = _combined(ciphertexts).cast(pa.binary())
    tokens = _combined(tokens).cast(pa.binary())
    distinct = pc.unique(tokens.drop_null())
    if len(distinct) == 1 and tokens.null_count == 0:  # the usual case: one token per query
        return _as_array(search_match(ciphertexts, distinct[0].as_py()))
    matched = pa.nulls(len(ciphertexts), pa.bool_())
    for token in distinct.to_pylist():
        rows = pc.equal(tokens, pa.scalar(token, pa.binary()))
        hits = _as_array(search_match(ciphertexts, token))
        matched = pc.if_else(rows, hits, matched)
    return matched


def _combined(values: Any) -> Any:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _as_array(values: Any) -> pa.Array:
    return _combined(values)
