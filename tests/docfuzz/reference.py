"""The expected answer of an aggregation, from the plain collection.

FerretDB 1.24 computes one accumulator of a ``$group`` (later ones come back
0) and has no ``$avg``, ``$min``, ``$max`` or ``$push``, so the expected rows
of a ``$group`` are computed here, simply, from the documents plain FerretDB
matched. The group keys and their order are FerretDB's own: its ``$group`` by
the same key with ``$count`` gives them, and a key computed here that it does
not give is a fault of this module, reported as such.
"""

from __future__ import annotations

from typing import Any

from pymongo.collection import Collection

_MISSING = object()


def expected_rows(plain: Collection[Any], pipeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows plain FerretDB (with this module's ``$group``) gives for ``pipeline``."""
    at = next((i for i, s in enumerate(pipeline) if "$group" in s), None)
    if at is None:
        return list(plain.aggregate(pipeline))
    before, group, after = pipeline[:at], pipeline[at]["$group"], pipeline[at + 1 :]
    documents = list(plain.aggregate(before)) if before else list(plain.find())
    keyed = [*before, {"$group": {"_id": group["_id"], "_n": {"$count": {}}}}, *after]
    server_keys = [row["_id"] for row in plain.aggregate(keyed)]
    members: dict[str, list[dict[str, Any]]] = {}
    for document in documents:
        members.setdefault(repr(_key(document, group["_id"])), []).append(document)
    if sorted(members) != sorted(repr(k) for k in server_keys):
        raise AssertionError(
            f"reference keys {sorted(members)} differ from FerretDB's {server_keys!r}"
        )
    rows = []
    for key in server_keys:
        row: dict[str, Any] = {"_id": key}
        for output, accumulator in group.items():
            if output != "_id":
                row[output] = _accumulate(accumulator, members[repr(key)])
        rows.append(row)
    return rows


def _value(document: dict[str, Any], expression: Any) -> Any:
    if not (isinstance(expression, str) and expression.startswith("$")):
        return expression
    value: Any = document
    for part in expression[1:].split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _key(document: dict[str, Any], expression: Any) -> Any:
    if isinstance(expression, dict):
        out = {}
        for name, sub in expression.items():
            value = _value(document, sub)
            if value is not _MISSING:
                out[name] = value
        return out
    value = _value(document, expression)
    return None if value is _MISSING else value


def _numbers(values: list[Any]) -> list[Any]:
    return [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _accumulate(accumulator: dict[str, Any], documents: list[dict[str, Any]]) -> Any:
    ((op, expression),) = accumulator.items()
    if op == "$count":
        return len(documents)
    values = [_value(d, expression) for d in documents]
    if op == "$sum":
        return sum(_numbers(values))
    if op == "$avg":
        numbers = _numbers(values)
        return sum(numbers) / len(numbers) if numbers else None
    if op == "$product":
        product = 1
        for value in _numbers(values):
            product *= value
        return product
    if op == "$first":
        return None if not values or values[0] is _MISSING else values[0]
    if op == "$last":
        return None if not values or values[-1] is _MISSING else values[-1]
    if op == "$push":
        return [v for v in values if v is not _MISSING]
    if op in ("$min", "$max"):
        present = [v for v in values if v is not _MISSING and v is not None]
        if not present:
            return None
        return min(present) if op == "$min" else max(present)
    raise AssertionError(f"no reference for {op}")
