"""The stored form of Paillier ciphertexts and the server's operations on them.

A ciphertext is ``0x01 || c`` where ``c`` is the ciphertext integer written
big-endian over exactly ``width = ceil(bits(n^2) / 8)`` bytes (512 bytes for a
2048-bit modulus, so 513 bytes in all). The fixed width lets a whole Arrow
column be read as one ``(rows, 1 + width)`` byte matrix without a per-value
length check, and lets the server tell a truncated value from a short one.

The server needs only ``n^2`` (public): adding two plaintexts is multiplying
their ciphertexts modulo ``n^2``. ``add_ciphertexts`` and ``sum_ciphertexts``
are pure functions of public data and never see a key.

The server's loops (``add_ciphertexts``, ``sum_ciphertexts``,
``sum_ciphertext_groups``) run in Rust on GMP (``veil._native``, module
``rust/veil-kernels/src/paillier.rs``); they take whole columns and write one
packed output buffer. Cost of one addition, 2048-bit n, measured on one core:
GMP's 4096-bit multiplication (1.3 us) and reduction modulo n^2 (2.3 us)
dominate; the per-row conversions that a Python loop over gmpy2 added (about
1.5 us: ``mpz.from_bytes`` per operand, ``to_bytes`` per result) are gone.
Header and range checks run first, on whole columns in numpy, so the errors
name the row; the kernel checks every value again before using it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
from gmpy2 import mpz

from veil import _native
from veil.crypto._native_errors import native_errors
from veil.errors import MalformedCiphertextError

CIPHERTEXT_VERSION = 0x01

# Arrow's BinaryArray addresses its data with int32 offsets.
_MAX_BINARY_BYTES = 2**31 - 1


def ciphertext_width(n_square: int) -> int:
    """Bytes of the big-endian ciphertext body (without the version byte)."""
    return (int(n_square).bit_length() + 7) // 8


def to_wire(c: int, width: int) -> bytes:
    """``0x01 || c`` as fixed-width big-endian bytes."""
    return (mpz(c) | (mpz(CIPHERTEXT_VERSION) << (8 * width))).to_bytes(width + 1, "big")


def from_wire(ciphertext: bytes, n_square: int, *, column: str | None = None) -> mpz:
    """Parse one stored ciphertext, refusing anything that is not one."""
    width = ciphertext_width(n_square)
    if len(ciphertext) != width + 1:
        raise _wrong_width(len(ciphertext), width, column)
    if ciphertext[0] != CIPHERTEXT_VERSION:
        raise _wrong_version(ciphertext[0], column)
    c = mpz.from_bytes(ciphertext[1:], "big")
    if not 0 < c < n_square:
        raise _out_of_group(column)
    return c


def wire_array(ciphertexts: Sequence[int | None], width: int) -> pa.Array | pa.ChunkedArray:
    """Build a BinaryArray of stored ciphertexts; ``None`` becomes NULL."""
    version_bit = mpz(CIPHERTEXT_VERSION) << (8 * width)
    valid = np.fromiter((c is not None for c in ciphertexts), bool, len(ciphertexts))
    data = b"".join(
        [(c | version_bit).to_bytes(width + 1, "big") for c in ciphertexts if c is not None]
    )
    return _binary_column(data, width + 1, valid)


def _binary_column(
    data: bytes | memoryview, stride: int, valid: np.ndarray
) -> pa.Array | pa.ChunkedArray:
    """A BinaryArray over ``data`` (the valid values back to back, ``stride`` bytes each).

    A ChunkedArray only when the data would pass the 2 GiB that a BinaryArray's
    int32 offsets address (about four million 2048-bit ciphertexts).
    """
    per_chunk = _MAX_BINARY_BYTES // stride
    if len(valid) <= per_chunk:
        return _binary_chunk(memoryview(data), stride, valid)
    chunks, start, view = [], 0, memoryview(data)
    for first in range(0, len(valid), per_chunk):
        part = valid[first : first + per_chunk]
        end = start + int(np.count_nonzero(part)) * stride
        chunks.append(_binary_chunk(view[start:end], stride, part))
        start = end
    return pa.chunked_array(chunks, type=pa.binary())


def _binary_chunk(data: memoryview, stride: int, valid: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(valid) + 1, np.int32)
    np.cumsum(valid * stride, out=offsets[1:])
    null_count = int(len(valid) - np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), len(valid), buffers, null_count)


def parse_array(
    ciphertexts: pa.Array | pa.ChunkedArray | Iterable[bytes | None],
    n_square: int,
    *,
    column: str | None = None,
) -> list[mpz | None]:
    """Every stored ciphertext of a column as an integer (NULL -> None)."""
    rows, valid = _valid_bodies(ciphertexts, n_square, column)
    body = rows.tobytes()
    stride = rows.shape[1]
    from_bytes = mpz.from_bytes
    values: list[mpz | None] = [
        from_bytes(body[i + 1 : i + stride], "big") for i in range(0, len(body), stride)
    ]
    if valid.all():
        return values
    out: list[mpz | None] = [None] * len(valid)
    for index, value in zip(np.flatnonzero(valid).tolist(), values, strict=True):
        out[index] = value
    return out


def _valid_bodies(
    ciphertexts: pa.Array | pa.ChunkedArray | Iterable[bytes | None],
    n_square: int,
    column: str | None,
    first_row: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The checked non-NULL ciphertexts as a (rows, 1 + width) byte matrix, and
    the validity of each row. Errors name the row of the whole column, whose
    first row is ``first_row``."""
    if isinstance(ciphertexts, pa.ChunkedArray):
        # Chunk by chunk: combining could pass a BinaryArray's 2 GiB limit.
        starts = np.cumsum([0, *(len(chunk) for chunk in ciphertexts.chunks)]).tolist()
        parts = [
            _valid_bodies(chunk, n_square, column, first_row + start)
            for chunk, start in zip(ciphertexts.chunks, starts, strict=False)
        ]
        if not parts:
            stride = ciphertext_width(n_square) + 1
            return np.zeros((0, stride), np.uint8), np.ones(0, bool)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    array = _as_binary_array(ciphertexts)
    if array.null_count == 0:
        valid = np.ones(len(array), bool)
    else:
        valid = np.asarray(array.is_valid())
        array = array.drop_null()
    positions = np.flatnonzero(valid) + first_row  # each checked value's row
    return _ciphertext_matrix(array, n_square, column, positions), valid


