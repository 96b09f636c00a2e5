"""Decrypting late: an IN-subquery's keys found over ciphertexts (``decrypt_late``), and
result columns the local plan left encrypted (``decrypt_outputs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from veil.encoding import result_array, result_type
from veil.exec.decrypt import decrypt_values
from veil.sql.plan import LateKeys, LateOutput, Scan

if TYPE_CHECKING:
    from veil.ciphers.cache import CipherCache


def register_late_keys(
    late: LateKeys,
    scan: Scan,
    local: duckdb.DuckDBPyConnection,
    ciphers: CipherCache,
    views: set[str],
) -> str:
    """Run ``late`` over ``scan``'s registered local table and register its keys; their name.

    The subquery groups and filters the scan's ciphertexts; only the
    distinct keys it returns are decrypted. ``views`` collects the views
    made on the way (``register_typed``), for the caller to drop.
    """
    late.sql = late.sql or late.query.sql(dialect="duckdb")
    cipher = ciphers.get(scan.table, late.enc)
    relation = local.sql(late.sql)
    types = dict(zip(relation.columns, (str(t) for t in relation.types), strict=True))
    found = relation.to_arrow_table()
    if late.groups:  # one row per group: its key decrypted in place, the rest as computed
        at = found.schema.get_field_index(late.output)
        keys = found.column(at).combine_chunks()
        plain = decrypt_values(keys, cipher, late.enc, None)
        types.pop(late.output)
        if register_typed(local, late.local_name, found.set_column(at, late.output, plain), types):
            views.add(late.local_name)
        return late.local_name
    distinct = pc.unique(found.column(0).combine_chunks())
    plain = decrypt_values(distinct, cipher, late.enc, None)
    local.register(late.local_name, pa.table({late.output: plain}))
    return late.local_name


RAW = "__arrow"  # suffix of a table registered beneath a typed view


def register_typed(
    local: duckdb.DuckDBPyConnection, name: str, table: pa.Table, types: dict[str, str]
) -> bool:
    """``table`` as ``name``, its columns of the DuckDB ``types`` they were computed as.

    Arrow has no HUGEINT (a SUM of integers): DuckDB hands it out as
    DECIMAL(38,0), and a set operation over the registered table would take
    the decimal's type. Such columns are cast back in a view over the table.
    (The local engine's configuration is locked, so DuckDB's lossless Arrow
    setting cannot be switched on for one result.) Whether it made a view.
    """
    local.register(name, table)
    described = {str(r[0]): str(r[1]) for r in local.execute(f'DESCRIBE "{name}"').fetchall()}
    lossy = {c for c, t in types.items() if described.get(c, t) != t}
    if not lossy:
        return False
    local.unregister(name)
    local.register(name + RAW, table)
    columns = ", ".join(
        f'CAST("{c}" AS {types[c]}) AS "{c}"' if c in lossy else f'"{c}"'
        for c in table.column_names
    )
    local.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS SELECT {columns} FROM "{name}{RAW}"')
    return True


Rows = TypeVar("Rows", pa.Table, pa.RecordBatch)


def decrypt_outputs(rows: Rows, outputs: list[LateOutput], ciphers: CipherCache) -> Rows:
    """The local plan's result (or a batch of it) with ``outputs`` decrypted in place."""
    for out in outputs:
        column = rows.column(out.position)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        plain = decrypt_values(column, ciphers.get(out.scan.table, out.enc), out.enc, None)
        plain = result_array(plain, out.enc.sql_type)
        rows = rows.set_column(out.position, rows.schema.field(out.position).name, plain)
    return rows


def decrypted_schema(schema: pa.Schema, outputs: list[LateOutput]) -> pa.Schema:
    """``schema`` of the local plan's result, as ``decrypt_outputs`` returns it."""
    for out in outputs:
        field = schema.field(out.position)
        schema = schema.set(out.position, field.with_type(result_type(out.enc.sql_type)))
    return schema
