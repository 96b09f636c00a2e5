"""Fetched grouped sums read column by column (veil.documents.fetchsums) give what the
general walk gives and what plain documents give: mixed key types, missing and null
keys and values, values created and moved by blind ``$inc``, filters."""

from __future__ import annotations

import random

import pytest
from bson.int64 import Int64

import veil.documents
from veil.documents import fetchgroups

SCHEMA = {"c": {"fields": {"g": "do_nothing", "k": "index", "v": "h_add", "w": "h_add"}}}
PIPELINES = [
    [{"$group": {"_id": "$g", "s": {"$sum": "$v"}, "n": {"$sum": 1}}}],
    [{"$group": {"_id": "$g", "a": {"$avg": "$v"}, "t": {"$sum": "$w"}}}],
    [{"$group": {"_id": "$k", "s": {"$sum": "$w"}, "c": {"$count": {}}}}],
    [{"$group": {"_id": None, "s": {"$sum": "$v"}, "a": {"$avg": "$w"}}}],
    [{"$match": {"k": {"$gte": 3}}}, {"$group": {"_id": "$g", "s": {"$sum": "$v"}}}],
]


def documents(count: int = 300) -> list[dict]:
    rng = random.Random(7)
    out = []
    for i in range(count):
        document = {"_id": i, "k": rng.randrange(6), "w": rng.randint(-(2**40), 2**40)}
        key = rng.choice([1, 2, Int64(2), None, "a", b"b", "missing"])
        if key != "missing":
            document["g"] = key
        value = rng.choice([rng.randint(-1000, 1000), None, "missing"])
        if value != "missing":
            document["v"] = value
        out.append(document)
    return out


def expected(rows: list[dict], pipeline: list[dict]) -> list:
    """The pipeline over plain documents, here (FerretDB has neither $avg nor several
    accumulators in one $group)."""
    *match, group = pipeline
    if match:
        rows = [r for r in rows if r["k"] >= match[0]["$match"]["k"]["$gte"]]
    spec = group["$group"]
    groups: dict = {}
    for row in rows:
        key = row.get(spec["_id"][1:]) if spec["_id"] else None
        groups.setdefault((type(key) is bytes, key), []).append(row)
    out = []
    for (_, key), members in groups.items():
        answer = {"_id": key}
        for name, accumulator in spec.items():
            if name == "_id":
                continue
            ((op, argument),) = accumulator.items()
            if op == "$count" or argument == 1:
                answer[name] = len(members)
                continue
            values = [m[argument[1:]] for m in members if m.get(argument[1:]) is not None]
            answer[name] = sum(values) if op == "$sum" else sum(values) / len(values) or None
        out.append(answer)
    return sorted(out, key=repr)


@pytest.fixture
def loaded(url, key_file):
    with veil.documents.connect(url, key_file, SCHEMA, sums="fetch") as database:
        rows = documents()
        database.c.insert_many([dict(r) for r in rows])
        for id_, delta in [(1, 5), (2, -7), (2, 3), (40, 11)]:  # blind $inc: ids in j
            database.c.update_one({"_id": id_}, {"$inc": {"v": delta}})
            rows[id_]["v"] = (rows[id_].get("v") or 0) + delta
        yield database.c, rows


def test_column_reads_equal_the_general_walk_and_plain(loaded, monkeypatch):
    """The native read of the raw batches, the column reads of decoded documents and the
    walk give one answer, the plain one."""
    collection, rows = loaded
    for pipeline in PIPELINES:
        native = sorted(collection.aggregate(pipeline), key=repr)
        with monkeypatch.context() as patched:
            patched.setattr(fetchgroups, "fetched_groups_raw", lambda *_: None)
            decoded = sorted(collection.aggregate(pipeline), key=repr)
            patched.setattr(fetchgroups, "fetched_groups", lambda *_: None)
            walked = sorted(collection.aggregate(pipeline), key=repr)
        assert native == decoded == walked == expected(rows, pipeline), pipeline


def test_the_column_path_is_taken_for_the_common_shape(loaded, monkeypatch):
    collection, _ = loaded
    taken = []
    real = fetchgroups.fetched_groups_raw

    def spied(*args):
        out = real(*args)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(fetchgroups, "fetched_groups_raw", spied)
    collection.aggregate(PIPELINES[2])  # OPE keys, sums and counts
    collection.aggregate(PIPELINES[0])  # keys of several types: bytes, str, ints, null
    assert taken == [True, True]


def test_another_shape_is_decoded_and_walked(loaded):
    """A float key is not read natively nor by columns: the decoded batches are walked."""
    collection, rows = loaded
    collection.insert_one({"_id": 1000, "g": 1.5, "k": 0, "v": 9, "w": 1})
    rows.append({"_id": 1000, "g": 1.5, "k": 0, "v": 9, "w": 1})
    for pipeline in PIPELINES[:2]:
        assert sorted(collection.aggregate(pipeline), key=repr) == expected(rows, pipeline)
