"""Veil's server functions as Arrow kernels: whole columns in, a column out.

DuckDB (``veil.backends.duckdb_functions``) and Spark (``veil.backends.spark_functions``)
register these same functions as vectorised UDFs. The HOM sum takes one Arrow list of
ciphertexts per group (DuckDB's ``list(c)``, Spark's ``collect_list(c)``): neither server
runs Python aggregates next to its own, so the product is a scalar function over the
list; the native group-sum kernel multiplies each group's ciphertexts modulo n^2
(``sum_ciphertext_groups``). The SEARCH match calls ``search_match`` on whole columns,
and so do the onion functions: ``veil_layer_xor_int`` / ``veil_layer_xor_bytes`` (key,
row id, value) peel an outer RND layer with the layer key the client reveals
(``layer_xor``), and ``veil_joinadj_rekey`` (token, ciphertext) re-keys JOIN-ADJ
ciphertexts (``rekey``). A key or token is a constant of the statement, which the server
hands over as a column repeating it: each distinct one is one native call.

All come from ``veil.crypto.server_ops``, the one crypto module a backend
imports: functions of public data or of what the client chose to reveal, so
the server holds no master key. It is imported when a function first runs, so
a server that never sums, searches or peels does not load it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HOM_SUM = "veil_hom_sum"
SEARCH_MATCH = "veil_search_match"
LAYER_XOR_INT = "veil_layer_xor_int"
LAYER_XOR_BYTES = "veil_layer_xor_bytes"
JOINADJ_REKEY = "veil_joinadj_rekey"


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


def layer_xor_ints(keys: Any, ids: Any, values: Any) -> pa.Array:
    """BIGINT values XOR the layer key's keystream of their row ids (NULL in -> NULL out)."""
    return _per_constant(keys, [ids, _combined(values).cast(pa.int64())], _layer_xor, pa.int64())


def layer_xor_blobs(keys: Any, ids: Any, values: Any) -> pa.Array:
    """BLOB values XOR the layer key's keystream of their row ids (NULL in -> NULL out)."""
    return _per_constant(keys, [ids, _combined(values).cast(pa.binary())], _layer_xor, pa.binary())


def joinadj_rekey_column(tokens: Any, ciphertexts: Any) -> pa.Array:
    """JOIN-ADJ ciphertexts re-keyed by their row's token (NULL in -> NULL out)."""
    from veil.crypto.server_ops import rekey

    ciphertexts = _combined(ciphertexts).cast(pa.binary())
    return _per_constant(tokens, [ciphertexts], rekey, pa.binary())


def _layer_xor(key: bytes, ids: pa.Array, values: pa.Array) -> pa.Array:
    from veil.crypto.server_ops import layer_xor

    ids = _combined(ids).cast(pa.int64())
    out = _as_array(layer_xor(key, ids.fill_null(0), values))
    if ids.null_count == 0:
        return out
    return pc.if_else(ids.is_valid(), out, pa.scalar(None, out.type))


def _per_constant(
    constants: Any, columns: list[Any], compute: Any, result_type: pa.DataType
) -> pa.Array:
    """``compute(constant, *columns)`` over the rows of each distinct constant.

    Rows whose constant (key or token) is NULL give NULL. The usual statement
    has one constant for all rows: then it is one call over whole columns.
    """
    constants = _combined(constants).cast(pa.binary())
    columns = [_combined(column) for column in columns]
    distinct = pc.unique(constants.drop_null())
    if len(distinct) == 1 and constants.null_count == 0:
        return _as_array(compute(distinct[0].as_py(), *columns))
    result = pa.nulls(len(constants), result_type)
    for constant in distinct.to_pylist():
        rows = pc.fill_null(pc.equal(constants, pa.scalar(constant, pa.binary())), False)
        part = _as_array(compute(constant, *(column.filter(rows) for column in columns)))
        result = pc.replace_with_mask(result, rows, part.cast(result_type))
    return result


def _combined(values: Any) -> Any:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _as_array(values: Any) -> pa.Array:
    return _combined(values)


class Signature(NamedTuple):
    """A server function: its SQL name, kernel, argument and result kinds.

    Kinds are ``blob``, ``blob list``, ``bigint`` and ``boolean``; each backend maps them
    to its own types.
    """

    name: str
    kernel: Callable[..., pa.Array]
    arguments: tuple[str, ...]
    result: str


SIGNATURES = (
    Signature(HOM_SUM, hom_sum_lists, ("blob list", "blob"), "blob"),
    Signature(SEARCH_MATCH, search_match_column, ("blob", "blob"), "boolean"),
    Signature(LAYER_XOR_INT, layer_xor_ints, ("blob", "bigint", "bigint"), "bigint"),
    Signature(LAYER_XOR_BYTES, layer_xor_blobs, ("blob", "bigint", "blob"), "blob"),
    Signature(JOINADJ_REKEY, joinadj_rekey_column, ("blob", "blob"), "blob"),
)