def _as_binary_array(ciphertexts: pa.Array | Iterable[bytes | None]) -> pa.Array:
    if not isinstance(ciphertexts, pa.Array):
        ciphertexts = pa.array(list(ciphertexts), type=pa.binary())
    kind = ciphertexts.type
    if pa.types.is_null(kind):  # an all-NULL column, e.g. ``pa.array([])``
        return ciphertexts.cast(pa.binary())
    if not any(test(kind) for test in _BINARY_TYPES):
        raise MalformedCiphertextError(
            f"Paillier ciphertexts are binary values, got a column of {kind}"
        )
    return ciphertexts


_BINARY_TYPES = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_fixed_size_binary)


def _ciphertext_matrix(
    array: pa.Array, n_square: int, column: str | None, positions: np.ndarray
) -> np.ndarray:
    """The (rows, 1 + width) byte matrix of a NULL-free binary array, checked;
    ``positions[i]`` is the row that value ``i`` came from, for the errors."""
    width = ciphertext_width(n_square)
    rows = _byte_rows(array, width, column, positions)
    bad_version = np.flatnonzero(rows[:, 0] != CIPHERTEXT_VERSION)
    if bad_version.size:
        row = int(bad_version[0])
        raise _wrong_version(int(rows[row, 0]), column, row=int(positions[row]))
    _check_in_group(rows[:, 1:], n_square, column, positions)
    return rows


def _byte_rows(
    array: pa.Array, width: int, column: str | None, positions: np.ndarray
) -> np.ndarray:
    """The values of a binary array as rows of ``1 + width`` bytes (zero-copy)."""
    stride = width + 1
    data = np.frombuffer(array.buffers()[-1] or b"", np.uint8)
    if pa.types.is_fixed_size_binary(array.type):
        if array.type.byte_width != stride:
            raise _wrong_width(array.type.byte_width, width, column)
        start = array.offset * stride
        return data[start : start + len(array) * stride].reshape(len(array), stride)
    offset_type = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    offsets = np.frombuffer(array.buffers()[1], offset_type)
    offsets = offsets[array.offset : array.offset + len(array) + 1]
    wrong = np.flatnonzero(np.diff(offsets) != stride)
    if wrong.size:
        got = int(offsets[wrong[0] + 1] - offsets[wrong[0]])
        raise _wrong_width(got, width, column, row=int(positions[wrong[0]]))
    if len(array) == 0:
        return np.zeros((0, stride), np.uint8)
    return data[offsets[0] : offsets[-1]].reshape(len(array), stride)


def _check_in_group(
    bodies: np.ndarray, n_square: int, column: str | None, positions: np.ndarray
) -> None:
    """Refuse c = 0 and c >= n^2 for every row at once.

    The leading 8 bytes decide for almost every row; only rows whose leading
    bytes equal n^2's or are all zero are compared in full.
    """
    limit = int(n_square).to_bytes(bodies.shape[1], "big")
    head = bodies[:, :8].copy().view(">u8").ravel()
    limit_head = int.from_bytes(limit[:8], "big")
    unsure = np.flatnonzero((head == limit_head) | (head == 0)).tolist()
    bad = [row for row in unsure if not 0 < int.from_bytes(bodies[row].tobytes(), "big") < n_square]
    over = np.flatnonzero(head > limit_head)
    first = min([*bad, *over[:1].tolist()], default=None)
    if first is not None:
        raise _out_of_group(column, row=int(positions[first]))


