"""Arrow binary and string columns to and from the native kernels' buffers.

A kernel takes a column as three numpy views of its Arrow buffers (offsets
widened to int64, data, and a validity bitmap starting at row 0) and returns
the buffers of a ``binary`` column, which become a pyarrow array without a
copy. Nothing here loops over values in Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veil.errors import ParameterError

_NARROW = (pa.types.is_binary, pa.types.is_string)
_WIDE = (pa.types.is_large_binary, pa.types.is_large_string)
_EMPTY_DATA = np.empty(0, dtype=np.uint8)


@dataclass(frozen=True)
class ColumnBuffers:
    """One Arrow binary column, as the native kernels take it."""

    offsets: np.ndarray
    data: np.ndarray
    validity: np.ndarray | None
    validity_buffer: pa.Buffer | None
    null_count: int

    @property
    def rows(self) -> int:
        return len(self.offsets) - 1

    def native_args(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        return self.offsets, self.data, self.validity


def column_buffers(array: pa.Array) -> ColumnBuffers:
    """Views of ``array``'s buffers, honouring a non-zero ``array.offset``."""
    if pa.types.is_string_view(array.type) or pa.types.is_binary_view(array.type):
        array = array.cast(pa.large_binary())  # views have no offsets buffer; one copy
    offset_type = _offset_type(array.type)
    rows = len(array)
    buffers = array.buffers()
    if rows == 0 or buffers[1] is None:
        offsets = np.zeros(rows + 1, dtype=np.int64)
    else:
        all_offsets = np.frombuffer(buffers[1], dtype=offset_type)
        offsets = all_offsets[array.offset : array.offset + rows + 1].astype(np.int64)
    data = _EMPTY_DATA if buffers[2] is None else np.frombuffer(buffers[2], dtype=np.uint8)
    validity_buffer = None
    validity = None
    if array.null_count:
        # A fresh bitmap from is_valid starts at row 0 whatever the slice.
        validity_buffer = pc.is_valid(array).buffers()[1]
        validity = np.frombuffer(validity_buffer, dtype=np.uint8)
    return ColumnBuffers(offsets, data, validity, validity_buffer, array.null_count)


def binary_array(offsets: np.ndarray, data: np.ndarray, like: ColumnBuffers) -> pa.BinaryArray:
    """Wrap kernel output as a ``binary`` array with the NULLs of ``like``."""
    return pa.Array.from_buffers(
        pa.binary(),
        len(offsets) - 1,
        [like.validity_buffer, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=like.null_count,
    )


def map_binary_column(values: Any, kernel: Callable[[pa.Array], pa.Array]) -> Any:
    """Apply a whole-array ``kernel`` to an Array, ChunkedArray or numpy array.

    Arrow in gives Arrow out (chunk by chunk); numpy in gives a numpy object
    array of ``bytes`` (None for NULL).
    """
    if isinstance(values, pa.ChunkedArray):
        chunks = [kernel(chunk) for chunk in values.chunks]
        return pa.chunked_array(chunks, type=pa.binary())
    if isinstance(values, pa.Array):
        return kernel(values)
    if isinstance(values, np.ndarray):
        return kernel(pa.array(values)).to_numpy(zero_copy_only=False)
    raise ParameterError(
        f"expected a pyarrow Array, ChunkedArray or numpy array, got {type(values).__name__}"
    )


def _offset_type(arrow_type: pa.DataType) -> type[np.integer[Any]]:
    if any(test(arrow_type) for test in _NARROW):
        return np.int32
    if any(test(arrow_type) for test in _WIDE):
        return np.int64
    raise ParameterError(
        f"expected a binary or string column, got {arrow_type}; "
        "encode other types to bytes before encrypting them"
    )
