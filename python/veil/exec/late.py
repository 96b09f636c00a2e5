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
    cipher = ciphers.get(scan.table, late.enc)
    found = local.sql(late.sql).to_arrow_table()
    if late.groups:  # one row per group: its key decrypted in place, the rest as computed
        at = found.schema.get_field_index(late.output)
        keys = found.column(at).combine_chunks()
        plain = decrypt_values(keys, cipher, late.enc, None)
        local.register(late.local_name, found.set_column(at, late.output, plain))
        return late.local_name
    distinct = pc.unique(found.column(0).combine_chunks())
    plain = decrypt_values(distinct, cipher, late.enc, None)
    local.register(late.local_name, pa.table({late.output: plain}))
    return late.local_name
