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

**Slot widths and bounded products.** A slot holds ``value_bits`` (the
widest value domain of the group's expressions, ``veil.design.domains``: the
types', or declared ones) plus ``h = HomGroup.summand_bits`` bits of
headroom, rounded up to whole bytes, so a product of at most ``2^h`` packs
sums any values the types admit without overflow. The server never
multiplies more: the HOM statement groups the packs of a (group, mask) by
chunk ``pack // 2^h`` too (``veil.sql.remote._packed_sums``), and the client
adds the chunks' exact sums. ``sized`` picks the most rows per plaintext
that any ``h >= MIN_SUMMAND_BITS`` allows, then the largest ``h`` (at most
``MAX_SUMMAND_BITS``) that keeps them: TPC-H lineitem (six sums, up to 61
bits) gets ``h = 19``, 80-bit slots and 4 rows, where a fixed ``h = 32``
(96-bit slots) held 3. A lower ``h`` costs decryptions: one product per
mask and chunk a group touches; chunks of at least ``2^12`` packs keep them
few (SF 1 lineitem: 1.5M packs, 3 chunks of ``2^19``).

**Overflowed rows.** A group whose expressions DuckDB may fail to compute
for some rows (a product beyond DECIMAL(18)) packs a 0/1 flag per row
(``HomGroup.overflow_flags``): 1 where the row's value could not be
computed (its expression slots hold 0). The flag is not a full slot but an
``h + 2``-bit counter above the slots (``veil.crypto.hom``, "Flags"), so it
costs lineitem 21 bits a row instead of an 80-bit slot (which would leave 3
rows), and it stays encrypted: the server learns nothing new (a public
per-row flag column would have told it which rows overflow even where no
DET/OPE column of the expression shows it). A sum whose counter is non-zero
raises ``OverflowedRowsError``, and the query runs on the client instead,
where DuckDB reports the overflow exactly as it would over plaintext.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from veil.crypto.hom import HomPacker, rows_that_fit
from veil.crypto.hom_pool import EncryptionPool
from veil.crypto.keys import MasterKey
from veil.crypto.paillier import PaillierKey
from veil.design.model import HomGroup
from veil.encoding import SqlType, encode
from veil.errors import ParameterError, VeilError

PACK_COLUMN = "pack"
CIPHERTEXT_COLUMN = "ct"
# Headroom bits h of a slot (a product multiplies at most 2^h packs): at most
# 2^32 (HomGroup's default), and at least 2^12 packs per chunk, so that chunks
# cost few decryptions.
MIN_SUMMAND_BITS, MAX_SUMMAND_BITS = 12, 32


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
        names = group.sources + (["(overflowed row)"] if group.overflow_flags else [])
        self.packer = HomPacker.from_master(
            master,
            group.key_scope,
            group.value_bits,
            len(group.sources),
            max_summands=2**group.summand_bits,
            rows_per_ciphertext=group.rows_per_ciphertext,
            names=names,
            column=f"HOM group of {len(group.sources)} sums",
            flags=group.overflow_flags,
        )

    @classmethod
    def sized(cls, master: MasterKey, group: HomGroup, bits: int | None = None) -> HomGroupCipher:
        """Fill the plaintext with rows, then headroom (``bits``: a new value width)."""
        if bits is not None:
            group.value_bits = bits
        capacity = PaillierKey.from_master(master, group.key_scope).public.capacity_bits
        group.summand_bits, group.rows_per_ciphertext = headroom(
            capacity, group.value_bits, len(group.sources), group.overflow_flags
        )
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
        the overflow flag (the last column) of the rows they mark.
        """
        encoded: list[object] = [
            encode(sources[source], SqlType(type_name))
            for source, type_name in zip(self.group.sources, self.group.types, strict=True)
        ]
        if self.group.overflow_flags:
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
        plaintexts = self.packer.plaintexts(values)
        count = len(plaintexts)
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
        if not self.group.overflow_flags:
            return sums
        if any(s is not None and s[-1] for s in sums):
            raise OverflowedRowsError(
                "the sum includes rows whose summed expression overflows its type; "
                "the client computes it instead"
            )
        return [None if s is None else s[:-1] for s in sums]


def headroom(capacity_bits: int, value_bits: int, columns: int, flags: bool) -> tuple[int, int]:
    """``(summand_bits, rows_per_ciphertext)``: the most rows, then the most headroom.

    Rows per plaintext fall as the headroom ``h`` grows, so the largest ``h``
    whose rows equal those of ``MIN_SUMMAND_BITS`` keeps the most rows.
    """

    def rows(bits: int) -> int:
        fit = rows_that_fit(capacity_bits, value_bits, columns, max_summands=2**bits, flags=flags)
        return min(fit, MAX_ROWS_PER_CIPHERTEXT)

    most = rows(MIN_SUMMAND_BITS)
    bits = max(b for b in range(MIN_SUMMAND_BITS, MAX_SUMMAND_BITS + 1) if rows(b) == most)
    return bits, most
