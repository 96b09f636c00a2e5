"""A table's ASHE sums, stored: rows -> word ciphertexts under row ids; block sums -> words.

Each summed expression of a row is encoded as an int64 (a decimal as its
unscaled integer; NULL as 0, the server counts non-NULL rows from other
columns) and stored in one or two BIGINT columns (``AsheSums.columns``), each
the ASHE encryption of one word under the row's id and a key of its own. Two
words, the low 32 bits (unsigned) and the rest (signed), where a sum of
``BLOCK_ROWS`` values of the expression's domain could leave int64. A query's
block sums are turned back into plaintext sums by ``veil.exec.ashe_sums``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from veil.ciphers.sources import Sources
from veil.crypto.ashe import Ashe
from veil.crypto.keys import MasterKey
from veil.design.model import FLAG_FIELD_BITS, AsheSums
from veil.encoding import SqlType, encode

LOW_BITS = 32
LOW_MASK = np.int64((1 << LOW_BITS) - 1)


class AsheSumsCipher:
    """The ASHE keys of one table's summed expressions (one per stored word)."""

    def __init__(self, master: MasterKey, sums: AsheSums):
        self.sums = sums
        names = [n for words in sums.columns for n in words]
        if sums.overflow_column is not None:
            names.append(sums.overflow_column)
        self._keys = {
            name: Ashe.from_master(master, f"{sums.key_scope}/{name}", column=name)
            for name in names
        }
        # words stored modulo 2**bits (bits < 64): their ciphertexts and sums are masked
        bits = sums.word_bits or [[64] * len(words) for words in sums.columns]
        self._bits = {
            name: b
            for words, sizes in zip(sums.columns, bits, strict=True)
            for name, b in zip(words, sizes, strict=True)
        }
        # the low word of a two-word value is unsigned: its sums are not sign-extended;
        # so are the sums of 0/1 overflow flags
        self._unsigned = {words[0] for words in sums.columns if len(words) == 2}
        if sums.overflow_column is not None:
            self._bits[sums.overflow_column] = sums.overflow_bits
            self._unsigned.add(sums.overflow_column)
        self._masks = {n: np.int64((1 << b) - 1) for n, b in self._bits.items() if b < 64}
        # masked below 2**31, so an INTEGER column holds any of them (``AsheSums.stored_bits``)
        narrow = sums.stored_bits == 32
        self._int32 = {n for n, b in self._bits.items() if narrow and b <= 31}

    def encrypt(self, sources: Sources, ids: np.ndarray) -> dict[str, pa.Array]:
        """The server columns of a batch whose rows get the row ids ``ids``."""
        out: dict[str, pa.Array] = {}
        flags = np.zeros(len(ids), dtype=np.int64)
        counters = np.zeros(len(ids), dtype=np.int64)  # NULL counters of the flags word
        limits: list[int | None] = [None] * len(self.sums.sources)
        if self.sums.limits is not None:
            limits = list(self.sums.limits)
        for index, (source, type_name, names, limit) in enumerate(
            zip(self.sums.sources, self.sums.types, self.sums.columns, limits, strict=True)
        ):
            encoded = encode(sources[source], SqlType(type_name))
            values = encoded.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            marks = sources.overflow.get(source)
            lost = marks != 0 if marks is not None else None
            if limit is not None:  # beyond the words' range: summed by the client
                beyond = (values > limit) | (values < -limit)
                lost = beyond if lost is None else lost | beyond
            field = self.sums.null_field(index)
            if field is not None and encoded.null_count:
                nulls = encoded.is_null().to_numpy(zero_copy_only=False).astype(np.int64)
                if field == 0:  # no NULL at load: flagged, at most once a row
                    flags |= nulls
                else:
                    counters += nulls << (FLAG_FIELD_BITS * field)
            if lost is not None:
                values[lost] = 0
                flags[lost] = 1
            words = [values] if len(names) == 1 else [values & LOW_MASK, values >> LOW_BITS]
            if lost is not None and len(names) == 2 and self.sums.flag_bit is not None:
                words[1] = words[1] + (lost.astype(np.int64) << self.sums.flag_bit)
            for name, word in zip(names, words, strict=True):
                out[name] = self._stored(name, self._keys[name].encrypt(ids, word))
        if self.sums.overflow_column is not None:
            name = self.sums.overflow_column
            out[name] = self._stored(name, self._keys[name].encrypt(ids, flags + counters))
        return out

    def _stored(self, name: str, ciphertexts: np.ndarray) -> pa.Array:
        """A word column's server values: masked to its bits, 4 bytes each where narrow."""
        stored = ciphertexts & self._masks[name] if name in self._masks else ciphertexts
        return pa.array(stored.astype(np.int32) if name in self._int32 else stored)

    def block_sums(
        self, name: str, totals: pa.Array, blocks: np.ndarray, masks: np.ndarray
    ) -> np.ndarray:
        """The plaintext int64 sum of each block's words, from the server's SUMs."""
        pads = self._keys[name].pad_sums_blocks(blocks, masks)
        sums = low_words(totals) - pads
        bits = self._bits.get(name, 64)
        if bits == 64:
            return sums.view(np.int64)
        sums &= np.uint64((1 << bits) - 1)
        if name not in self._unsigned:  # sign-extend from ``bits``
            top = np.uint64(1 << (bits - 1))
            sums = (sums ^ top) - top
        return sums.view(np.int64)


def low_words(totals: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The server's exact sums mod 2**64 (the low 64 bits of their two's complement).

    Both backends return integer SUMs as decimal128(38, 0), whose storage is
    the unscaled int128, little-endian: its low word is the sum mod 2**64.
    """
    array = totals.combine_chunks() if isinstance(totals, pa.ChunkedArray) else totals
    if array.null_count:
        raise ValueError("a server sum or mask is NULL")  # never for a group with rows
    if pa.types.is_decimal(array.type):
        if array.type.scale != 0:
            array = array.cast(pa.decimal128(38, 0))
        words = np.frombuffer(array.buffers()[1], dtype=np.uint64)
        return words[2 * array.offset : 2 * (array.offset + len(array)) : 2].copy()
    values = array.to_numpy(zero_copy_only=False)
    return (
        values.astype(np.int64, copy=False).view(np.uint64)
        if values.dtype.kind == "i"
        else values.astype(np.uint64)
    )
