"""Server backends: the untrusted DBMS that stores ciphertexts and runs RemoteSQL.

``connect(url)`` opens one: ``duckdb:///path/server.duckdb`` (the embedded
default), ``postgresql://user@host:port/db``, or Apache Spark:
``spark-local[N]?warehouse=PATH`` / ``spark://HOST:PORT?warehouse=PATH``. Every backend offers the small
``Backend`` protocol of ``veil.backends.base``.
"""

from __future__ import annotations

from pathlib import Path

from veil.backends.base import (
    Backend,
    BackendError,
    Estimate,
    ServerUnavailableError,
    n_square_bytes,
    render,
)

__all__ = [
    "Backend",
    "BackendError",
    "Estimate",
    "ServerUnavailableError",
    "connect",
    "n_square_bytes",
    "render",
]


def canonical_url(url: str) -> str:
    """``url`` as a client directory stores it: a DuckDB file by its absolute path.

    So a query from another directory opens the same file (a relative path
    would silently name another, empty one).
    """
    if _is_spark(url):
        from veil.backends.spark_session import canonical

        return canonical(url)
    if not url.startswith("duckdb:"):
        return url
    from veil.backends.duckdb import database_path

    path = database_path(url)
    return url if path == ":memory:" else f"duckdb://{Path(path).resolve()}"


def connect_existing(url: str) -> Backend:
    """Open the server of an existing client directory: a DuckDB file (a Spark warehouse)
    must exist."""
    if _is_spark(url):
        from veil.backends.spark_files import is_hadoop_url
        from veil.backends.spark_session import parse_url

        warehouse = parse_url(url).warehouse
        if not is_hadoop_url(warehouse) and not Path(warehouse).is_dir():
            raise ServerUnavailableError(
                f"the Spark warehouse {warehouse} (server {url}) does not exist: it was moved "
                "or deleted, or the client directory belongs to another machine; restore it "
                "(or point the directory at where it is now: `veil config CDIR --server URL`), "
                "or load the data again"
            )
    if url.startswith("duckdb:"):
        from veil.backends.duckdb import database_path

        path = database_path(url)
        if path != ":memory:" and not Path(path).exists():
            raise ServerUnavailableError(
                f"the server file {path} (server {url}) does not exist: it was moved or "
                "deleted, or the client directory belongs to another machine; restore the "
                "file (or point the directory at where it is now: `veil config CDIR --server "
                "URL`), or load the data again"
            )
    return connect(url)


def connect(url: str) -> Backend:
    """Open the server a URL names."""
    if url.startswith("duckdb:"):
        from veil.backends.duckdb import DuckDBBackend

        return DuckDBBackend(url)
    if url.startswith(("postgresql://", "postgres://")):
        from veil.backends.postgres import PostgresBackend

        return PostgresBackend(url)
    if _is_spark(url):
        from veil.backends.spark import SparkBackend

        return SparkBackend(url)
    raise BackendError(
        f"unknown server URL {url!r}; use duckdb:///path/server.duckdb, "
        "postgresql://user@host:port/db, spark-local[N]?warehouse=PATH "
        "or spark://HOST:PORT?warehouse=PATH"
    )


def _is_spark(url: str) -> bool:
    return url.startswith(("spark-local", "spark://"))
