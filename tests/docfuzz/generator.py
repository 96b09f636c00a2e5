"""Random documents and operations over a schema that mixes every attribute.

Every operation is one the attributes allow (a refused one is a failure of
the fuzzer, not of Veil), and every value is of its field's type, with nulls,
missing fields, arrays, unicode and the extremes of each domain mixed in.
Operations that pick one document (``update_one``, ``replace_one``,
``delete_one``) are pinned to one ``_id`` by the harness, since which of
several matches a server takes is not defined.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from typing import Any

SCHEMA: dict[str, Any] = {
    "fields": {
        "k": {"attr": "index", "type": "int"},
        "s": {"attr": "index", "type": "string"},
        "o": {"attr": "index", "type": "int", "scheme": "ore"},
        "os": {"attr": "index", "type": "string", "scheme": "ore"},
        "d": {"attr": "index", "type": "decimal", "scale": 2},
        "t": {"attr": "index", "type": "datetime"},
        "tags": {"attr": "index", "type": "string"},
        "g": "do_nothing",
        "a": "h_add",
        "c": {"attr": "h_add", "chain": "g", "domain": [-1000, 1000]},
        "p": {"attr": "h_add", "scheme": "paillier"},
        "m": "h_mul",
        "x": "static",
        "n.i": {"attr": "index", "type": "int"},
        "n.s": "do_nothing",
    },
    "default": "refuse",
}

INT64 = (-(2**63), 2**63 - 1)
WORDS = ["", "a", "ab", "b", "Rain", "rain man", "Ürük", "ß", "日本語", "prefix__long_a",
         "prefix__long_b", "prefix__lon", "zz", "émile"]  # fmt: skip
GROUPS = ["x", "y", "z"]
EPOCH = dt.datetime(2000, 1, 1)

#: Fields each operator family may name.
ORDERED = ["k", "s", "o", "os", "d", "t", "n.i", "tags", "g", "n.s"]
EXACT_GROUP_KEYS = ["k", "t", "n.i", "g", "n.s"]  # the server may group on these
CLIENT_GROUP_KEYS = ["s", "o", "d"]  # grouped on the client
SORTABLE = ["k", "s", "o", "os", "d", "t", "n.i", "g", "tags"]
SEALED = ["a", "c", "p", "m", "x"]  # only $exists
SUMMABLE = ["a", "c", "p"]
MIN_MAX = ["k", "s", "o", "d", "t", "n.i"]
INCREMENTABLE = ["a", "c", "p", "k", "o", "d", "n.i"]


def value_of(rng: random.Random, path: str) -> Any:
    """A random non-null value of the field's type."""
    if path in ("k", "n.i"):
        return rng.choice((*INT64, 0, -1)) if rng.random() < 0.08 else rng.randrange(-3, 7)
    if path == "o":
        return rng.choice(INT64) if rng.random() < 0.08 else rng.randrange(-3, 7)
    if path in ("s", "os"):
        return rng.choice(WORDS)
    if path == "d":
        return round(rng.uniform(-20, 20), rng.choice([0, 1, 2, 3]))
    if path == "t":
        return EPOCH + dt.timedelta(milliseconds=rng.randrange(-(10**9), 10**9, 1000) * 3)
    if path == "tags":
        return rng.sample(["red", "green", "blue", "ß", ""], rng.randrange(0, 4))
    if path in ("g", "n.s"):
        return rng.choice(GROUPS)
    if path == "a":
        return rng.randrange(-(10**9), 10**9)
    if path == "c":  # increments (at most 30 each) stay in the declared domain
        return rng.randrange(-200, 201)
    if path == "p":
        return rng.randrange(-(10**6), 10**6)
    if path == "m":
        return rng.randrange(1, 20)
    if path == "x":
        return rng.choice(["secret", {"deep": [1, "two"]}, [1, 2], 7, None, "ünï"])
    raise AssertionError(path)


def comparand(rng: random.Random, path: str) -> Any:
    """A value to compare ``path`` with: one of its type, or null."""
    if rng.random() < 0.07:
        return None
    value = value_of(rng, path)
    if path == "tags":
        return rng.choice(["red", "green", "blue", "ß", "", "z"])
    return value


