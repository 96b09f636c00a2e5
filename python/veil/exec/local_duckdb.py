"""The client's own DuckDB, closed to the files, network and extensions of the trusted side.

The local engine finishes split plans beside the key file, on statements
that users of ``veil serve`` write; it must see only the Arrow tables Veil
registers. DuckDB enforces the part a setting can say: no file or network
access (``enable_external_access``, which cannot be turned back on while the
database runs), no extension installed or loaded, and the configuration
locked, so no statement can loosen either. ``veil.sql.sandbox`` refuses the
rest before planning. DuckDB may still spill to its temporary directory.

``external_access=True`` is the application's own opt-in (the DB-API's
``veil.connect(..., external_access=True)``): DuckDB as it comes, which reads
any file the application's account can.
"""

from __future__ import annotations

import duckdb

_LOCKED = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "lock_configuration": True,
}


def local_duckdb(*, external_access: bool = False) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB for the client's own work."""
    if external_access:
        return duckdb.connect()
    return duckdb.connect(config=dict(_LOCKED))
