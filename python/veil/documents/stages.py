"""Pipeline stages the client runs over plaintext documents, with MongoDB's semantics.

``$match``, ``$group`` (``_id`` a path, a document of paths, a constant or
null; ``$sum $avg $min $max $count $first $last $push``), ``$sort``,
``$skip``, ``$limit``, ``$project`` (inclusion, exclusion, ``"$path"``
renames) and ``$count``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import bson
from bson.decimal128 import Decimal128

from veil.documents.errors import DocumentsError
from veil.documents.match import MISSING, compare, get_path, matches, project, sort_documents
from veil.documents.query import normalise_sort

Documents = list[dict[str, Any]]


def run_client_stages(documents: Documents, stages: list[dict[str, Any]]) -> Documents:
    for stage in stages:
        ((name, argument),) = stage.items()
        runner = _STAGES.get(name)
        if runner is None:
            raise DocumentsError(f"pipeline stage {name} is not supported")
        documents = runner(documents, argument)
    return documents


def _match(documents: Documents, query: dict[str, Any]) -> Documents:
    return [d for d in documents if matches(d, query)]


def _sort(documents: Documents, sort: Any) -> Documents:
    sort_documents(documents, normalise_sort(sort))
    return documents


def _project(documents: Documents, spec: dict[str, Any]) -> Documents:
    renames = {k: v for k, v in spec.items() if isinstance(v, str) and v.startswith("$")}
    plain = {k: v for k, v in spec.items() if k not in renames}
    if not renames:
        return [project(d, plain) for d in documents]
    out = []
    for document in documents:
        projected = (
            project(document, plain)
            if any(k != "_id" for k in plain)
            else ({"_id": document["_id"]} if plain.get("_id", True) and "_id" in document else {})
        )
        for key, expression in renames.items():
            value = evaluate(document, expression)
            if value is not MISSING:
                projected[key] = value
        out.append(projected)
    return out


def evaluate(document: dict[str, Any], expression: Any) -> Any:
    """A field path (``"$a.b"``) or a constant."""
    if isinstance(expression, str) and expression.startswith("$"):
        return get_path(document, expression[1:])
    if isinstance(expression, dict):
        values = {k: evaluate(document, v) for k, v in expression.items()}
        return {k: v for k, v in values.items() if v is not MISSING}  # as MongoDB omits them
    return expression


def _none(value: Any) -> Any:
    return None if value is MISSING else value


def _group(documents: Documents, spec: dict[str, Any]) -> Documents:
    if "_id" not in spec:
        raise DocumentsError("a $group stage needs an _id")
    accumulators = {k: _accumulator(k, v) for k, v in spec.items() if k != "_id"}
    groups: dict[bytes, tuple[Any, list[dict[str, Any]]]] = {}
    for document in documents:
        key = _none(evaluate(document, spec["_id"]))
        encoded = bson.encode({"k": _normal(key)})
        groups.setdefault(encoded, (key, []))[1].append(document)
    out = []
    for key, members in groups.values():
        row = {"_id": key}
        for output, (function, expression) in accumulators.items():
            row[output] = function([evaluate(d, expression) for d in members])
        out.append(row)
    return out


def _normal(key: Any) -> Any:
    """Numbers that MongoDB groups together (1 and 1.0) encoded alike."""
    if isinstance(key, float) and key.is_integer():
        return int(key)
    if isinstance(key, dict):
        return {k: _normal(v) for k, v in key.items()}
    return key


def _accumulator(output: str, spec: Any) -> tuple[Callable[[list[Any]], Any], Any]:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise DocumentsError(f"$group output {output!r} needs one accumulator")
    ((op, expression),) = spec.items()
    if op == "$count":
        return len, None
    function = _ACCUMULATORS.get(op)
    if function is None:
        raise DocumentsError(f"$group accumulator {op} is not supported")
    return function, expression


def _numbers(values: list[Any]) -> list[Any]:
    return [
        v for v in values
        if isinstance(v, (int, float, Decimal128)) and not isinstance(v, bool)
    ]  # fmt: skip


def _sum(values: list[Any]) -> Any:
    numbers = _numbers(values)
    if any(isinstance(v, Decimal128) for v in numbers):
        return Decimal128(
            sum(
                (
                    Decimal(str(v)) if not isinstance(v, Decimal128) else v.to_decimal()
                    for v in numbers
                ),
                Decimal(0),
            )
        )
    return sum(numbers)


def _product(values: list[Any]) -> Any:
    """Veil's ``$product`` accumulator (MongoDB has none): the product of the numbers."""
    result: Any = 1
    for value in _numbers(values):
        result *= value
    return result


def _avg(values: list[Any]) -> Any:
    numbers = _numbers(values)
    return _sum(numbers) / len(numbers) if numbers else None


def _extreme(pick: int) -> Callable[[list[Any]], Any]:
    def function(values: list[Any]) -> Any:
        present = [v for v in values if v is not MISSING and v is not None]
        if not present:
            return None
        ordered = sorted(present, key=functools.cmp_to_key(compare))
        return ordered[0] if pick < 0 else ordered[-1]

    return function


_ACCUMULATORS: dict[str, Callable[[list[Any]], Any]] = {
    "$sum": _sum,
    "$avg": _avg,
    "$product": _product,
    "$min": _extreme(-1),
    "$max": _extreme(1),
    "$first": lambda values: _none(values[0]) if values else None,
    "$last": lambda values: _none(values[-1]) if values else None,
    "$push": lambda values: [v for v in values if v is not MISSING],
}

_STAGES: dict[str, Callable[[Documents, Any], Documents]] = {
    "$match": _match,
    "$group": _group,
    "$sort": _sort,
    "$skip": lambda documents, n: documents[n:],
    "$limit": lambda documents, n: documents[:n],
    "$project": _project,
    "$count": lambda documents, name: [{name: len(documents)}] if documents else [],
}
