"""Paillier ``h_add``: reads, grouped sums and averages, ``$inc``, against plain pymongo on the
same FerretDB; a party without the key file adds stored values; bad input."""

from __future__ import annotations

import copy
import random
from typing import Any

import pymongo.errors
import pytest

import veil.documents
from veil.documents import FieldTypeError, SchemaError
from veil.documents import paillier as documents_paillier
from veil.documents.paillier import FOLD_AT, PENDING
from veil.documents.updates import Updates
from veil.errors import DomainError, MalformedCiphertextError

SCHEMA = {
    "fields": {
        "year": "index",
        "gross": {"attr": "h_add", "scheme": "paillier"},
        "meta.src": "do_nothing",
    }
}
EXTREMES = [-(2**63), 2**63 - 1, -1, 0]


def make_documents(count: int) -> list[dict[str, Any]]:
    rng = random.Random(5)
    documents: list[dict[str, Any]] = []
    for i in range(count):
        document: dict[str, Any] = {
            "_id": i,
            "year": rng.randrange(1990, 1996),
            "gross": rng.choice(EXTREMES)
            if rng.random() < 0.05
            else rng.randrange(-(10**9), 10**9),
            "meta": {"src": rng.choice(["imdb", "tmdb"])},
        }
        roll = rng.random()
        if roll < 0.1:
            del document["gross"]
        elif roll < 0.2:
            document["gross"] = None
        documents.append(document)
    return documents


@pytest.fixture
def pair(url, key_file, plain):
    database = veil.documents.connect(url, key_file, {"movies": SCHEMA})
    documents = make_documents(120)
    database.movies.insert_many(copy.deepcopy(documents))
    plain.movies.insert_many(copy.deepcopy(documents))
    yield database.movies, plain.movies
    database.close()