def make_document(rng: random.Random, doc_id: int) -> dict[str, Any]:
    document: dict[str, Any] = {"_id": doc_id}
    for path in SCHEMA["fields"]:
        roll = rng.random()
        if roll < 0.1:
            continue  # missing
        value = None if roll < 0.17 else value_of(rng, path)
        if path == "g" and value is None:
            value = rng.choice(GROUPS)  # a chained field's group: mostly present
        if "." in path:
            outer, inner = path.split(".")
            document.setdefault(outer, {})[inner] = value
        else:
            document[path] = value
    return document


# -- filters ------------------------------------------------------------------


def field_condition(rng: random.Random, path: str) -> Any:
    if path in SEALED:
        return {"$exists": rng.random() < 0.5}
    roll = rng.random()
    if roll < 0.25:
        return comparand(rng, path)  # equality
    if roll < 0.35:
        return {"$ne": comparand(rng, path)}
    if roll < 0.45:
        values = [comparand(rng, path) for _ in range(rng.randrange(0, 4))]
        return {rng.choice(["$in", "$nin"]): values}
    if roll < 0.52:
        return {"$exists": rng.random() < 0.5}
    bounds: dict[str, Any] = {}
    for ops in (("$gt", "$gte"), ("$lt", "$lte")):
        if rng.random() < 0.65 or not bounds:
            value = comparand(rng, path)
            if value is not None:
                bounds[rng.choice(ops)] = value
    return bounds or {"$exists": True}


def make_filter(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.08 and depth == 0:
        return {}
    if roll < 0.22 and depth < 2:
        op = rng.choice(["$and", "$or", "$nor"])
        return {op: [make_filter(rng, depth + 1) or {"k": 1} for _ in range(rng.randrange(1, 4))]}
    out: dict[str, Any] = {}
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        path = rng.choice(ORDERED * 3 + SEALED + ["_id", "n"])
        if path == "n":  # a subdocument holding schema fields: $exists only
            out["n"] = {"$exists": rng.random() < 0.5}
        elif path == "_id":
            out["_id"] = rng.choice(
                [rng.randrange(60), {"$in": [rng.randrange(60) for _ in range(3)]},
                 {"$gte": rng.randrange(60)}, {"$lt": rng.randrange(60)}]
            )  # fmt: skip
        else:
            out[path] = field_condition(rng, path)
    return out


# -- operations ---------------------------------------------------------------


@dataclass
class Op:
    """One call on a collection: ``method(*args, **kwargs)``."""

    method: str
    args: list[Any]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.method}({', '.join(repr(a) for a in self.args)}{extra})"


def make_sort(rng: random.Random) -> list[tuple[str, int]]:
    keys = rng.sample(SORTABLE, rng.choice([1, 1, 2]))
    return [(k, rng.choice([1, -1])) for k in keys] + [("_id", rng.choice([1, -1]))]


def make_projection(rng: random.Random) -> dict[str, int] | None:
    if rng.random() < 0.6:
        return None
    paths = rng.sample(["k", "s", "a", "x", "n", "n.i", "tags", "m", "c", "p", "d"], 2)
    keep = rng.random() < 0.6
    projection = {p: int(keep) for p in paths if not (p == "n" and "n.i" in paths)}
    if keep and rng.random() < 0.3:
        projection["_id"] = 0
    return projection


def make_group(rng: random.Random, ordered: bool) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.5:
        key: Any = "$" + rng.choice(EXACT_GROUP_KEYS)
    elif roll < 0.65:
        key = "$" + rng.choice(CLIENT_GROUP_KEYS)
    elif roll < 0.8:
        key = None
    else:
        key = {"a": "$" + rng.choice(EXACT_GROUP_KEYS), "b": "$" + rng.choice(EXACT_GROUP_KEYS)}
    group: dict[str, Any] = {"_id": key}
    kinds = ["$sum", "$sum", "$avg", "$count", "$min", "$max", "$one", "$product"]
    if ordered:  # the documents come in a known order: $first, $last and $push are defined
        kinds += ["$first", "$last", "$push"]
    for i in range(rng.choice([1, 1, 2, 3])):
        kind = rng.choice(kinds)
        if kind == "$count":
            group[f"v{i}"] = {"$count": {}}
        elif kind == "$one":
            group[f"v{i}"] = {"$sum": 1}
        elif kind == "$product":
            group[f"v{i}"] = {"$product": "$m"}
        elif kind in ("$min", "$max", "$first", "$last", "$push"):
            group[f"v{i}"] = {kind: "$" + rng.choice(MIN_MAX)}
        else:
            group[f"v{i}"] = {kind: "$" + rng.choice(SUMMABLE)}
    return group


