"""Running an IN-subquery over ciphertexts, then decrypting its keys (``decrypt_late``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from veil.exec.fetch import decrypt_values
from veil.sql.plan import LateKeys, Scan

if TYPE_CHECKING:
    from veil.exec.fetch import CipherCache


def register_late_keys(
    late: LateKeys, scan: Scan, local: duckdb.DuckDBPyConnection, ciphers: CipherCache
) -> str:
    """Run ``late`` over ``scan``'s registered local table and register its keys; their name.

    The subquery groups and filters the scan's ciphertexts; only the
    distinct keys it returns are decrypted.
    """
    late.sql = late.sql or late.query.sql(dialect="duckdb")
    found = local.sql(late.sql).to_arrow_table().column(0)
    distinct = pc.unique(found.combine_chunks())
    plain = decrypt_values(distinct, ciphers.get(scan.table, late.enc), late.enc, None)
    local.register(late.local_name, pa.table({late.output: plain}))
    return late.local_name