def by_id(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(documents, key=lambda d: d["_id"])


def test_reads(pair):
    veil_collection, plain_collection = pair
    for query in ({}, {"year": 1993}, {"gross": {"$exists": False}}):
        assert by_id(veil_collection.find(query).to_list()) == by_id(
            list(plain_collection.find(query))
        )


PIPELINES: list[list[dict[str, Any]]] = [
    [{"$group": {"_id": "$year", "s": {"$sum": "$gross"}}}],
    [{"$match": {"year": {"$gte": 1993}}}, {"$group": {"_id": None, "s": {"$sum": "$gross"}}}],
    [{"$group": {"_id": "$meta.src", "s": {"$sum": "$gross"}}}],
    [{"$match": {"year": 1900}}, {"$group": {"_id": "$year", "s": {"$sum": "$gross"}}}],
]


@pytest.mark.parametrize("pipeline", PIPELINES, ids=[str(p)[:70] for p in PIPELINES])
def test_grouped_sums(pair, pipeline):
    veil_collection, plain_collection = pair
    key = lambda row: repr(row["_id"])  # noqa: E731
    expected = sorted(plain_collection.aggregate(pipeline), key=key)
    for row in expected:  # the server's int64 sum turns to a double past 2**63; Paillier's not
        row["s"] = pytest.approx(row["s"], rel=1e-12) if isinstance(row["s"], float) else row["s"]
    assert sorted(veil_collection.aggregate(pipeline), key=key) == expected


def test_grouped_averages(pair):
    """FerretDB has no $avg: the expected averages come from the plain documents."""
    veil_collection, plain_collection = pair
    values: dict[Any, list[int]] = {}
    for document in plain_collection.find():
        gross = document.get("gross")
        values.setdefault(document["year"], []).extend([gross] if gross is not None else [])
    pipeline = [{"$group": {"_id": "$year", "a": {"$avg": "$gross"}}}]
    got = {row["_id"]: row["a"] for row in veil_collection.aggregate(pipeline)}
    assert got == {y: (pytest.approx(sum(v) / len(v)) if v else None) for y, v in values.items()}


def test_updates(pair):
    veil_collection, plain_collection = pair
    rng = random.Random(3)
    for _ in range(15):
        query = rng.choice([{"year": rng.randrange(1990, 1996)}, {"_id": rng.randrange(120)}])
        update = rng.choice(
            [
                {"$inc": {"gross": rng.randrange(-1000, 1000)}},
                {"$set": {"gross": rng.randrange(-(10**6), 10**6)}},
                {"$unset": {"gross": ""}},
            ]
        )
        numeric = {"$and": [query, {"gross": {"$type": "number"}}]}
        if "$inc" in update:  # $inc of null fails on MongoDB; keep to numbers
            query = {"_id": {"$in": [d["_id"] for d in plain_collection.find(numeric)]}}
        expected = plain_collection.update_many(query, update)
        assert veil_collection.update_many(query, update).matched_count == expected.matched_count
    assert by_id(veil_collection.find().to_list()) == by_id(list(plain_collection.find()))


def test_a_party_without_the_key_adds(pair, plain):
    veil_collection, _ = pair
    name = veil_collection.codec.ciphers["gross"].name
    server = plain.client[veil_collection.database.name]  # only pymongo and public data
    stored = server[veil_collection.server_name]
    key = documents_paillier.public_key(server, veil_collection.server_name, name)
    numbers = [d["_id"] for d in plain.movies.find({"gross": {"$type": "number"}})]
    first, second, target = numbers[:3]
    a, b = (stored.find_one({"_id": i})[name] for i in (first, second))
    stored.update_one({"_id": target}, {"$set": {name: documents_paillier.add(key, a, b)}})
    values = {d["_id"]: d.get("gross") for d in veil_collection.find()}
    assert values[target] == values[first] + values[second]
    with pytest.raises(MalformedCiphertextError):
        documents_paillier.add(key, a, None)


def test_bad_input(pair, url, key_file):
    veil_collection, _ = pair
    with pytest.raises(FieldTypeError, match="integers"):
        veil_collection.insert_one({"gross": 1.5})
    with pytest.raises(DomainError):
        veil_collection.insert_one({"gross": 2**3000})
    name = veil_collection.codec.ciphers["gross"].name
    veil_collection.server_collection.update_one({"_id": 3}, {"$set": {name: b"\x01short"}})
    with pytest.raises(MalformedCiphertextError):
        veil_collection.find_one({"_id": 3})
    with pytest.raises(SchemaError, match="paillier"):
        veil.documents.connect(
            url, key_file, {"c": {"fields": {"g": {"attr": "h_add", "scheme": "rsa"}}}}
        )


def test_inc_is_blind(pair, monkeypatch):
    """$inc multiplies stored ciphertexts by the increment's encryption: nothing is decrypted,
    missing values become the increment, other operators of the update go along."""
    veil_collection, plain_collection = pair

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a Paillier $inc decrypted a value")

    numeric = [d["_id"] for d in plain_collection.find({"gross": {"$type": "number"}})]
    missing = [d["_id"] for d in plain_collection.find({"gross": {"$exists": False}})]
    updates = [
        ({"_id": {"$in": numeric[:40]}}, {"$inc": {"gross": 7}}),
        ({"$and": [{"_id": {"$in": numeric}}, {"year": 1993}]}, {"$inc": {"gross": -(10**9)}}),
        ({"_id": missing[0]}, {"$inc": {"gross": 11}, "$set": {"meta.src": "new"}}),
        ({"_id": numeric[-1]}, {"$inc": {"gross": 2**62}}),
    ]
    with monkeypatch.context() as patched:
        patched.setattr(documents_paillier.PaillierField, "decrypt", refuse)
        for query, update in updates:
            got = veil_collection.update_many(query, update)
            expected = plain_collection.update_many(query, update)
            assert (got.matched_count, got.modified_count) == (
                expected.matched_count, expected.modified_count,
            )  # fmt: skip
        assert veil_collection.update_one({"_id": numeric[0]}, {"$inc": {"gross": 1}}).matched_count
        plain_collection.update_one({"_id": numeric[0]}, {"$inc": {"gross": 1}})
    assert by_id(veil_collection.find().to_list()) == by_id(list(plain_collection.find()))


@pytest.mark.parametrize("pinned", [True, False], ids=["pending full", "not pinned by _id"])
def test_blind_inc_retries_after_a_concurrent_write(url, key_file, monkeypatch, pinned):
    """The read-modify-write (a document whose pending increments are full, or a filter
    that does not pin it by _id): another writer changes the value between the read and the
    conditional write, whose condition then fails; the value is read again and the
    increment re-added. (Threads racing on FerretDB 1.24 would test the server instead: its
    updates are not atomic, so two conditional writes can both succeed, as two plain $inc
    can lose one.)"""
    schema = {"counters": {"fields": {"n": {"attr": "h_add", "scheme": "paillier"}}}}
    first, second = (veil.documents.connect(url, key_file, schema) for _ in range(2))
    try:
        first.counters.insert_one({"_id": "c", "n": 5})
        for _ in range(FOLD_AT if pinned else 0):
            first.counters.update_one({"_id": "c"}, {"$inc": {"n": 1}})
        original = Updates.paillier_update
        calls: list[str] = []

        def interleaved(self: Updates, *args: Any) -> dict[str, Any]:
            update = original(self, *args)
            calls.append("write")
            if len(calls) == 1:  # the other client's $inc lands first
                second.counters.update_one(query, {"$inc": {"n": 100}})
            return update

        query = {"_id": "c"} if pinned else {"_id": {"$in": ["c"]}}
        monkeypatch.setattr(Updates, "paillier_update", interleaved)
        assert first.counters.update_one(query, {"$inc": {"n": 7}}).modified_count == 1
        assert len(calls) == 3  # first try, the other client's, the retry
        assert first.counters.find_one({"_id": "c"})["n"] == 5 + (FOLD_AT if pinned else 0) + 107
    finally:
        first.close()
        second.close()


def test_inc_by_id_is_one_push_until_the_pending_fold(pair, monkeypatch):
    """$inc of one document pinned by _id pushes the increment's encryption (one command, no
    read, nothing decrypted) onto a value, a $set in the update goes along; the FOLD_AT + 1-th
    folds the pending ones into the stored value; a missing value is created by the
    read-modify-write and a null one refused, as MongoDB does; reads, sums and a later $set
    or $unset see every increment."""
    veil_collection, plain_collection = pair
    name = veil_collection.codec.ciphers["gross"].name
    numeric = [d["_id"] for d in plain_collection.find({"gross": {"$type": "number"}})]
    absent = [d["_id"] for d in plain_collection.find({"gross": {"$exists": False}})]
    null = [d["_id"] for d in plain_collection.find({"gross": None, "_id": {"$nin": absent}})]
    stored = veil_collection.server_collection

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a pinned Paillier $inc read the document")

    rng = random.Random(8)
    hot = numeric[0]
    with monkeypatch.context() as patched:
        patched.setattr(Updates, "multiply_paillier", refuse)
        patched.setattr(documents_paillier.PaillierField, "decrypt", refuse)
        for target in [hot] * FOLD_AT + numeric[1:20]:
            change = {"$inc": {"gross": rng.randrange(-(10**6), 10**6)}}
            veil_collection.update_one({"_id": target}, change)
            plain_collection.update_one({"_id": target}, change)
        assert len(stored.find_one({"_id": hot})[name + PENDING]) == FOLD_AT
        along = {"$inc": {"gross": 9}, "$set": {"meta.src": "y"}}
        for collection in (veil_collection, plain_collection):
            assert collection.update_one({"_id": numeric[3]}, along).modified_count == 1
    both = {"$inc": {"gross": 3}, "$set": {"meta.src": "x"}}  # the fold: a read, one write
    assert veil_collection.update_one({"_id": hot}, both).modified_count == 1
    plain_collection.update_one({"_id": hot}, both)
    assert name + PENDING not in stored.find_one({"_id": hot})
    with monkeypatch.context() as patched:
        patched.setattr(Updates, "multiply_paillier", refuse)
        for collection in (veil_collection, plain_collection):
            collection.update_one({"_id": hot}, {"$inc": {"gross": -4}})
    for target in absent[:3]:
        for collection in (veil_collection, plain_collection):
            assert collection.update_one({"_id": target}, {"$inc": {"gross": 7}}).matched_count
    for target in null[:3]:
        before = stored.find_one({"_id": target})
        with pytest.raises(FieldTypeError, match="is null"):
            veil_collection.update_one({"_id": target}, {"$inc": {"gross": 7}})
        assert stored.find_one({"_id": target}) == before
        with pytest.raises(pymongo.errors.WriteError):
            plain_collection.update_one({"_id": target}, {"$inc": {"gross": 7}})
    # no document: nothing pushed, and the read-modify-write finds none either
    assert veil_collection.update_one({"_id": 10**6}, {"$inc": {"gross": 1}}).matched_count == 0
    assert by_id(veil_collection.find().to_list()) == by_id(list(plain_collection.find()))
    for pipeline in PIPELINES[:3]:
        key = lambda row: repr(row["_id"])  # noqa: E731
        expected = sorted(plain_collection.aggregate(pipeline), key=key)
        for row in expected:
            if isinstance(row["s"], float):
                row["s"] = pytest.approx(row["s"], rel=1e-12)
        assert sorted(veil_collection.aggregate(pipeline), key=key) == expected
    veil_collection.update_one({"_id": numeric[1]}, {"$set": {"gross": 5}})
    veil_collection.update_one({"_id": numeric[2]}, {"$unset": {"gross": ""}})
    assert name + PENDING not in stored.find_one({"_id": numeric[1]})
    assert name + PENDING not in stored.find_one({"_id": numeric[2]})
    assert veil_collection.find_one({"_id": numeric[1]})["gross"] == 5
    assert "gross" not in veil_collection.find_one({"_id": numeric[2]})