def make_pipeline(rng: random.Random) -> list[dict[str, Any]]:
    stages: list[dict[str, Any]] = []
    if rng.random() < 0.6:
        stages.append({"$match": make_filter(rng)})
    roll = rng.random()
    if roll < 0.7:
        ordered = rng.random() < 0.3
        if ordered:
            stages.append({"$sort": dict(make_sort(rng))})
        stages.append({"$group": make_group(rng, ordered)})
        if rng.random() < 0.3:
            stages.append({"$sort": {"_id": rng.choice([1, -1])}})
    elif roll < 0.85:
        stages.append({"$sort": dict(make_sort(rng))})
        stages.append({"$skip": rng.randrange(0, 5)})
        stages.append({"$limit": rng.randrange(1, 10)})
        stages.append({"$project": {"k": 1, "s": 1, "n": 1}})
    else:
        stages.append({"$count": "n"})
    return stages


def make_update(rng: random.Random) -> dict[str, Any]:
    update: dict[str, Any] = {}
    used: set[str] = set()
    for _ in range(rng.choice([1, 1, 2])):
        kind = rng.choice(["$set", "$set", "$unset", "$inc", "$inc"])
        if kind == "$inc":
            path = rng.choice(INCREMENTABLE)
            amount: Any = rng.randrange(-30, 30)
            if path == "d":
                amount = round(rng.uniform(-5, 5), 2)
            elif path == "a":
                amount = rng.randrange(-(10**9), 10**9)
        else:
            path = rng.choice(list(SCHEMA["fields"]))
            amount = value_of(rng, path) if rng.random() < 0.9 else None
            if path == "c" and amount is None:
                amount = 0
        if path in used or (path == "n.i" and "n.s" in used) or (path == "n.s" and "n.i" in used):
            continue  # one operator a path, as MongoDB requires
        used.add(path)
        update.setdefault(kind, {})[path] = "" if kind == "$unset" else amount
    return update


def make_operation(rng: random.Random, next_id: list[int]) -> Op:
    roll = rng.random()
    if roll < 0.22:
        kwargs: dict[str, Any] = {}
        if rng.random() < 0.5:
            kwargs["sort"] = make_sort(rng)
            if rng.random() < 0.5:
                kwargs["skip"] = rng.randrange(0, 6)
            if rng.random() < 0.6:
                kwargs["limit"] = rng.randrange(1, 12)
        return Op("find", [make_filter(rng), make_projection(rng)], kwargs)
    if roll < 0.3:
        return Op("count_documents", [make_filter(rng)])
    if roll < 0.5:
        return Op("aggregate", [make_pipeline(rng)])
    if roll < 0.56:
        return Op("find_one", [make_filter(rng)], {"sort": make_sort(rng)})
    if roll < 0.72:
        method = rng.choice(["update_one", "update_many"])
        if method == "update_one" and rng.random() < 0.4:  # pinned: the one-command paths
            return Op(method, [{"_id": rng.randrange(next_id[0])}, make_update(rng)])
        return Op(method, [make_filter(rng), make_update(rng)])
    if roll < 0.78:
        return Op("replace_one", [make_filter(rng), _without_id(make_document(rng, 0))])
    if roll < 0.86:
        return Op(rng.choice(["delete_one", "delete_many"]), [make_filter(rng)])
    count = rng.choice([1, 1, 3])
    documents = [make_document(rng, next_id[0] + i) for i in range(count)]
    next_id[0] += count
    if count == 1:
        return Op("insert_one", [documents[0]])
    return Op("insert_many", [documents])


def _without_id(document: dict[str, Any]) -> dict[str, Any]:
    document.pop("_id", None)
    return document


@dataclass
class Case:
    """One seed's starting documents and operations."""

    seed: int
    documents: list[dict[str, Any]]
    operations: list[Op]


def make_case(seed: int, documents: int = 40, operations: int = 25) -> Case:
    rng = random.Random(seed)
    start = [make_document(rng, i) for i in range(documents)]
    next_id = [documents]
    return Case(seed, start, [make_operation(rng, next_id) for _ in range(operations)])
