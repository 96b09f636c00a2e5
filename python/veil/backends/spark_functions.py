"""Veil's server functions on Spark: the Arrow kernels as vectorised Arrow UDFs.

Spark hands an Arrow UDF whole batches of its arguments (``arrow_udf``, Spark 4.1+) and
runs it in its Python workers, so the kernels of ``veil.backends.arrow_functions`` serve
unchanged. The HOM sum is ``veil_hom_sum(collect_list(c), n2)``: Spark cannot mix a
Python grouped-aggregate UDF with its own aggregates (COUNT, MIN) in one SELECT, which
Veil's packed sums do, but ``collect_list`` is one of its own, and the product over the
list is a scalar UDF.

Where Veil's JVM functions are on the application's class path (``spark_jvm``), the
Paillier sum is instead the Java aggregate ``veil_hom_sum_jvm(c, n2)``: a JVM aggregate
mixes with Spark's own, and no ciphertext travels to a Python worker.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from veil.backends import spark_jvm
from veil.backends.arrow_functions import HOM_SUM, SEARCH_MATCH, SIGNATURES
from veil.backends.spark_session import PANDAS_WARNING

__all__ = ["HOM_SUM", "HOM_SUM_JVM", "SEARCH_MATCH", "register"]

HOM_SUM_JVM = "veil_hom_sum_jvm"

_SPARK_TYPES = {"blob": "binary", "bigint": "bigint", "boolean": "boolean"}
_ARROW_TYPES = {"blob": pa.binary(), "bigint": pa.int64(), "boolean": pa.bool_()}


def register(session: Any) -> bool:
    """Make Veil's server functions callable in this Spark session's SQL.

    Returns whether the JVM Paillier aggregate ``HOM_SUM_JVM`` is among them.
    """
    with warnings.catch_warnings():
        # PySpark 4.3 warns that it is not yet tested with pandas 3; Veil's UDFs use Arrow
        warnings.filterwarnings("ignore", PANDAS_WARNING, FutureWarning)
        from pyspark.sql.functions import arrow_udf

        make: Any = arrow_udf  # its overloads want literal function types; Veil's are scalar
        for function in SIGNATURES:
            typed = _typed(function.kernel, _ARROW_TYPES[function.result])
            session.udf.register(function.name, make(typed, _SPARK_TYPES[function.result]))
    return spark_jvm.wanted() and _register_jvm(session)


def _register_jvm(session: Any) -> bool:
    """Register the Java functions, if the application was started with Veil's jar."""
    from py4j.protocol import Py4JError

    try:
        functions = session._jvm.veil.spark.Functions
        functions.register(session._jsparkSession, HOM_SUM_JVM)
    except (Py4JError, TypeError):  # TypeError: the class is not on the path (a JavaPackage)
        return False
    return True


def _typed(kernel: Callable[..., pa.Array], result: pa.DataType) -> Callable[..., pa.Array]:
    """``kernel`` with its result cast to ``result``: Spark checks a UDF's Arrow type
    exactly, and a kernel may give a large or view variant."""

    def run(*columns: pa.Array) -> pa.Array:
        return kernel(*columns).cast(result)

    return run
