"""Decrypting late: an IN-subquery's keys found over ciphertexts (``decrypt_late``), and
result columns the local plan left encrypted (``decrypt_outputs``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeVar

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from veil.exec.fetch import decrypt_values
from veil.sql.plan import LateKeys, LateOutput, Scan

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
    with _lossless_arrow(local):
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


@contextlib.contextmanager
def _lossless_arrow(local: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Arrow results that keep every DuckDB type, for a result registered back: a SUM of
    integers is a HUGEINT, which plain Arrow turns into DECIMAL(38,0), and a set
    operation over it would then take a decimal's type (DuckDB's own extension types
    read back as what they were)."""
    local.execute("SET arrow_lossless_conversion = true")
    try:
        yield
    finally:
        local.execute("SET arrow_lossless_conversion = false")


Rows = TypeVar("Rows", pa.Table, pa.RecordBatch)


def decrypt_outputs(rows: Rows, outputs: list[LateOutput], ciphers: CipherCache) -> Rows:
    """The local plan's result (or a batch of it) with ``outputs`` decrypted in place."""
    for out in outputs:
        column = rows.column(out.position)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        plain = decrypt_values(column, ciphers.get(out.scan.table, out.enc), out.enc, None)
        plain = plain.cast(out.enc.sql_type.arrow_type())
        rows = rows.set_column(out.position, rows.schema.field(out.position).name, plain)
    return rows


def decrypted_schema(schema: pa.Schema, outputs: list[LateOutput]) -> pa.Schema:
    """``schema`` of the local plan's result, as ``decrypt_outputs`` returns it."""
    for out in outputs:
        field = schema.field(out.position)
        schema = schema.set(out.position, field.with_type(out.enc.sql_type.arrow_type()))
    return schema
