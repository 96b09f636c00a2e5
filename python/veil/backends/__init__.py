"""Server backends: the untrusted DBMS that stores ciphertexts and runs RemoteSQL.

``connect(url)`` opens one: ``duckdb:///path/server.duckdb`` (the embedded
default) or ``postgresql://user@host:port/db``. Every backend offers the small
``Backend`` protocol of ``veil.backends.base``.
"""

from __future__ import annotations

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


def connect(url: str) -> Backend:
    """Open the server a URL names."""
    if url.startswith("duckdb://"):
        from veil.backends.duckdb import DuckDBBackend

        return DuckDBBackend(url)
    if url.startswith(("postgresql://", "postgres://")):
        from veil.backends.postgres import PostgresBackend

        return PostgresBackend(url)
    raise BackendError(
        f"unknown server URL {url!r}; use duckdb:///path/server.duckdb "
        "or postgresql://user@host:port/db"
    )
