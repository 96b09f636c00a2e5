"""MongoDB's query semantics over decrypted documents: what the client finishes.

The client re-checks a filter the server could only approximate (a widened
range over a many-to-one order key), and sorts, projects and groups what the
server cannot. The rules are MongoDB's, for the operators Veil supports:
comparisons only within a type bracket (numbers, strings, dates, ...), a
missing field equals ``null``, an array matches when one of its elements (or
the array itself) does, ``$ne``/``$nin`` are the negations of ``$eq``/``$in``.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from bson import ObjectId
from bson.decimal128 import Decimal128

from veil.documents.errors import DocumentsError

MISSING = object()
EMPTY_ARRAY = object()  # sorts before null, as MongoDB sorts an empty array
COMPARISONS = {
    "$gt": lambda c: c > 0,
    "$gte": lambda c: c >= 0,
    "$lt": lambda c: c < 0,
    "$lte": lambda c: c <= 0,
}


def get_path(document: Any, path: str) -> Any:
    """The value at a dotted path, or MISSING (arrays of documents are searched)."""
    value = document
    for key in path.split("."):
        if isinstance(value, dict):
            value = value.get(key, MISSING)
        elif isinstance(value, list):
            found = [get_path(v, key) for v in value if isinstance(v, dict)]
            found = [v for v in found if v is not MISSING]
            value = found if found else MISSING
        else:
            return MISSING
        if value is MISSING:
            return MISSING
    return value


def matches(document: dict[str, Any], query: Mapping[str, Any]) -> bool:
    """Does ``document`` satisfy the MongoDB filter ``query``?"""
    for key, condition in query.items():
        if key == "$and":
            ok = all(matches(document, q) for q in condition)
        elif key == "$or":
            ok = any(matches(document, q) for q in condition)
        elif key == "$nor":
            ok = not any(matches(document, q) for q in condition)
        elif key.startswith("$"):
            raise DocumentsError(f"query operator {key} is not supported")
        else:
            ok = _field_matches(get_path(document, key), condition)
        if not ok:
            return False
    return True


def is_operator_dict(condition: Any) -> bool:
    return (
        isinstance(condition, dict)
        and bool(condition)
        and all(isinstance(k, str) and k.startswith("$") for k in condition)
    )


def _field_matches(value: Any, condition: Any) -> bool:
    if not is_operator_dict(condition):
        return _equals(value, condition)
    return all(_operator(value, op, arg) for op, arg in condition.items())


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return _equals(value, arg)
    if op == "$ne":
        return not _equals(value, arg)
    if op == "$in":
        return any(_equals(value, a) for a in arg)
    if op == "$nin":
        return not any(_equals(value, a) for a in arg)
    if op == "$exists":
        return (value is not MISSING) == bool(arg)
    if op == "$not":
        return not _field_matches(value, arg)
    if op in COMPARISONS:
        test = COMPARISONS[op]
        return any(_comparable(c, arg) and test(compare(c, arg)) for c in _candidates(value))
    raise DocumentsError(f"query operator {op} is not supported")


def _candidates(value: Any) -> list[Any]:
    if value is MISSING:
        return [None]
    if isinstance(value, list):
        return [*value, value]
    return [value]


def _equals(value: Any, arg: Any) -> bool:
    if arg is None:
        return value is MISSING or value is None or (isinstance(value, list) and None in value)
    return any(_comparable(c, arg) and compare(c, arg) == 0 for c in _candidates(value))


def _comparable(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return bracket(a) == bracket(b)


# MongoDB's sort order of types (BSON comparison order).
_BRACKETS: tuple[tuple[type | tuple[type, ...], int], ...] = (
    (bool, 8),
    ((int, float, Decimal128, Decimal), 2),
    (str, 3),
    (dict, 4),
    (list, 5),
    (bytes, 6),
    (ObjectId, 7),
    (dt.datetime, 9),
)


def bracket(value: Any) -> int:
    if value is EMPTY_ARRAY:
        return 0
    if value is None or value is MISSING:
        return 1
    for kind, rank in _BRACKETS:
        if isinstance(value, kind):
            return rank
    return 10


def compare(a: Any, b: Any) -> int:
    """MongoDB's total order: by type bracket, then by value."""
    ra, rb = bracket(a), bracket(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra <= 1:
        return 0
    if ra == 2:
        a, b = _number(a), _number(b)
    elif ra == 3:
        a, b = a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass")
    elif ra == 4:
        return _compare_sequences(list(a.items()), list(b.items()))
    elif ra == 5:
        return _compare_sequences(a, b)
    return (a > b) - (a < b)


def _number(value: Any) -> Any:
    if isinstance(value, Decimal128):
        return value.to_decimal()
    if isinstance(value, float) and isinstance(value, float) and value != value:
        return float("-inf")  # NaN sorts below every number
    return Decimal(value) if isinstance(value, float) else value


def _compare_sequences(a: list[Any], b: list[Any]) -> int:
    for x, y in zip(a, b, strict=False):
        c = compare(x, y) if not isinstance(x, tuple) else _compare_pairs(x, y)
        if c:
            return c
    return (len(a) > len(b)) - (len(a) < len(b))


def _compare_pairs(x: tuple[str, Any], y: tuple[str, Any]) -> int:
    """Two fields of documents compared: by their values' type brackets, then by
    name, then by value (MongoDB's order of embedded documents)."""
    kx, ky = bracket(x[1]), bracket(y[1])
    if kx != ky:
        return -1 if kx < ky else 1
    return compare(x[0], y[0]) or compare(x[1], y[1])


def sort_documents(documents: list[dict[str, Any]], sort: Sequence[tuple[str, int]]) -> None:
    """Sort in place as MongoDB does (arrays by their least/greatest element)."""

    def order(x: dict[str, Any], y: dict[str, Any]) -> int:
        for path, direction in sort:
            c = compare(_sort_value(x, path, direction), _sort_value(y, path, direction))
            if c:
                return c * direction
        return 0

    documents.sort(key=functools.cmp_to_key(order))


def _sort_value(document: dict[str, Any], path: str, direction: int) -> Any:
    value = get_path(document, path)
    if value is MISSING:
        return None
    if isinstance(value, list):
        if not value:
            return EMPTY_ARRAY
        pick: Callable[..., Any] = min if direction > 0 else max
        return pick(value, key=functools.cmp_to_key(compare))
    return value


def project(document: dict[str, Any], projection: Mapping[str, Any] | None) -> dict[str, Any]:
    """Apply an inclusion or exclusion projection of field paths."""
    if not projection:
        return document
    include_id = bool(projection.get("_id", True))
    rest = {k: v for k, v in projection.items() if k != "_id"}
    if rest and all(bool(v) for v in rest.values()):
        out: dict[str, Any] = {}
        for path in rest:
            _include(document, out, path.split("."))
    else:
        out = {k: v for k, v in document.items() if k != "_id"}
        for path in rest:
            _drop(out, path)
    if include_id and "_id" in document:
        return {"_id": document["_id"], **out}
    return out


def _include(source: Any, target: dict[str, Any], keys: list[str]) -> None:
    """Copy one projected path; a subdocument on the way is kept even if the leaf is
    missing (MongoDB projects {"a.b": 1} of {"a": {}} as {"a": {}})."""
    for position, key in enumerate(keys):
        if not isinstance(source, dict) or key not in source:
            return
        if position == len(keys) - 1:
            target[key] = source[key]
        elif isinstance(source[key], dict):
            target = target.setdefault(key, {})
            source = source[key]
        else:
            return


def _drop(document: dict[str, Any], path: str) -> None:
    *outer, last = path.split(".")
    for key in outer:
        inner = document.get(key)
        if not isinstance(inner, dict):
            return
        inner = dict(inner)
        document[key] = inner
        document = inner
    document.pop(last, None)
