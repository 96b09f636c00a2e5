"""HOM: Paillier with packing, so the server can compute SUM without keys.

A Paillier plaintext holds about 2047 bits; one table value needs 64. MONOMI
(§5.2-5.3, after Ge and Zdonik) packs several columns of a row and several
rows into one plaintext, in fixed-width slots::

    plaintext = sum over slots i of  v_i * 2^(slot_bits * i)
    slot i = (row position i // columns, column i % columns)

Multiplying ciphertexts adds plaintexts, hence every slot at once: one
multiplication modulo n^2 per ciphertext sums all packed columns.

**Signed values without counts.** A slot holds a signed value and the
plaintext is the exact (signed) integer above, taken modulo n. Decryption
reads it back as a signed integer (above n/2 is negative) and splits it into
balanced digits, each in ``[-2^(slot_bits-1), 2^(slot_bits-1))``: add
``B = sum_i 2^(slot_bits-1) * 2^(slot_bits*i)`` and every slot becomes a plain
non-negative field without borrows. This is exact as long as every slot's
sum stays in that range, so negative values, zeros and NULLs (stored as 0)
need no per-column count of what was summed.

**Padding.** A slot has ``value_bits + ceil(log2(max_summands))`` bits,
rounded up to whole bytes (packing then runs on numpy byte matrices).
``max_summands`` is the most *ciphertexts* one sum may multiply: each slot
receives one value per ciphertext, and sums across row positions are added
by the client in Python integers. k values of ``value_bits`` bits sum to at
most ``k * 2^(value_bits-1)`` in magnitude, which fits when
``k <= 2^padding``.

**Flags.** A packer with ``flags=True`` stores one more value per row, 0 or
1 (Veil: "this row's expression could not be computed"), not in a full slot
but in a narrow unsigned *counter* above the slots, one per row position::

    plaintext = slots + 2^(slot_bits * slots) * sum over positions i of f_i * 2^(counter_bits * i)

A sum of at most ``max_summands`` ciphertexts counts at most
``max_summands`` flags per position, so ``bit_length(max_summands) + 1``
bits hold it and keep the plaintext below ``n/2``; the balanced slots below
borrow nothing from the counters (adding ``B`` makes them non-negative).
Decryption returns a row's flag count as one more column after the values.

**Summing a subset of rows.** The server can only multiply whole
ciphertexts; it cannot pick slots. So:

* ``rows_per_ciphertext=1`` (several columns of one row): any subset of rows
  sums on the server. Use it where queries filter rows before summing.
* ``rows_per_ciphertext=R > 1`` (the default fills the plaintext): row ``i``
  lives in ciphertext ``i // R`` at position ``i % R`` (``locate``). The server
  multiplies the ciphertexts whose rows all match; for each ciphertext where
  only some rows match it returns the ciphertext and the matching positions,
  and the client adds ``decrypt_sums(c, positions=...)``. ``split_selection``
  does this split for a set of matching row ids. Full-table and whole-group
  sums (MONOMI's case) touch only full ciphertexts.

**Server side.** ``add_ciphertexts`` (row by row), ``sum_ciphertexts`` (a
column) and ``sum_ciphertext_groups`` (one sum per list, for engines without
user-defined aggregates: ``SELECT g, list(c) ... GROUP BY g``) need only the
public ``n_square`` (``HomPacker.n_square``).

NULL is packed as 0, which is right for SUM; keep whether a value is NULL in
another column (COUNT(col) tells an all-NULL sum from a zero one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from gmpy2 import mpz

from veil.crypto.keys import MasterKey
from veil.crypto.paillier import DEFAULT_BITS, PaillierKey, PaillierPublicKey
from veil.crypto.paillier_wire import (
    add_ciphertexts,
    from_wire,
    parse_array,
    sum_ciphertext_groups,
    sum_ciphertexts,
    wire_array,
)
from veil.distinct import distinct
from veil.errors import DomainError, MalformedCiphertextError, ParameterError

__all__ = [
    "HomPacker",
    "PackingLayout",
    "PaillierKey",
    "PaillierPublicKey",
    "add_ciphertexts",
    "sum_ciphertext_groups",
    "sum_ciphertexts",
]

MAX_VALUE_BITS = 64
DEFAULT_MAX_SUMMANDS = 2**32


def slot_width(value_bits: int, max_summands: int) -> int:
    """Bits of a slot that sums ``max_summands`` values of ``value_bits`` bits (whole bytes)."""
    return -(-(value_bits + (max_summands - 1).bit_length()) // 8) * 8


def counter_width(max_summands: int) -> int:
    """Bits of a flag counter: up to ``max_summands``, its top bit left clear (signed read)."""
    return max_summands.bit_length() + 1


def rows_that_fit(
    capacity_bits: int, value_bits: int, columns: int, *, max_summands: int, flags: bool = False
) -> int:
    """How many rows of ``columns`` values (and a flag each) one plaintext holds."""
    row_bits = slot_width(value_bits, max_summands) * columns
    return capacity_bits // (row_bits + (counter_width(max_summands) if flags else 0))


@dataclass(frozen=True)
class PackingLayout:
    """``slots`` signed fields of ``slot_bits`` bits, then ``counters`` unsigned fields.

    Counters (``counter_bits`` each) hold non-negative counts below
    ``2^(counter_bits-1)``; see "Flags" in the module docstring.
    """

    slot_bits: int
    slots: int
    counters: int = 0
    counter_bits: int = 0

    def __post_init__(self) -> None:
        if self.slot_bits < 2 or self.slots < 1:
            raise ParameterError(
                f"a packing layout needs slot_bits >= 2 and slots >= 1, "
                f"got slot_bits={self.slot_bits}, slots={self.slots}"
            )
        if self.counters < 0 or (self.counters and self.counter_bits < 2):
            raise ParameterError(
                f"counters need counter_bits >= 2, got counters={self.counters}, "
                f"counter_bits={self.counter_bits}"
            )

    @property
    def slot_region_bits(self) -> int:
        return self.slot_bits * self.slots

    @property
    def plaintext_bits(self) -> int:
        return self.slot_region_bits + self.counters * self.counter_bits

    @property
    def slot_limit(self) -> int:
        """Every slot (and every sum of slots) lies in ``[-limit, limit)``."""
        return 1 << (self.slot_bits - 1)

    def check_fits(self, public: PaillierPublicKey) -> None:
        if self.plaintext_bits > public.capacity_bits:
            raise ParameterError(
                f"{self.slots} slots of {self.slot_bits} bits need {self.plaintext_bits} bits; "
                f"a {public.bits}-bit key holds {public.capacity_bits}: use fewer slots"
            )

    def pack(self, values: np.ndarray, counts: np.ndarray | None = None) -> list[int]:
        """Signed plaintexts of a ``(ciphertexts, slots)`` int64 matrix.

        ``counts``: the ``(ciphertexts, counters)`` counter values (0 if None).
        """
        values = np.ascontiguousarray(values, dtype=np.int64)
        limit = self.slot_limit
        if self.slot_bits < 64 and values.size and (values.min() < -limit or values.max() >= limit):
            raise DomainError(
                "value does not fit its packed slot", domain=f"integers [{-limit}, {limit})"
            )
        if self.slot_bits % 8 or self.slot_bits > 128:
            plaintexts = [self._pack_row(row) for row in values.tolist()]
        else:
            fields = _biased_fields(values, self.slot_bits)
            offset = self._bias_total()
            row_bytes = fields.reshape(len(values), self.slot_region_bits // 8)
            plaintexts = [int.from_bytes(row.tobytes(), "little") - offset for row in row_bytes]
        return self._add_counts(plaintexts, counts)

    def _add_counts(self, plaintexts: list[int], counts: np.ndarray | None) -> list[int]:
        """Counters above the slots; only ciphertexts with a non-zero count need work."""
        if counts is None or not self.counters:
            return plaintexts
        counts = np.asarray(counts, dtype=np.int64).reshape(len(plaintexts), self.counters)
        if counts.size and (counts.min() < 0 or counts.max() >= 1 << (self.counter_bits - 1)):
            raise DomainError(
                "count does not fit its counter", domain=f"0..2^{self.counter_bits - 1}"
            )
        for index in np.flatnonzero(counts.any(axis=1)).tolist():
            plaintexts[index] += sum(
                int(c) << (self.slot_region_bits + self.counter_bits * i)
                for i, c in enumerate(counts[index].tolist())
            )
        return plaintexts

    def _pack_row(self, row: Sequence[int]) -> int:
        return sum(int(v) << (self.slot_bits * i) for i, v in enumerate(row))

    def unpack(self, plaintext: int) -> list[int]:
        """Signed slot values (balanced digits) of a signed plaintext, then the counters."""
        fields = plaintext + self._bias_total()
        counts = fields >> self.slot_region_bits
        bits = self.counter_bits
        counters = [(counts >> (bits * i)) & ((1 << bits) - 1) for i in range(self.counters)]
        if not 0 <= fields < 1 << self.plaintext_bits or any(c >> (bits - 1) for c in counters):
            raise DomainError(
                "a packed sum overflowed its slots: more ciphertexts were added than the "
                "packer's max_summands, or the ciphertext belongs to another packer",
                domain=f"{self.slots} slots of {self.slot_bits} bits",
            )
        mask, half = (1 << self.slot_bits) - 1, self.slot_limit
        slots = [((fields >> (self.slot_bits * i)) & mask) - half for i in range(self.slots)]
        return slots + counters

    def _bias_total(self) -> int:
        return sum(self.slot_limit << (self.slot_bits * i) for i in range(self.slots))


def _biased_fields(values: np.ndarray, slot_bits: int) -> np.ndarray:
    """Little-endian bytes of ``v + 2^(slot_bits-1)`` per slot, shape (..., slot_bytes)."""
    slot_bytes = slot_bits // 8
    raw = values.view(np.uint64)
    if slot_bits <= 64:
        biased = (raw + np.uint64(1 << (slot_bits - 1))).astype("<u8")
        return biased.view(np.uint8).reshape(*values.shape, 8)[..., :slot_bytes]
    # Wider slots: the low 64 bits are v in two's complement; the high part is
    # 2^(slot_bits-65), less the borrow a negative v takes from it.
    high = (np.uint64(1 << (slot_bits - 65)) - (values < 0).astype(np.uint64)).astype("<u8")
    low = raw.astype("<u8")
    both = np.concatenate(
        [
            low.view(np.uint8).reshape(*values.shape, 8),
            high.view(np.uint8).reshape(*values.shape, 8),
        ],
        axis=-1,
    )
    return both[..., :slot_bytes]


class HomPacker:
    """Encrypts integer columns into packed Paillier ciphertexts and reads sums.

    ``slot_bits`` is the bit width of each value: values are signed integers in
    ``[-2^(slot_bits-1), 2^(slot_bits-1))``. ``flags``: each row also has a 0/1
    flag, given and returned as one more column after the ``columns`` values
    and counted in narrow counters (the attribute ``columns`` counts it,
    ``value_columns`` does not). ``names`` name the packed columns (and the
    flag) in errors. See the module docstring for the layout and subset sums.
    """

    def __init__(
        self,
        key: PaillierKey,
        slot_bits: int,
        columns: int,
        *,
        max_summands: int = DEFAULT_MAX_SUMMANDS,
        rows_per_ciphertext: int | None = None,
        names: Sequence[str] | None = None,
        column: str | None = None,
        flags: bool = False,
    ):
        if not 1 <= slot_bits <= MAX_VALUE_BITS:
            raise ParameterError(f"packed values have 1..64 bits, got slot_bits={slot_bits}")
        if columns < 1 or max_summands < 1:
            raise ParameterError("a packer needs columns >= 1 and max_summands >= 1")
        self.columns = columns + flags  # arrays given to encrypt and sums returned
        if names is not None and len(names) != self.columns:
            raise ParameterError(f"{self.columns} columns but {len(names)} names")
        self.key, self.public = key, key.public
        self.value_bits, self.value_columns, self.max_summands = slot_bits, columns, max_summands
        self.flags, self.column = flags, column
        self.names = (
            list(names) if names else [f"{column or 'packed'}[{i}]" for i in range(self.columns)]
        )
        width = slot_width(slot_bits, max_summands)
        fit = rows_that_fit(
            self.public.capacity_bits, slot_bits, columns, max_summands=max_summands, flags=flags
        )
        if rows_per_ciphertext is None:
            rows_per_ciphertext = fit
        if not 1 <= rows_per_ciphertext <= fit:
            raise ParameterError(
                f"{columns} columns of {width}-bit slots fit {fit} rows in a "
                f"{self.public.bits}-bit plaintext, asked for {rows_per_ciphertext}; "
                "pack fewer columns or rows, or lower max_summands"
            )
        self.rows_per_ciphertext = rows_per_ciphertext
        counters, counter_bits = (
            (rows_per_ciphertext, counter_width(max_summands)) if flags else (0, 0)
        )
        self.layout = PackingLayout(width, rows_per_ciphertext * columns, counters, counter_bits)
        self.layout.check_fits(self.public)

    @classmethod
    def from_master(
        cls,
        master: MasterKey,
        scope: str,
        slot_bits: int,
        columns: int,
        *,
        bits: int = DEFAULT_BITS,
        max_summands: int = DEFAULT_MAX_SUMMANDS,
        rows_per_ciphertext: int | None = None,
        names: Sequence[str] | None = None,
        column: str | None = None,
        flags: bool = False,
    ) -> HomPacker:
        """A packer under the Paillier key of ``scope`` (``KeyLabel("hom", scope)``)."""
        key = PaillierKey.from_master(master, scope, bits)
        return cls(
            key,
            slot_bits,
            columns,
            max_summands=max_summands,
            rows_per_ciphertext=rows_per_ciphertext,
            names=names,
            column=column,
            flags=flags,
        )

    @property
    def n_square(self) -> int:
        """What the server needs to add these ciphertexts."""
        return int(self.public.n_square)

    # -- encryption -----------------------------------------------------

    def encrypt(self, columns: Sequence[object]) -> pa.Array | pa.ChunkedArray:
        """``ceil(rows / rows_per_ciphertext)`` ciphertexts of equal-length columns."""
        plaintexts = self.plaintexts(self.row_matrix(columns))
        n = self.public.n
        ciphertexts = self.key.raw_encrypt_many([mpz(p) % n for p in plaintexts])
        return wire_array(ciphertexts, self.public.width)

    def plaintexts(self, matrix: np.ndarray) -> list[int]:
        """Signed plaintexts of a ``row_matrix``, ``rows_per_ciphertext`` rows each."""
        per, k = self.rows_per_ciphertext, self.value_columns
        count = -(-len(matrix) // per)
        padded = np.zeros((count * per, self.columns), np.int64)
        padded[: len(matrix)] = matrix
        by_pack = padded.reshape(count, per, self.columns)
        counts = by_pack[:, :, k] if self.flags else None
        return self.layout.pack(by_pack[:, :, :k].reshape(count, per * k), counts)

    def row_matrix(self, columns: Sequence[object]) -> np.ndarray:
        """The ``(rows, fields)`` int64 matrix of checked values (flags last); NULL as 0."""
        if len(columns) != self.columns:
            raise ParameterError(f"packer takes {self.columns} columns, got {len(columns)}")
        arrays = [self._checked(values, i) for i, values in enumerate(columns)]
        if len({len(a) for a in arrays}) > 1:
            raise ParameterError("packed columns must have the same number of rows")
        return np.stack(arrays, axis=1) if arrays else np.zeros((0, 0), np.int64)

    def _checked(self, values: object, index: int) -> np.ndarray:
        if isinstance(values, pa.ChunkedArray | pa.Array):
            values = values.fill_null(0).to_numpy(zero_copy_only=False)
        array = np.asarray(values)
        if array.dtype.kind not in "iu":
            raise ParameterError(
                f"column {self.names[index]!r}: packed values are integers, got {array.dtype}"
            )
        low, high = -(1 << (self.value_bits - 1)), 1 << (self.value_bits - 1)
        if index >= self.value_columns:
            low, high = 0, 2  # a flag
        if array.size and (int(array.min()) < low or int(array.max()) >= high):
            raise DomainError(
                "value out of range for its packed slot",
                column=self.names[index],
                domain=f"integers [{low}, {high})",
            )
        return array.astype(np.int64)

    # -- decryption -----------------------------------------------------

    def decrypt_sums(
        self, ciphertext: bytes, *, positions: Sequence[int] | None = None
    ) -> list[int]:
        """Per-column sums of a (summed) ciphertext, over row ``positions`` (all by default)."""
        c = from_wire(ciphertext, self.public.n_square, column=self.column)
        return self._column_sums(c, positions)

    def decrypt_sums_many(self, ciphertexts: pa.Array | pa.ChunkedArray) -> list[list[int] | None]:
        """``decrypt_sums`` of every value of a column (NULL -> None), e.g. one per group."""
        parsed = parse_array(ciphertexts, self.public.n_square, column=self.column)
        return [None if c is None else self._column_sums(c, None) for c in parsed]

    def decrypt_rows(
        self, ciphertexts: pa.Array | pa.ChunkedArray, rows: int | None = None
    ) -> list[np.ndarray]:
        """The packed values themselves, one int64 array per column (first ``rows`` rows)."""
        parsed = parse_array(ciphertexts, self.public.n_square, column=self.column)
        rows_of = [self._rows(c) for c in parsed if c is not None]
        matrix = np.array(rows_of, dtype=np.int64).reshape(-1, self.columns)
        matrix = matrix[:rows] if rows is not None else matrix
        return [np.ascontiguousarray(matrix[:, i]) for i in range(self.columns)]

    def _column_sums(self, c: mpz, positions: Sequence[int] | None) -> list[int]:
        by_position = self._rows(c)
        chosen = range(self.rows_per_ciphertext) if positions is None else positions
        sums = [0] * self.columns
        for position in chosen:
            if not 0 <= position < self.rows_per_ciphertext:
                raise ParameterError(
                    f"row position {position} outside 0..{self.rows_per_ciphertext - 1}"
                )
            sums = [s + v for s, v in zip(sums, by_position[position], strict=True)]
        return sums

    def _rows(self, c: mpz) -> list[list[int]]:
        """Per row position: its values' slots, then its flag counter (if flags)."""
        plaintext = self.key.decrypt_one(c, column=self.column)
        try:
            fields = self.layout.unpack(plaintext)
        except DomainError as exc:
            raise MalformedCiphertextError(f"column {self.column!r}: {exc}") from None
        k, per = self.value_columns, self.rows_per_ciphertext
        counters = fields[k * per :]
        return [
            fields[i * k : (i + 1) * k] + ([counters[i]] if self.flags else []) for i in range(per)
        ]

    # -- subset sums ----------------------------------------------------

    def ciphertext_count(self, rows: int) -> int:
        return -(-rows // self.rows_per_ciphertext)

    def locate(self, row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ciphertext index, row position) of each row id (0-based load order)."""
        ids = np.asarray(row_ids, dtype=np.int64)
        return ids // self.rows_per_ciphertext, ids % self.rows_per_ciphertext

    def split_selection(
        self, row_ids: np.ndarray, total_rows: int
    ) -> tuple[np.ndarray, dict[int, list[int]]]:
        """Split matching rows into whole ciphertexts (server sums) and partial ones.

        Returns the indices of ciphertexts all of whose rows match, and for
        each partly matching ciphertext the matching positions (for
        ``decrypt_sums(c, positions=...)``). ``total_rows`` sizes the last one.
        """
        index, position = self.locate(distinct(np.asarray(row_ids, dtype=np.int64)))
        groups, counts = np.unique(index, return_counts=True)
        last = self.ciphertext_count(total_rows) - 1
        last_rows = total_rows - last * self.rows_per_ciphertext
        size = np.where(groups == last, last_rows, self.rows_per_ciphertext)
        full = groups[counts == size]
        partial: dict[int, list[int]] = {}
        for group in groups[counts != size].tolist():
            partial[group] = position[index == group].tolist()
        return full, partial
