"""Sealed blocks of rows (``veil.crypto.rowblocks``): round trips, and every misplaced block refused."""

from __future__ import annotations

import pyarrow as pa
import pytest

from veil.crypto.keys import MasterKey
from veil.crypto.rowblocks import VERSION, BlockIntegrityError, RowBlocks

pytestmark = pytest.mark.unit

MASTER = MasterKey(bytes(range(32)))


@pytest.mark.parametrize(
    "values",
    [
        pa.array([b"alpha", None, b"", b"\x00\xff" * 100], pa.binary()),
        pa.array([0, -1, None, 2**63 - 1, -(2**63)], pa.int64()),
        pa.array([], pa.binary()),
    ],
)
def test_round_trip(values: pa.Array) -> None:
    key = RowBlocks.from_master(MASTER, "blocks:t.c", "t_1.c_1")
    sealed = key.seal(4096, values)
    assert sealed[0] == VERSION
    assert key.open(4096, len(values), sealed).equals(values)


def test_repeated_text_compresses() -> None:
    key = RowBlocks.from_master(MASTER, "blocks:t.c", "t_1.c_1")
    values = pa.array([f"carefully final deposits {i % 50}".encode() for i in range(8192)])
    assert len(key.seal(0, values)) < values.nbytes // 5


def test_a_block_opens_only_in_its_place() -> None:
    key = RowBlocks.from_master(MASTER, "blocks:t.c", "t_1.c_1")
    values = pa.array([b"x", b"y"])
    sealed = key.seal(10, values)
    other_column = RowBlocks.from_master(MASTER, "blocks:t.c", "t_1.c_2")
    other_scope = RowBlocks.from_master(MASTER, "blocks:t.d", "t_1.c_1")
    flipped = sealed[:-1] + bytes([sealed[-1] ^ 1])
    for opener, first, count, block in [
        (key, 11, 2, sealed),  # moved to other rows
        (key, 10, 1, sealed),  # row count changed
        (other_column, 10, 2, sealed),
        (other_scope, 10, 2, sealed),
        (key, 10, 2, flipped),
    ]:
        with pytest.raises(BlockIntegrityError, match="does not decrypt"):
            opener.open(first, count, block)
    with pytest.raises(BlockIntegrityError, match="format version"):
        key.open(10, 2, bytes([VERSION + 1]) + sealed[1:])


def test_two_seals_differ() -> None:
    key = RowBlocks.from_master(MASTER, "blocks:t.c", "t_1.c_1")
    values = pa.array([b"same"])
    assert key.seal(0, values) != key.seal(0, values)  # random nonces


def test_repeated_strings_seal_smaller_and_open_as_strings() -> None:
    import pyarrow as pa

    from veil.crypto.rowblocks import RowBlocks

    blocks = RowBlocks(bytes(32), "c_x")
    clerks = pa.array([f"Clerk#{i % 40:09d}" if i % 9 else None for i in range(8192)])
    unique = pa.array([f"comment {i} of many words" for i in range(8192)])
    for values in (clerks, unique):
        opened = blocks.open(5, len(values), blocks.seal(5, values))
        assert opened.type == pa.string() and opened.equals(values)
    assert len(blocks.seal(0, clerks)) < len(blocks.seal(0, clerks.cast(pa.large_string()))) / 2


@pytest.mark.parametrize(
    "values",
    [
        pa.array([1, None, -3, 2**40], pa.int64()).slice(1),  # a slice, with NULLs
        pa.array([1.5, -2.25, None], pa.float64()),
        pa.array([7, 8, 9], pa.int16()),
        pa.array([1, 2], pa.int8()),  # one byte: nothing to shuffle
        pa.array([True, None, False]),
        pa.array([12345, None, -1], pa.decimal128(9, 2)),
        pa.array([0, 19000], pa.date32()),
        pa.array([b"ab", b"cd"], pa.binary(2)),
    ],
)
def test_fixed_width_values_round_trip_shuffled(values: pa.Array) -> None:
    key = RowBlocks.from_master(MASTER, "blocks:t.c", "t_1.c_1")
    assert key.open(3, len(values), key.seal(3, values)).equals(values)


def test_small_numbers_seal_smaller_shuffled() -> None:
    """Version 2 groups the values' bytes by place: the high bytes of small numbers
    compress to almost nothing."""
    import numpy as np

    from veil.crypto import rowblocks

    key = RowBlocks.from_master(MASTER, "blocks:t.c", "t_1.c_1")
    values = pa.array(np.random.default_rng(1).integers(0, 2_000_000, 8192), pa.int64())
    assert len(key.seal(0, values)) < 0.9 * len(_sealed_v1(key, 0, values))
    assert rowblocks.VERSION == 2


def test_version_1_blocks_still_open() -> None:
    """Blocks sealed before the shuffle (version 1, under the same key) open as they were."""
    key = RowBlocks.from_master(MASTER, "blocks:t.c", "t_1.c_1")
    for values in (pa.array([5, None, -7], pa.int64()), pa.array(["a", None, "b"])):
        old = _sealed_v1(key, 40, values)
        assert old[0] == 1
        assert key.open(40, len(values), old).equals(values)
        with pytest.raises(BlockIntegrityError, match="does not decrypt"):
            key.open(40, len(values), bytes([2]) + old[1:])  # the version is bound too


def _sealed_v1(key: RowBlocks, first_id: int, values: pa.Array) -> bytes:
    """A block as version 1 sealed it: the IPC stream of the values as they are."""
    import os
    import struct

    from veil.crypto import rowblocks

    sink = pa.BufferOutputStream()
    batch = pa.record_batch([values], names=["v"])
    with pa.ipc.new_stream(sink, batch.schema, options=rowblocks._IPC) as writer:
        writer.write_batch(batch)
    nonce = os.urandom(rowblocks.NONCE_BYTES)
    aad = bytes([1]) + struct.pack("<qi", first_id, len(values)) + key._column
    return bytes([1]) + nonce + key._aead.encrypt(nonce, sink.getvalue().to_pybytes(), aad)
