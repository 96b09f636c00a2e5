"""Veil's server functions on Spark: the Arrow kernels as vectorised Arrow UDFs.

Spark hands an Arrow UDF whole batches of its arguments (``arrow_udf``, Spark 4.1+) and
runs it in its Python workers, so the kernels of ``veil.backends.arrow_functions`` serve
unchanged. The HOM sum is ``veil_hom_sum(collect_list(c), n2)``: Spark cannot mix a
Python grouped-aggregate UDF with its own aggregates (COUNT, MIN) in one SELECT, which
Veil's packed sums do, but ``collect_list`` is one of its own, and the product over the
list is a scalar UDF.
"""

from __future__ import annotations

import warnings
from typing import Any

import pyarrow as pa

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


def register(session: Any) -> None:
    """Make Veil's server functions callable in this Spark session's SQL."""
    with warnings.catch_warnings():
        # PySpark 4.3 warns that it is not yet tested with pandas 3; Veil's UDFs use Arrow
        warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
        from pyspark.sql.functions import arrow_udf

    functions = [
        (HOM_SUM, hom_sum, "binary"),
        (SEARCH_MATCH, search_match, "boolean"),
        (LAYER_XOR_INT, layer_xor_int, "bigint"),
        (LAYER_XOR_BYTES, layer_xor_bytes, "binary"),
        (JOINADJ_REKEY, joinadj_rekey, "binary"),
    ]
    for name, function, result in functions:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
            session.udf.register(name, arrow_udf(function, result))


# Spark checks a UDF's Arrow result against its declared type exactly: the kernels may
# return large or view variants, cast back here.


def hom_sum(groups: pa.Array, n_squares: pa.Array) -> pa.Array:
    return hom_sum_lists(groups, n_squares).cast(pa.binary())


def search_match(ciphertexts: pa.Array, tokens: pa.Array) -> pa.Array:
    return search_match_column(ciphertexts, tokens).cast(pa.bool_())


def layer_xor_int(keys: pa.Array, ids: pa.Array, values: pa.Array) -> pa.Array:
    return layer_xor_ints(keys, ids, values).cast(pa.int64())


def layer_xor_bytes(keys: pa.Array, ids: pa.Array, values: pa.Array) -> pa.Array:
    return layer_xor_blobs(keys, ids, values).cast(pa.binary())


def joinadj_rekey(tokens: pa.Array, ciphertexts: pa.Array) -> pa.Array:
    return joinadj_rekey_column(tokens, ciphertexts).cast(pa.binary())