def add_ciphertexts(
    a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray, n_square: int
) -> pa.Array | pa.ChunkedArray:
    """Row by row E(x) * E(y) mod n^2 = E(x + y); NULL in either -> NULL.

    Server side, pure: needs only the public ``n_square``. Packed ciphertexts
    of one layout add slot by slot.
    """
    if len(a) != len(b):
        raise MalformedCiphertextError(
            f"cannot add ciphertext columns of different lengths ({len(a)} and {len(b)})"
        )
    left, left_valid = _valid_bodies(a, n_square, None)
    right, right_valid = _valid_bodies(b, n_square, None)
    both = left_valid & right_valid
    if not both.all():  # keep the rows present on both sides
        left, right = left[both[left_valid]], right[both[right_valid]]
    with native_errors():
        data = _native.paillier_multiply_rows(
            _modulus_bytes(n_square), _native_column(left), _native_column(right)
        )
    return _binary_column(data.data, left.shape[1], both)


def sum_ciphertexts(column: pa.Array | pa.ChunkedArray, n_square: int) -> bytes:
    """The product of a column's ciphertexts, E(sum of its plaintexts).

    Server side, pure. NULLs are skipped (SQL's SUM ignores them). An empty or
    all-NULL column gives the trivial encryption of 0 (``c = 1``): the caller
    tells "no rows" from "sum 0" with COUNT, as SQL does.
    """
    rows, _ = _valid_bodies(column, n_square, None)
    with native_errors():
        total = _native.paillier_product(_modulus_bytes(n_square), _native_column(rows))
    return total.tobytes()


def sum_ciphertext_groups(
    groups: pa.Array | pa.ChunkedArray, n_square: int
) -> pa.Array | pa.ChunkedArray:
    """``sum_ciphertexts`` of every list in a list column: one sum per group.

    Server side, pure. For an engine without user-defined aggregates: collect
    each group's ciphertexts with ``list(c) ... GROUP BY`` and pass that
    column. A NULL list gives NULL; NULL ciphertexts are skipped; an empty
    list gives the trivial encryption of 0.
    """
    if isinstance(groups, pa.ChunkedArray):
        groups = groups.combine_chunks()
    if not (pa.types.is_list(groups.type) or pa.types.is_large_list(groups.type)):
        raise MalformedCiphertextError(
            f"expected a list column of Paillier ciphertexts, got {groups.type}"
        )
    # flatten() drops the members behind NULL lists, whose lengths count as 0.
    members, member_valid = _valid_bodies(groups.flatten(), n_square, None)
    lengths = np.asarray(groups.value_lengths().fill_null(0), np.int64)
    group_valid = np.asarray(groups.is_valid(), bool)
    # Group bounds among the present members: NULL members are not in ``members``.
    present_before = np.concatenate([[0], np.cumsum(member_valid, dtype=np.int64)])
    bounds = present_before[np.concatenate([[0], np.cumsum(lengths)])]
    # NULL lists hold no members, so dropping their bounds leaves the rest contiguous.
    bounds = np.append(bounds[:-1][group_valid], bounds[-1])
    with native_errors():
        data = _native.paillier_group_products(
            _modulus_bytes(n_square), _native_column(members), bounds
        )
    return _binary_column(data.data, members.shape[1], group_valid)


def _modulus_bytes(n_square: int) -> bytes:
    n_square = int(n_square)
    return n_square.to_bytes(ciphertext_width(n_square), "big")


def _native_column(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, None]:
    """A checked (rows, stride) byte matrix as a NULL-free native binary column."""
    count, stride = rows.shape
    offsets = np.arange(0, (count + 1) * stride, stride, dtype=np.int64)
    return offsets, np.ascontiguousarray(rows).reshape(-1), None


def _wrong_width(got: int, width: int, column: str | None, row: int | None = None) -> Exception:
    return MalformedCiphertextError(
        f"{_where(column, row)}a Paillier ciphertext for this key is {width + 1} bytes "
        f"(version byte + {width}-byte big-endian integer), got {got}; the value is "
        "truncated, from another key size, or not a Paillier ciphertext"
    )


def _wrong_version(version: int, column: str | None, row: int | None = None) -> Exception:
    return MalformedCiphertextError(
        f"{_where(column, row)}unknown Paillier ciphertext version 0x{version:02x} "
        f"(this Veil reads 0x{CIPHERTEXT_VERSION:02x}); the value is corrupt or was written "
        "by a newer Veil"
    )


def _out_of_group(column: str | None, row: int | None = None) -> Exception:
    return MalformedCiphertextError(
        f"{_where(column, row)}Paillier ciphertext is not an integer in 1..n^2-1; "
        "it is corrupt or belongs to a different key"
    )


def _where(column: str | None, row: int | None) -> str:
    parts = []
    if column:
        parts.append(f"column {column!r}")
    if row is not None:
        parts.append(f"row {row}")
    return ", ".join(parts) + ": " if parts else ""
