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
