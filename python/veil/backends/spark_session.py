"""Spark URLs, and the one Spark application a Veil process runs its backends in.

``spark-local[N]?warehouse=PATH`` runs Spark inside this process's JVM with N cores;
``spark://HOST:PORT?warehouse=PATH`` connects to a standalone cluster's master. The
warehouse is the directory holding the encrypted tables as Parquet; every worker must
see it at the same path (a local disk for ``spark-local``, a shared one for a cluster).

A JVM holds one SparkContext, so the first backend of a process starts it (with the
URL's master) and every later backend gets a session of its own on it
(``newSession``: its own temporary views, functions and settings, the same executors).
A second master in one process cannot be: that is refused with a clear error.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from veil.backends import spark_jvm
from veil.backends.base import BackendError, ServerUnavailableError
from veil.backends.spark_files import is_hadoop_url

PANDAS_WARNING = "PySpark does not yet fully support pandas"
LOCAL_PREFIX = "spark-local"
CLUSTER_PREFIX = "spark://"
_LOCAL = re.compile(r"spark-local(?:\[(\d+|\*)\])?\Z")

# Modest defaults: the machines Veil is tested on have 2 cores shared with other jobs.
# Each may be overridden by the environment variable VEIL_SPARK_<NAME> (dots as _).
_SETTINGS = {
    "spark.ui.enabled": "false",
    "spark.driver.memory": "2g",
    "spark.executor.memory": "1g",
    "spark.sql.shuffle.partitions": "4",
    # Veil's own SQL quotes names "like this" (``base.quote``): in Spark they would be
    # strings, so double quotes name identifiers here (a documented ANSI setting).
    "spark.sql.ansi.doubleQuotedIdentifiers": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    # a query's results reach Python as Arrow batches (``toArrow``)
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Spark sizes a scan by its Parquet bytes, which for narrow integer columns are a tenth
    # of their rows in memory: TPC-H Q21 at SF 1 broadcast lineitem's (orderkey, suppkey)
    # as "under 10 MB" and ran a 2 GB driver out of heap. Spark's own factor for that.
    "spark.sql.sources.fileCompressionFactor": "10",
}


@dataclass(frozen=True)
class SparkURL:
    """What a Spark server URL names: a master and the warehouse directory."""

    master: str  # local[N] or spark://host:port
    warehouse: str  # a path of this machine, or a Hadoop URL (``spark_files``)

    @property
    def cores(self) -> str:
        found = re.match(r"local\[(.+)\]", self.master)
        return found.group(1) if found else ""


def parse_url(url: str) -> SparkURL:
    """``spark-local[N]?warehouse=PATH`` or ``spark://HOST:PORT?warehouse=PATH``."""
    base, _, query = url.partition("?")
    warehouse = parse_qs(query).get("warehouse", [""])[0]
    if not warehouse:
        raise BackendError(
            f"the Spark URL {url!r} names no warehouse; add ?warehouse=/path/to/dir "
            "(the directory that holds the encrypted tables as Parquet)"
        )
    local = _LOCAL.match(base)
    if local:
        master = f"local[{local.group(1) or '2'}]"
    elif base.startswith(CLUSTER_PREFIX) and len(base) > len(CLUSTER_PREFIX):
        master = base
    else:
        raise BackendError(
            f"{url!r} is not a Spark URL; write spark-local[N]?warehouse=PATH or "
            "spark://HOST:PORT?warehouse=PATH"
        )
    if not is_hadoop_url(warehouse):
        warehouse = str(Path(warehouse).expanduser())
    return SparkURL(master, warehouse)


def canonical(url: str) -> str:
    """``url`` with its warehouse as an absolute path (as a client directory stores it)."""
    parsed = parse_url(url)
    base = url.partition("?")[0]
    if is_hadoop_url(parsed.warehouse):
        return f"{base}?warehouse={parsed.warehouse}"
    return f"{base}?warehouse={Path(parsed.warehouse).resolve()}"


_lock = threading.Lock()


def session_for(parsed: SparkURL) -> Any:
    """A new Spark session on this process's Spark application, started if need be."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    with _lock:
        active = SparkContext._active_spark_context
        if active is not None and active.master != parsed.master:
            raise BackendError(
                f"this process already runs Spark with master {active.master}; one process "
                f"can use one Spark master at a time (not also {parsed.master})"
            )
        if active is None:
            _prepare_environment()
            builder = SparkSession.builder.master(parsed.master).appName("veil")
            for key, value in _settings(parsed).items():
                builder = builder.config(key, value)
            try:
                root = builder.getOrCreate()
            except Exception as exc:  # Java missing, master unreachable, ...
                raise ServerUnavailableError(
                    f"cannot start Spark ({parsed.master}): {_first_line(exc)}; Spark needs "
                    "Java 17 or later on PATH (or JAVA_HOME), and a cluster's master must "
                    "be reachable"
                ) from exc
            root.sparkContext.setLogLevel("ERROR")
        else:
            root = SparkSession.builder.getOrCreate()
        return root.newSession()


_LOG_CONFIG = Path(__file__).with_name("spark_log4j2.properties")


def _settings(parsed: SparkURL) -> dict[str, str]:
    settings = dict(_SETTINGS)
    settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={_LOG_CONFIG}"
    functions = spark_jvm.jar()
    if functions is not None:  # Veil's JVM functions, on the driver's and executors' paths
        settings["spark.jars"] = str(functions)
    if parsed.master.startswith("spark://"):
        settings["spark.cores.max"] = os.environ.get("VEIL_SPARK_CORES_MAX", "2")
    for key in list(settings):
        override = os.environ.get("VEIL_SPARK_" + key.removeprefix("spark.").replace(".", "_"))
        if override:
            settings[key] = override
    return settings


def _prepare_environment() -> None:
    """Spark's Python workers run Veil's UDFs: they need this interpreter and its path."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback, not the host's name
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    root = str(Path(__file__).resolve().parents[2])  # the directory holding ``veil``
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    # PySpark logs every failed statement as JSON on stderr; Veil reports it as BackendError
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    # PySpark 4.3 is not yet tested with pandas 3; Veil's UDFs exchange Arrow only
    warnings.filterwarnings("ignore", PANDAS_WARNING, FutureWarning)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]
