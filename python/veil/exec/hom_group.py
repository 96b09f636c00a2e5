"""A table's packed HOM group: rows -> packed Paillier ciphertexts, products -> sums.

Layout (MONOMI §5.2-5.3): the ``k`` summed expressions of a row occupy ``k``
consecutive slots, ``R = rows_per_ciphertext`` rows share one plaintext, and
the row with slot ``s`` is at position ``s % R`` of pack ``s // R``::

    plaintext(pack) = sum over positions i < R, expressions j < k of
                      value(row pack*R + i, j) * 2^(slot_bits * (i*k + j))

The server multiplies the ciphertexts of the packs some rows of a group fall
into; the client decrypts each product once and adds, per expression, the
slots at the positions of the bit mask ``m`` the server returned with it
(bit ``i`` set when the group's rows include position ``i`` of those packs).
Packs are grouped by mask, so every slot the client adds holds a sum over
exactly the group's rows; slots at other positions hold other rows' sums and
are ignored.

Slot widths come from the expressions' value domains (``veil.design.domains``:
the types', or declared ones), so a sum of up to ``MAX_SUMMANDS`` packs of any
values the types admit never overflows. A group whose expressions DuckDB may
fail to compute for some rows (a product beyond DECIMAL(18)) has one more
slot per row (``HomGroup.overflow_slot``): 1 where the row's value could not
be computed (its expression slots hold 0). A sum that includes such a row
raises ``OverflowedRowsError``, and the query runs on the client instead,
where DuckDB reports the overflow exactly as it would over plaintext.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from veil.crypto.hom import HomPacker
from veil.crypto.hom_pool import EncryptionPool
from veil.crypto.keys import MasterKey
from veil.design.model import HomGroup
from veil.encoding import SqlType, encode
from veil.errors import ParameterError, VeilError

PACK_COLUMN = "pack"
CIPHERTEXT_COLUMN = "ct"
MAX_SUMMANDS = 2**32  # ciphertexts one product may multiply (packs of one table, with inserts)


class OverflowedRowsError(VeilError):
    """A packed sum includes rows whose summed expression DuckDB cannot compute."""

    anchor = "overflowed-rows"


def side_schema() -> pa.Schema:
    return pa.schema([(PACK_COLUMN, pa.int64()), (CIPHERTEXT_COLUMN, pa.binary())])


def in_positions(mask: int, rows: int) -> list[int]:
    """The row positions a pack mask selects (bit i <-> position i)."""
    if mask < 0 or mask >> rows:
        raise ParameterError(f"pack mask {mask:#x} selects positions beyond 0..{rows - 1}")
    return [i for i in range(rows) if mask >> i & 1]


def slot_masks(slots: np.ndarray, rows: int) -> dict[int, int]:
    """``{pack: mask}`` of a set of slots (what the server's bit_or computes)."""
    packs, positions = np.divmod(np.asarray(slots, np.int64), rows)
    masks: dict[int, int] = {}
    for pack, position in zip(packs.tolist(), positions.tolist(), strict=True):
        masks[pack] = masks.get(pack, 0) | 1 << position
    return masks


# A group's partial packs each bring their own position mask, and every
# distinct (group, mask) costs the client one decryption (~2 ms): at most
# 2^R masks per group keeps that bounded, at the price of more ciphertexts
# (one per R rows) when only a few sums share a row.
MAX_ROWS_PER_CIPHERTEXT = 8


class HomGroupCipher:
    """Packs, encrypts and reads one table's HOM group."""

    def __init__(self, master: MasterKey, group: HomGroup):
        self.group = group
        self._master = master
        names = group.sources + (["(overflowed row)"] if group.overflow_slot else [])
        self.packer = HomPacker.from_master(
            master,
            group.key_scope,
            group.value_bits,
            len(names),
            max_summands=MAX_SUMMANDS,
            rows_per_ciphertext=group.rows_per_ciphertext,
            names=names,
            column=f"HOM group of {len(group.sources)} sums",
        )

    @classmethod
    def sized(cls, master: MasterKey, group: HomGroup, bits: int | None = None) -> HomGroupCipher:
        """Fill the plaintext with as many rows as fit (``bits``: a new value width)."""
        if bits is not None:
            group.value_bits = bits
        fit = HomPacker.from_master(
            master,
            group.key_scope,
            group.value_bits,
            len(group.sources) + group.overflow_slot,
            max_summands=MAX_SUMMANDS,
        ).rows_per_ciphertext
        group.rows_per_ciphertext = min(fit, MAX_ROWS_PER_CIPHERTEXT)
        return cls(master, group)

    @property
    def rows(self) -> int:
        return self.group.rows_per_ciphertext

    @property
    def n_square(self) -> int:
        return self.packer.n_square

    def values(self, sources: dict[str, pa.Array | pa.ChunkedArray]) -> np.ndarray:
        """The ``(rows, k)`` int64 matrix of encoded values; NULL packs as 0.

        ``sources`` is ``TableEncryptor.sources``: its ``overflow`` marks set
        the overflow slot (the last column) of the rows they mark.
        """
        encoded: list[object] = [
            encode(sources[source], SqlType(type_name))
            for source, type_name in zip(self.group.sources, self.group.types, strict=True)
        ]
        if self.group.overflow_slot:
            rows = len(encoded[0]) if encoded else 0  # type: ignore[arg-type]
            lost = np.zeros(rows, np.int64)
            marks: dict[str, np.ndarray] = getattr(sources, "overflow", {})
            for source in self.group.sources:
                if source in marks:
                    lost |= marks[source] != 0
            encoded.append(lost)
        return self.packer.row_matrix(encoded)

    def encrypt_packs(
        self, values: np.ndarray, first_pack: int, pool: EncryptionPool | None = None
    ) -> pa.Table:
        """Side-table rows ``(pack, ct)`` for ``values`` starting at ``first_pack``."""
        per, k = self.rows, self.packer.columns
        count = -(-len(values) // per)
        padded = np.zeros((count * per, k), np.int64)
        padded[: len(values)] = values
        plaintexts = self.packer.layout.pack(padded.reshape(count, per * k))
        if pool is not None:
            ciphertexts = pool.encrypt(plaintexts)
        else:
            with EncryptionPool(self._master, self.group.key_scope) as own:
                ciphertexts = own.encrypt(plaintexts)
        packs = pa.array(np.arange(first_pack, first_pack + count, dtype=np.int64))
        return pa.table([packs, pa.array(ciphertexts, pa.binary())], schema=side_schema())

    def masked_sums(self, products: pa.Array, masks: Sequence[int]) -> list[list[int] | None]:
        """Per product: the sums of each expression over the mask's positions."""
        decrypt: Callable[..., list[int]] = self.packer.decrypt_sums
        sums = [
            None if c is None else decrypt(c, positions=in_positions(int(m), self.rows))
            for c, m in zip(products.to_pylist(), masks, strict=True)
        ]
        if not self.group.overflow_slot:
            return sums
        if any(s is not None and s[-1] for s in sums):
            raise OverflowedRowsError(
                "the sum includes rows whose summed expression overflows its type; "
                "the client computes it instead"
            )
        return [None if s is None else s[:-1] for s in sums]
