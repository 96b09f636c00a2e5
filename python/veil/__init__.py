"""Veil: an encrypted database system.

The server holds only ciphertexts and does as much of each query as it can
over them; this client holds every key, decrypts what comes back and finishes
the query.
"""

from typing import TYPE_CHECKING, Any

from veil.errors import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    VeilError,
    Warning,
)

if TYPE_CHECKING:
    from veil.dbapi import apilevel, connect, paramstyle, threadsafety

__version__ = "0.1.0"
Error = VeilError

# The DB-API module (and with it pyarrow, DuckDB, sqlglot) loads on first use,
# so that `veil --help` and the light parts of Veil start fast.
_FROM_DBAPI = ("connect", "apilevel", "paramstyle", "threadsafety")


def __getattr__(name: str) -> Any:
    if name in _FROM_DBAPI:
        import veil.dbapi

        return getattr(veil.dbapi, name)
    raise AttributeError(f"module 'veil' has no attribute {name!r}")


# PEP 249's module globals live here too: ``veil.connect`` is the entry point.
__all__ = [
    "DataError",
    "DatabaseError",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "NotSupportedError",
    "OperationalError",
    "ProgrammingError",
    "VeilError",
    "Warning",
    "__version__",
    "apilevel",
    "connect",
    "paramstyle",
    "threadsafety",
]
