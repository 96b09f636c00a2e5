"""Run one generated case through veil.documents and plain pymongo, and compare.

Both collections start from the same documents on the same server; each
operation runs on both and its results are compared, and after every write
the two collections' whole contents are. Veil may answer only with a result
or a ``VeilError``: any other exception is a failure, and so is an error
where plain answered. Where plain refuses a write (``$inc`` of a null, an
int64 overflow), Veil must refuse it too, and the case stops there, since a
server may have applied part of an ``update_many`` before refusing.
"""

from __future__ import annotations

import copy
import math
import traceback
from dataclasses import dataclass
from typing import Any

import pymongo.errors
from pymongo.collection import Collection

from tests.docfuzz.generator import Case, Op
from tests.docfuzz.reference import expected_rows
from veil.errors import VeilError

WRITES = {"insert_one", "insert_many", "update_one", "update_many", "replace_one",
          "delete_one", "delete_many"}  # fmt: skip
PINNED = {"update_one", "replace_one", "delete_one"}
#: What Veil's refusals of writes MongoDB refuses say (``$inc`` of null, past int64).
MONGODB_REFUSES = ("as MongoDB does", "MongoDB refuses it too")


@dataclass
class Failure:
    seed: int
    step: int  # -1: the starting documents
    operation: str
    message: str

    def __str__(self) -> str:
        return f"seed {self.seed} step {self.step}: {self.operation}\n  {self.message}"


def run_case(case: Case, veil: Any, plain: Collection[Any]) -> Failure | None:
    """The first difference between Veil and plain over ``case``, or None."""
    veil.insert_many(copy.deepcopy(case.documents))
    plain.insert_many(copy.deepcopy(case.documents))
    difference = _contents_differ(veil, plain)
    if difference:
        return Failure(case.seed, -1, "insert_many(<starting documents>)", difference)
    for step, raw in enumerate(case.operations):
        op = _pinned(raw, plain)
        failure, stop = _run_op(op, veil, plain)
        if failure:
            return Failure(case.seed, step, op.describe(), failure)
        if stop:
            return None
        if op.method in WRITES:
            difference = _contents_differ(veil, plain)
            if difference:
                return Failure(case.seed, step, op.describe(), "after it: " + difference)
    return None


def _pinned(op: Op, plain: Collection[Any]) -> Op:
    """A one-document write pinned to the first ``_id`` plain matches, so both sides
    take the same document."""
    if op.method not in PINNED:
        return op
    ids = [d["_id"] for d in plain.find(op.args[0], {"_id": 1}).sort("_id", 1).limit(2)]
    if len(ids) < 2:
        return op
    return Op(op.method, [{"$and": [op.args[0], {"_id": ids[0]}]}, *op.args[1:]], op.kwargs)


def _run_op(op: Op, veil: Any, plain: Collection[Any]) -> tuple[str | None, bool]:
    """(a failure message or None, whether the case stops here)."""
    try:
        expected = _call(plain, op, reference=True)
        plain_error = None
    except pymongo.errors.OperationFailure as exc:
        expected, plain_error = None, exc
    try:
        got = _call(veil, op, reference=False)
        veil_error = None
    except VeilError as exc:
        got, veil_error = None, exc
    except Exception:
        return "raised a non-Veil exception:\n" + traceback.format_exc(limit=-4), True
    if plain_error is not None:
        if op.method not in WRITES:
            return None, False  # plain FerretDB cannot answer it: nothing to compare
        if veil_error is None:
            return f"plain refused it ({plain_error.details}), Veil did not", True
        return None, True
    if veil_error is not None:
        if op.method in WRITES and any(word in str(veil_error) for word in MONGODB_REFUSES):
            return None, True  # a server laxer than MongoDB (mongo-java-server): Veil wrote nothing
        return (
            f"Veil raised {type(veil_error).__name__}: {veil_error}; plain gave {expected!r}",
            True,
        )
    difference = _results_differ(op, got, expected)
    return difference, False


def _call(collection: Any, op: Op, reference: bool) -> Any:
    args = copy.deepcopy(op.args)
    if op.method == "find":
        return list(collection.find(*args, **op.kwargs))
    if op.method == "aggregate":
        return expected_rows(collection, args[0]) if reference else collection.aggregate(args[0])
    if op.method == "find_one" and reference:
        return collection.find_one(*args, **op.kwargs)
    return getattr(collection, op.method)(*args, **op.kwargs)


def _results_differ(op: Op, got: Any, expected: Any) -> str | None:
    if op.method in ("insert_one",):
        same = got.inserted_id == expected.inserted_id
    elif op.method == "insert_many":
        same = list(got.inserted_ids) == list(expected.inserted_ids)
    elif op.method in ("update_one", "update_many", "replace_one"):
        same = got.matched_count == expected.matched_count
        got, expected = got.matched_count, expected.matched_count
    elif op.method in ("delete_one", "delete_many"):
        same = got.deleted_count == expected.deleted_count
        got, expected = got.deleted_count, expected.deleted_count
    elif op.method == "find":
        if "sort" not in op.kwargs:
            got, expected = _ordered(got), _ordered(expected)
        same = got == expected
    elif op.method == "aggregate":
        ordered = any("$sort" in stage for stage in op.args[0])
        if not ordered:
            got, expected = _ordered(got), _ordered(expected)
        same = _close(got, expected)
    else:
        same = got == expected
    if same:
        return None
    return f"Veil gave {got!r}\n  plain gave {expected!r}"


def _ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: repr(_signless(r.get("_id"))) + repr(_signless(r)))


def _signless(value: Any) -> Any:
    """``value`` with -0.0 as 0.0 and document fields in name order (an order-free key)."""
    if isinstance(value, float):
        return value + 0.0
    if isinstance(value, dict):
        return sorted((str(k), _signless(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_signless(v) for v in value]
    return value


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
            return False
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return isinstance(a, bool) == isinstance(b, bool) and bool(a == b)


def _contents_differ(veil: Any, plain: Collection[Any]) -> str | None:
    got = veil.find({}, sort=[("_id", 1)]).to_list()
    expected = list(plain.find({}, sort=[("_id", 1)]))
    if got == expected:
        return None
    for mine, theirs in zip(got, expected, strict=False):
        if mine != theirs:
            return f"contents differ: Veil has {mine!r}\n  plain has {theirs!r}"
    return f"contents differ: Veil has {len(got)} documents, plain {len(expected)}"
