"""Plaintext values of ``index`` fields as signed or unsigned 64-bit order keys.

Each index type maps its values to an integer whose order is the values'
order, so that OPE can encrypt it and the server can compare it:

* ``int``: the value itself (int64); one-to-one.
* ``datetime``: milliseconds since the epoch (BSON's precision); one-to-one.
* ``decimal``: ``floor(value * 10**scale)``; values closer than ``10**-scale``
  share a key, so server comparisons are widened and re-checked on the client.
* ``string``: the first 8 bytes of the UTF-8 encoding, big-endian, zero-padded
  (unsigned); strings sharing a prefix share a key. Equality uses the field's
  keyed hash instead, which is one-to-one.
"""

from __future__ import annotations

import calendar
import datetime as dt
import math
from decimal import Decimal, InvalidOperation
from typing import Any

from bson.decimal128 import Decimal128

from veil.documents.errors import FieldTypeError
from veil.documents.schema import FieldSpec
from veil.errors import DomainError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
PREFIX_BYTES = 8


def order_key(spec: FieldSpec, value: Any) -> int:
    """The order key of ``value`` in ``spec``'s index; a wrong type raises."""
    if spec.type == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _wrong_type(spec, value, "an integer")
        return _int64(spec, value)
    if spec.type == "datetime":
        if not isinstance(value, dt.datetime):
            raise _wrong_type(spec, value, "a datetime")
        return _int64(spec, datetime_ms(value))
    if spec.type == "decimal":
        return _int64(spec, _scaled_floor(spec, value))
    if not isinstance(value, str):
        raise _wrong_type(spec, value, "a string")
    prefix = value.encode("utf-8", "surrogatepass")[:PREFIX_BYTES]
    return int.from_bytes(prefix.ljust(PREFIX_BYTES, b"\0"), "big")


def key_value(spec: FieldSpec, key: int) -> Any:
    """The value of an order key, for the one-to-one types (``int``, ``datetime``)."""
    if spec.type == "datetime":
        epoch = dt.datetime(1970, 1, 1)
        return epoch + dt.timedelta(milliseconds=key)
    return key


def datetime_ms(value: dt.datetime) -> int:
    """Milliseconds since the epoch, as BSON stores a datetime (naive means UTC)."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC)
    return calendar.timegm(value.timetuple()) * 1000 + value.microsecond // 1000


def _scaled_floor(spec: FieldSpec, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal128, Decimal)):
        raise _wrong_type(spec, value, "a number")
    if isinstance(value, int):
        return value * 10**spec.scale
    exact = value.to_decimal() if isinstance(value, Decimal128) else value
    if isinstance(exact, float):
        if math.isnan(exact):
            raise FieldTypeError(f"field {spec.path!r}: NaN has no place in an index")
        if math.isinf(exact):
            raise DomainError("infinity cannot be indexed", column=spec.path, domain="int64 keys")
        return math.floor(exact * 10**spec.scale)
    try:
        return int((exact * (Decimal(10) ** spec.scale)).to_integral_value("ROUND_FLOOR"))
    except (InvalidOperation, ValueError, OverflowError):
        raise FieldTypeError(f"field {spec.path!r}: {value!r} cannot be indexed") from None


def _int64(spec: FieldSpec, key: int) -> int:
    if not INT64_MIN <= key <= INT64_MAX:
        raise DomainError(
            f"value key {key} is outside the index's range", column=spec.path, domain="int64"
        )
    return key


def _wrong_type(spec: FieldSpec, value: Any, wanted: str) -> FieldTypeError:
    return FieldTypeError(
        f"field {spec.path!r} is an index of type {spec.type!r}: it takes {wanted}, "
        f"got {type(value).__name__} {value!r}"
    )
