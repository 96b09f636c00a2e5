"""A point row's decoding without cast kernels (issue 41) answers as the casts do."""

from __future__ import annotations

import pyarrow as pa
import pytest

from veil import encoding
from veil.encoding import SqlType


def _both(array: pa.Array, sql_type: SqlType, monkeypatch: pytest.MonkeyPatch) -> pa.Array:
    small = encoding.decode(array, sql_type)
    monkeypatch.setattr(encoding, "_SMALL_ROWS", -1)  # the cast kernels
    cast = encoding.decode(array, sql_type)
    monkeypatch.undo()
    assert small.type == cast.type
    assert small.equals(cast)
    return small


@pytest.mark.parametrize(
    "values",
    [[b"Clerk#000000921", None, b""], [], ["\u00e9t\u00e9".encode(), b"x"]],
)
def test_strings_as_cast(values: list[bytes | None], monkeypatch: pytest.MonkeyPatch) -> None:
    array = pa.array(values, pa.binary())
    _both(array, SqlType("VARCHAR"), monkeypatch)
    _both(array.slice(1), SqlType("VARCHAR"), monkeypatch)


def test_invalid_utf8_raises_as_cast() -> None:
    with pytest.raises(pa.ArrowInvalid):
        encoding.decode(pa.array([b"ok", b"\xff\xfe"], pa.binary()), SqlType("VARCHAR"))


@pytest.mark.parametrize("values", [[0, -(1 << 31), (1 << 31) - 1], [5, None], []])
@pytest.mark.parametrize("type_name", ["INTEGER", "DATE"])
def test_int32_as_cast(
    values: list[int | None], type_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    array = pa.array([7, *values], pa.int64()).slice(1)
    _both(array, SqlType(type_name), monkeypatch)


def test_int32_overflow_raises_as_cast() -> None:
    with pytest.raises(pa.ArrowInvalid):
        encoding.decode(pa.array([1 << 31], pa.int64()), SqlType("INTEGER"))
