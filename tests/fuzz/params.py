"""Parameter values as JSON (regression files keep their types: DECIMAL, DATE, DOUBLE)."""

from __future__ import annotations

import datetime as dt
import decimal


def encode_params(params: list[object]) -> list[object]:
    out: list[object] = []
    for value in params:
        if isinstance(value, decimal.Decimal):
            out.append({"decimal": str(value)})
        elif isinstance(value, dt.date):
            out.append({"date": value.isoformat()})
        elif isinstance(value, float):
            out.append({"double": repr(value)})
        else:
            out.append(value)
    return out


def decode_params(values: list[object]) -> list[object]:
    out: list[object] = []
    for value in values:
        if isinstance(value, dict) and "decimal" in value:
            out.append(decimal.Decimal(value["decimal"]))
        elif isinstance(value, dict) and "date" in value:
            out.append(dt.date.fromisoformat(value["date"]))
        elif isinstance(value, dict) and "double" in value:
            out.append(float(value["double"]))
        else:
            out.append(value)
    return out
