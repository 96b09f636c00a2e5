"""Turning plaintext rows into server rows, per the physical design.

Used by the loader and by DML: evaluate each server column's source (a column,
or a per-row expression evaluated by an in-process DuckDB), encode, encrypt
column-wise. Row ids are random 63-bit integers, so they reveal neither
insertion order nor anything about the row.
"""

from __future__ import annotations

import secrets

import duckdb
import numpy as np
import pyarrow as pa

from veil.crypto.keys import MasterKey
from veil.design.model import OPE, Encryption, TableDesign
from veil.encoding import encode
from veil.exec.ciphers import ColumnCipher, column_cipher

_BATCH_VIEW = "__veil_plain_batch"


class TableEncryptor:
    """Encrypts batches of one table's plaintext rows; caches its column ciphers."""

    def __init__(self, master: MasterKey, table: TableDesign):
        self.table = table
        self._ciphers: dict[str, ColumnCipher] = {
            e.name: column_cipher(master, e, rnd_context(table, e)) for e in table.encryptions
        }
        self._rng = np.random.default_rng(secrets.randbits(128))
        self._local = duckdb.connect()

    def server_schema(self, sample: pa.Table) -> pa.Schema:
        return self.encrypt(sample.slice(0, 0)).schema

    def encrypt(
        self, plain: pa.Table, row_ids: pa.Array | None = None, first_slot: int = 0
    ) -> pa.Table:
        """Server rows for ``plain`` (whose columns are the table's plaintext columns).

        A table with a HOM group gets its rows' slots ``first_slot``,
        ``first_slot + 1``, ... (their packs are encrypted apart, ``hom_values``).
        """
        sources = self.sources(plain)
        if row_ids is None:
            row_ids = pa.array(self._rng.integers(0, 2**63 - 1, len(plain), dtype=np.int64))
        columns = {self.table.row_id: row_ids}
        if self.table.hom is not None:
            slots = np.arange(first_slot, first_slot + len(plain), dtype=np.int64)
            columns[self.table.hom.slot_column] = pa.array(slots)
        for enc in self.table.encryptions:
            encoded = encode(sources[enc.source], enc.sql_type)
            columns[enc.name] = self._ciphers[enc.name].encrypt(encoded)
        return pa.table(columns)

    def sources(self, plain: pa.Table) -> dict[str, pa.Array]:
        """Every column and per-row expression a server column (or the HOM group) stores."""
        expressions = sorted(set(self._expression_types()))
        sources = {name: plain.column(name) for name in plain.column_names}
        if expressions:
            select = ", ".join(f"CAST({expr} AS {self._type_of(expr)})" for expr in expressions)
            self._local.register(_BATCH_VIEW, plain)
            try:
                computed = self._local.sql(f"SELECT {select} FROM {_BATCH_VIEW}").to_arrow_table()
            finally:
                self._local.unregister(_BATCH_VIEW)
            sources.update(zip(expressions, computed.columns, strict=True))
        return sources

    def _type_of(self, expression: str) -> str:
        return self._expression_types()[expression]

    def _expression_types(self) -> dict[str, str]:
        found = {e.source: e.type for e in self.table.encryptions if e.is_expression}
        group = self.table.hom
        if group is not None:
            found |= {s: t for s, t in zip(group.sources, group.types, strict=True)}
        return {s: t for s, t in found.items() if not s.isidentifier()}


def rnd_context(table: TableDesign, encryption: Encryption) -> bytes:
    """Associated data binding an RND ciphertext to its server column."""
    return f"{table.server_name}.{encryption.name}".encode()


def ope_bits(low: int | None, high: int | None) -> int:
    """OPE plaintext width for encoded values in [low, high], with headroom for inserts."""
    magnitude = max(abs(low or 0), abs(high or 0))
    return max(16, min(64, magnitude.bit_length() + 1 + 4))


def uses_ope(table: TableDesign) -> list[Encryption]:
    return [e for e in table.encryptions if e.scheme == OPE]
