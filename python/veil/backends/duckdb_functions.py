"""Veil's server functions on DuckDB, registered as vectorised Arrow UDFs.

DuckDB has no Python aggregate functions, so the HOM sum is a scalar UDF over a
list aggregate: ``veil_hom_sum(list(c), n_square)``. DuckDB hands the UDF one
Arrow list per group for a whole vector of groups at once; the UDF multiplies
each group's ciphertexts modulo n^2 (``sum_ciphertext_groups``). The SEARCH
match calls ``search_match`` on whole columns.

Both come from ``veil.crypto.server_ops``, the one crypto module a backend
imports: pure functions of public data, so the server needs no key to run
them. It is imported when a function first runs, so a server that never sums
or searches does not load it.
"""

from __future__ import annotations

from typing import Any

import duckdb
import duckdb.func
import numpy as np
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
    """One Paillier sum per list; an empty or all-NULL list (or NULL) sums to NULL.

    The groups are summed by the native group-sum kernel, one call per distinct
    n^2 (a query passes one, as a parameter), rather than group by group.
    """
    from veil.crypto.server_ops import sum_ciphertext_groups

    groups = _combined(groups)
    n_squares = _combined(n_squares).cast(pa.binary())
    sums = pa.nulls(len(groups), pa.binary())
    for n_square in pc.unique(n_squares.drop_null()).to_pylist():
        rows = pc.fill_null(pc.equal(n_squares, pa.scalar(n_square, pa.binary())), False)
        group_sums = sum_ciphertext_groups(groups.filter(rows), int.from_bytes(n_square, "big"))
        sums = pc.replace_with_mask(sums, rows, _combined(group_sums).cast(pa.binary()))
    # Like SQL's SUM, a group with no present ciphertext sums to NULL, not to 0.
    return pc.if_else(pc.greater(_present_members(groups), 0), sums, pa.scalar(None, pa.binary()))


def _present_members(groups: pa.Array) -> pa.Array:
    """The number of non-NULL members of each list (0 for a NULL list)."""
    # flatten() skips the members behind NULL lists, whose lengths count as 0.
    valid = np.asarray(groups.flatten().is_valid(), np.int64)
    lengths = np.asarray(groups.value_lengths().fill_null(0), np.int64)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    before = np.concatenate([[0], np.cumsum(valid)])
    return pa.array(before[bounds[1:]] - before[bounds[:-1]])


def search_match_column(ciphertexts: Any, tokens: Any) -> pa.Array:
    """SWP match of each ciphertext against its row's token (NULL in -> NULL out)."""
    from veil.crypto.server_ops import search_match

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
