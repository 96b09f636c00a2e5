"""Turning plaintext rows into server rows, per the physical design.

Used by the loader and by DML: evaluate each server column's source (a column,
or a per-row expression evaluated by an in-process DuckDB), encode, encrypt
column-wise. Row ids are sequential (``veil.session.row_ids``): the caller gives
the first id of the batch.

Values outside a column's declared domain are refused here, before anything
is encrypted or written (``DeclaredDomainError``). A row whose per-row
expression DuckDB cannot compute (its value lies beyond the expression's type:
``Overflow in multiplication of DECIMAL(18)``) is valid and is stored: its
precomputed DET/OPE value is the mark just beyond the expression's domain on
the value's side (so comparisons with any value of the type stay right, and
decoding it fails, which sends a query reading it to the client, where DuckDB
reports its overflow), or NULL where int64 has no room for the mark; its HOM
row sets the group's (encrypted) overflow flag (``veil.ciphers.hom_group``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from veil.ciphers.ashe_sums import AsheSumsCipher
from veil.ciphers.blocks import block_columns, block_key, seal_blocks
from veil.ciphers.columns import ColumnCipher, RowBoundCipher, column_cipher
from veil.ciphers.fitted_rnd import FittedRowBound
from veil.ciphers.sources import Sources
from veil.crypto.keys import MasterKey
from veil.crypto.rowrnd import RowRnd, reseal_columns, xor_columns
from veil.design.domains import check_declared, sentinels
from veil.design.model import BLOCKS, RND, Encryption, TableDesign
from veil.encoding import LOSSLESS_KINDS, encode

_BATCH_VIEW = "__veil_plain_batch"
_RAW_BATCH = "__veil_plain_batch_raw"


@dataclass(frozen=True)
class Resealed:
    """Stored row-bound RND values to carry to new row ids without decrypting them.

    A point UPDATE writes its rows under fresh ids (``veil.session.row_ids``),
    so every row-bound RND column changes even where its value does not. A
    stored value XOR the keystreams of its old id and of its new one is its
    plaintext under the new id, which is what decrypting and encrypting it
    again made (issue 41: decoding and encoding the unassigned columns was most
    of a point UPDATE's client work). The old ciphertexts must be under the key
    the encryptor seals with (the same table design's: ``resealable``).
    """

    ids: np.ndarray  # the stored rows' ids, in ``plain``'s row order
    columns: dict[str, pa.Array] = field(default_factory=dict)  # server column: stored values


class TableEncryptor:
    """Encrypts batches of one table's plaintext rows; caches its column ciphers."""

    def __init__(self, master: MasterKey, table: TableDesign):
        self.table = table
        self._ciphers: dict[str, ColumnCipher] = {
            e.name: column_cipher(master, e, rnd_context(table, e))
            for e in table.encryptions
            if e.scheme != BLOCKS
        }
        self._blocks = {e.name: block_key(master, table, e) for e in block_columns(table)}
        self._sums = AsheSumsCipher(master, table.sums) if table.sums is not None else None
        self._connection: duckdb.DuckDBPyConnection | None = None
        self._resealable: dict[str, bool] = {}  # by server column (``resealable``)

    @property
    def _local(self) -> duckdb.DuckDBPyConnection:
        """An in-process DuckDB for per-row expressions, opened on first use: opening one
        costs tens of milliseconds, and most statements' tables have none."""
        if self._connection is None:
            self._connection = duckdb.connect()
        return self._connection

    def server_schema(self, sample: pa.Table) -> pa.Schema:
        return self.encrypt(sample.slice(0, 0), 0).schema

    def prime(self, values: Mapping[str, pa.Array]) -> None:
        """Encrypt each named server column's (encoded) ``values`` once and drop the result:
        a cipher that keeps the pairs it computed (OPE) then finds later repeats of them
        (``veil.load.ope_warm``). A column whose values fail is left to the batches,
        which report the failure as they would have."""
        for name, encoded in values.items():
            cipher = self._ciphers.get(name)
            if cipher is None or isinstance(cipher, RowBoundCipher):
                continue
            with contextlib.suppress(Exception):  # warming is optional; the rows are not
                cipher.encrypt(encoded)

    def resealable(self, name: str) -> bool:
        """Whether server column ``name`` is row-bound RND that ``Resealed`` can carry to new
        ids: the RND layer over the encoded value (fitted to the loaded range or not;
        not an onion's)."""
        known = self._resealable.get(name)
        if known is not None:
            return known
        cipher = self._ciphers.get(name)
        enc = next((e for e in self.table.encryptions if e.name == name), None)
        found = (
            enc is not None
            and enc.scheme == RND  # its own value's RND: no inner scheme, no onion layer
            and enc.outer is None
            and isinstance(cipher, RowBoundCipher)
            and type(cipher) in (RowBoundCipher, FittedRowBound)
            and isinstance(cipher.resealing_layer(), RowRnd)
        )
        self._resealable[name] = found
        return found

    def encrypt(
        self,
        plain: pa.Table,
        first_id: int,
        *,
        unwritten: Collection[str] = (),
        resealed: Resealed | None = None,
    ) -> pa.Table:
        """Server rows for ``plain`` (whose columns are the table's plaintext columns).

        The rows get the row ids ``first_id``, ``first_id + 1``, ...; the row
        id is also a HOM group's slot (its packs are encrypted apart,
        ``HomGroupCipher``) and the id ASHE sums are encrypted under.
        ``unwritten``: server columns left out, never encrypted (an UPDATE in place
        keeps them as they are: ``veil.session.dml.unchanged_columns``).
        ``resealed``: server columns taken from stored rows (``Resealed``), whose
        sources ``plain`` need not hold.
        """
        sources = self.sources(plain)
        ids = np.arange(first_id, first_id + len(plain), dtype=np.int64)
        columns: dict[str, pa.Array] = {self.table.row_id: pa.array(ids)}
        if self.table.hom is not None:
            columns[self.table.hom.slot_column] = columns[self.table.row_id]
        if self._sums is not None:
            columns.update(self._sums.encrypt(sources, ids))
        sealing: list[tuple[str, RowBoundCipher, pa.Array]] = []
        moving: list[tuple[str, RowBoundCipher, pa.Array]] = []
        carried = resealed.columns if resealed is not None else {}
        for enc in self.table.encryptions:
            if enc.scheme == BLOCKS or enc.name in unwritten:
                continue  # in the side table (``blocks``), or kept by the caller
            if enc.name in carried:
                cipher = self._ciphers[enc.name]
                if not self.resealable(enc.name):
                    raise ValueError(f"server column {enc.name} cannot be resealed")
                assert isinstance(cipher, RowBoundCipher)
                columns[enc.name] = pa.nulls(0)  # its place in the table's order
                moving.append((enc.name, cipher, carried[enc.name]))
                continue
            encoded = encode(sources[enc.source], enc.sql_type)
            if enc.source in sources.overflow:
                encoded = _marked(encoded, sources.overflow[enc.source], enc)
            cipher = self._ciphers[enc.name]
            columns[enc.name] = pa.nulls(0)  # its place in the table's order
            if not isinstance(cipher, RowBoundCipher):
                columns[enc.name] = cipher.encrypt(encoded)
            elif len(ids) <= _SEALED_TOGETHER and isinstance(cipher.sealing_layer(), RowRnd):
                sealing.append((enc.name, cipher, cipher.sealing_input(encoded)))
            else:
                columns[enc.name] = cipher.encrypt_rows(ids, encoded)
        columns.update(_sealed_together(ids, sealing))
        if moving:
            assert resealed is not None
            columns.update(_resealed(resealed.ids, ids, moving))
        return pa.table(columns)

    def blocks(self, plain: pa.Table, first_id: int) -> pa.Table | None:
        """The side-table rows of the BLOCKS columns of ``plain`` (ids from ``first_id``)."""
        if not self._blocks:
            return None
        encoded = {
            e.name: encode(plain.column(e.source), e.sql_type) for e in block_columns(self.table)
        }
        return seal_blocks(self.table, self._blocks, encoded, first_id)

    def check_domains(self, plain: pa.Table) -> None:
        """Refuse a batch with a value outside its column's declared domain."""
        for column in self.table.columns:
            if column.bounds is None or column.name not in plain.column_names:
                continue
            encoded = encode(plain.column(column.name), column.sql_type)
            if encoded.null_count == len(encoded):
                continue
            bounds = pc.min_max(encoded)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            check_declared(column, low, high, table=self.table.name)

    def sources(self, plain: pa.Table) -> Sources:
        """Every column and per-row expression a server column (or the HOM group) stores.

        Checks the declared domains first, so a refused batch writes nothing.
        """
        self.check_domains(plain)
        expressions = sorted(set(self._expression_types()))
        sources = Sources()
        sources.update({name: plain.column(name) for name in plain.column_names})
        if not expressions:
            return sources
        self._register_typed(plain)
        try:
            select = ", ".join(f"CAST({expr} AS {self._type_of(expr)})" for expr in expressions)
            try:
                computed = self._local.sql(f"SELECT {select} FROM {_BATCH_VIEW}").to_arrow_table()
                sources.update(zip(expressions, computed.columns, strict=True))
            except duckdb.Error:  # some row's value lies beyond its type: find which
                for expr in expressions:
                    sources[expr], signs = self._computed_or_marked(expr)
                    if signs.any():
                        sources.overflow[expr] = signs
        finally:
            self._local.execute(f"DROP VIEW IF EXISTS {_BATCH_VIEW}")
            self._local.unregister(_RAW_BATCH)
        return sources

    def _register_typed(self, plain: pa.Table) -> None:
        """The batch as ``_BATCH_VIEW``, with each column of its own SQL type: a source
        reads HUGEINT, BIT and nested columns as DuckDB's text of them (``load.sources``),
        which per-row expressions (``st.a``, ``hu + 1``) cannot read."""
        self._local.register(_RAW_BATCH, plain)
        texts = [
            c
            for c in self.table.columns
            if c.sql_type.kind in LOSSLESS_KINDS
            and c.name in plain.column_names
            and pa.types.is_string(plain.column(c.name).type)
        ]
        casts = ", ".join(f'CAST("{c.name}" AS {c.sql_type.name}) AS "{c.name}"' for c in texts)
        replace = f" REPLACE ({casts})" if texts else ""
        self._local.execute(
            f"CREATE OR REPLACE TEMP VIEW {_BATCH_VIEW} AS SELECT *{replace} FROM {_RAW_BATCH}"
        )

    def _computed_or_marked(self, expr: str) -> tuple[pa.Array, np.ndarray]:
        """The expression where DuckDB computes it (else NULL), and the overflow signs."""
        value = f"TRY(CAST({expr} AS {self._type_of(expr)}))"
        real = f"TRY(CAST({_in_doubles(expr)} AS DOUBLE))"
        result = self._local.sql(f"SELECT {value}, {real} FROM {_BATCH_VIEW}").to_arrow_table()
        computed, approximate = result.column(0).combine_chunks(), result.column(1)
        lost = pc.and_(pc.is_null(computed), pc.is_valid(approximate))
        signs = pc.if_else(lost, pc.sign(approximate), 0).fill_null(0)
        return computed, signs.to_numpy(zero_copy_only=False).astype(np.int8)

    def _type_of(self, expression: str) -> str:
        return self._expression_types()[expression]

    def _expression_types(self) -> dict[str, str]:
        found = {e.source: e.type for e in self.table.encryptions if e.is_expression}
        for group in (self.table.hom, self.table.sums):
            if group is not None:
                found |= {s: t for s, t in zip(group.sources, group.types, strict=True)}
        names = {c.name for c in self.table.columns}
        return {s: t for s, t in found.items() if s not in names}


# Up to this many rows (a point write's), the row-bound RND columns XOR their keystreams
# in one native call, which holds the GIL: larger batches keep a call per column.
_SEALED_TOGETHER = 64


def _sealed_together(
    ids: np.ndarray, sealing: list[tuple[str, RowBoundCipher, pa.Array]]
) -> dict[str, pa.Array]:
    """The row-bound RND columns ``sealing`` (name, cipher, ``sealing_input``) encrypted
    in one call: a call per column cost ~20-60 us of Python around a few AES blocks, ~7
    of them per TPC-H orders row (issue 41). Equal, column by column, to ``encrypt_rows``."""
    if not sealing:
        return {}
    pairs = [(cipher.sealing_layer(), values) for _, cipher, values in sealing]
    xored = xor_columns(ids, pairs)
    return {
        name: cipher.sealed(values)
        for (name, cipher, _), values in zip(sealing, xored, strict=True)
    }


def _resealed(
    old_ids: np.ndarray, new_ids: np.ndarray, moving: list[tuple[str, RowBoundCipher, pa.Array]]
) -> dict[str, pa.Array]:
    """Stored row-bound RND values under ``old_ids`` carried to ``new_ids`` (``Resealed``).

    A narrow column's stored value is its low bits only: the XORs leave the
    keystreams' high bits above them, which ``sealed`` masks off as it does
    for a new value.
    """
    layers = [(c.resealing_layer(), c.reseal_input(stored)) for _, c, stored in moving]
    if len(new_ids) <= _SEALED_TOGETHER:
        moved = reseal_columns(old_ids, new_ids, layers)
    else:  # a call per column, without the GIL
        moved = [layer.encrypt(new_ids, layer.decrypt(old_ids, v)) for layer, v in layers]
    return {
        name: cipher.resealed(values, stored)
        for (name, cipher, stored), values in zip(moving, moved, strict=True)
    }


def rnd_context(table: TableDesign, encryption: Encryption) -> bytes:
    """Associated data binding an RND ciphertext to its server column."""
    return f"{table.server_name}.{encryption.name}".encode()


def _in_doubles(expression: str) -> str:
    """``expression`` with every column read as DOUBLE (never overflows; for signs)."""
    tree = sqlglot.parse_one(expression, read="duckdb")
    doubled = tree.transform(
        lambda node: exp.cast(node.copy(), "DOUBLE") if isinstance(node, exp.Column) else node
    )
    return doubled.sql(dialect="duckdb")


def _marked(encoded: pa.Array, signs: np.ndarray, enc: Encryption) -> pa.Array:
    """Overflowed rows get the mark beyond the precomputed column's domain (or stay NULL)."""
    domain = enc.params.get("domain")
    if not isinstance(domain, list) or not enc.params.get("overflow"):
        return encoded
    marks = sentinels(int(domain[0]), int(domain[1]))
    if marks is None:
        return encoded
    values = encoded.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    valid = encoded.is_valid().to_numpy(zero_copy_only=False)
    values[signs > 0], values[signs < 0] = marks[1], marks[0]
    valid = valid | (signs != 0)
    return pa.array(values, pa.int64(), mask=~valid)
