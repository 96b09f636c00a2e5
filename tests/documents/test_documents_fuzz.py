"""The differential fuzzer of veil.documents (``tests/docfuzz``) in CI: generated cases over
a schema mixing every attribute, through Veil and plain pymongo on the session's FerretDB;
and the cases it found, each reduced to a test."""

from __future__ import annotations

import copy
from typing import Any

import pymongo
import pymongo.errors
import pytest
from tests.docfuzz.__main__ import SUMS, run_seed

import veil.documents
from veil.documents import FieldTypeError, ServerError

SEEDS = range(0, 30)


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_case(ferretdb, key_file, seed):
    failure = run_seed(ferretdb.url, key_file, seed, SUMS[seed % len(SUMS)])
    assert failure is None, str(failure)


SCHEMA = {
    "fields": {
        "k": "index",
        "s": {"attr": "index", "type": "string"},
        "c": {"attr": "h_add", "chain": "g", "domain": [-100, 100]},
        "p": {"attr": "h_add", "scheme": "paillier"},
        "a": "h_add",
        "g": "do_nothing",
        "n.i": "index",
        "n.s": "do_nothing",
        "e.i": {"attr": "index", "type": "string"},
    }
}
DOCUMENTS: list[dict[str, Any]] = [
    {"_id": 1, "k": 1, "s": "b", "g": "x", "c": 1, "p": 1, "a": 1, "n": {}},
    {"_id": 2, "k": 2, "s": "a", "g": "y", "c": None, "p": None, "a": None, "n": {"i": 1}},
    {"_id": 3, "k": None, "g": "x", "n": {"s": "t"}, "e": {}},
    {"_id": 4, "k": 4, "s": "prefix_long_c", "n": {"i": None, "s": "u"}, "e": {"i": "v"}},
    {"_id": 5, "s": "prefix_long_a"},
]


@pytest.fixture
def pair(url, key_file, plain):
    database = veil.documents.connect(url, key_file, {"items": SCHEMA})
    database.items.insert_many(copy.deepcopy(DOCUMENTS))
    plain.items.insert_many(copy.deepcopy(DOCUMENTS))
    yield database.items, plain.items
    database.close()


def everything(collection: Any) -> list[dict[str, Any]]:
    found = collection.find({}, sort=[("_id", 1)])
    return found.to_list() if hasattr(found, "to_list") else list(found)


@pytest.mark.parametrize("projection", [{"k": 1}, {"k": 1, "_id": 0}, {"s": 0}, ["k"]])
def test_a_client_sort_sees_keys_the_projection_drops(pair, projection):
    """A string sort the server cannot order exactly is finished on the client: the
    sort keys are fetched even when the projection leaves them out."""
    veil_collection, plain_collection = pair
    sort = [("s", 1), ("_id", -1)]
    assert veil_collection.find({}, projection, sort=sort).to_list() == list(
        plain_collection.find({}, projection, sort=sort)
    )
    assert veil_collection.find({}, projection).sort(sort).skip(1).limit(3).to_list() == list(
        plain_collection.find({}, projection).sort(sort).skip(1).limit(3)
    )


def test_document_keys_sort_by_type_before_name(pair):
    """MongoDB orders embedded documents field by field: the values' types first, then
    the names, then the values ({b: 5} sorts before {a: "x"})."""
    veil_collection, plain_collection = pair
    for direction in (1, -1):
        pipeline = [
            {"$group": {"_id": {"a": "$g", "b": "$k"}, "n": {"$count": {}}}},
            {"$sort": {"_id": direction}},
        ]
        assert veil_collection.aggregate(pipeline) == list(plain_collection.aggregate(pipeline))


def test_empty_subdocuments_are_kept(pair):
    """A subdocument whose fields are all missing is kept (inserted empty, or after $unset of
    its last field), and $set of a field in a missing one creates it, as MongoDB does."""
    veil_collection, plain_collection = pair
    assert everything(veil_collection) == everything(plain_collection)
    for update in (
        {"$unset": {"n.i": ""}},
        {"$unset": {"n.s": "", "e.i": ""}},
        {"$set": {"e.i": "w"}},
        {"$unset": {"e.i": ""}},
    ):
        for collection in (veil_collection, plain_collection):
            collection.update_many({}, update)
        assert everything(veil_collection) == everything(plain_collection), update
    replacement = {"k": 9, "n": {}}
    for collection in (veil_collection, plain_collection):
        collection.replace_one({"_id": 5}, copy.deepcopy(replacement))
    assert everything(veil_collection) == everything(plain_collection)
    for query in (
        {"n": {"$exists": True}}, {"e": {"$exists": False}},
        {"$or": [{"e": {"$exists": True}}, {"k": 1}]}, {"n": {"$exists": True}, "s": {"$gt": "a"}},
    ):  # fmt: skip
        assert veil_collection.find(query).to_list() == list(plain_collection.find(query)), query
    with pytest.raises(veil.documents.UnsupportedQueryError, match="only \\$exists"):
        veil_collection.find({"n": {}}).to_list()


@pytest.mark.parametrize("field", ["k", "c", "p", "a", "n.i"])
@pytest.mark.parametrize("many", [False, True])
def test_inc_of_null_is_refused_and_writes_nothing(pair, field, many):
    """$inc of a null value fails on MongoDB; Veil refuses it before writing anything (an
    update_many too), on every attribute; a missing value is created."""
    veil_collection, plain_collection = pair
    null_id = {"k": 3, "c": 2, "p": 2, "a": 2, "n.i": 4}[field]
    query = {"_id": {"$in": [1, null_id, 5]}} if many else {"_id": null_id}
    method = "update_many" if many else "update_one"
    server = veil_collection.server_collection
    before = list(server.find({}, sort=[("_id", 1)]))
    with pytest.raises(pymongo.errors.WriteError):
        getattr(plain_collection, method)(query, {"$inc": {field: 1}})
    # the blind ASHE $inc is the server's own: its refusal names the user's field
    refused = (FieldTypeError, "is null") if field != "a" else (ServerError, "field 'a'")
    with pytest.raises(refused[0], match=refused[1]):
        getattr(veil_collection, method)(query, {"$inc": {field: 1}})
    if field != "a" or not many:  # the blind ASHE $inc is the server's own, as plain's
        assert list(server.find({}, sort=[("_id", 1)])) == before
    assert veil_collection.update_one({"_id": 5}, {"$inc": {field: 2}}).matched_count == 1
    plain_collection.update_one({"_id": 5}, {"$inc": {field: 2}})
    assert veil_collection.find_one({"_id": 5}) == plain_collection.find_one({"_id": 5})


@pytest.mark.parametrize(("field", "start", "delta"), [("k", 2**63 - 2, 5), ("c", 99, 5)])
def test_inc_past_what_a_field_stores_writes_nothing(pair, field, start, delta):
    """$inc past int64 (MongoDB refuses it) or past a chained field's declared domain is
    refused before any matched document is written."""
    veil_collection, _ = pair
    veil_collection.update_one({"_id": 4}, {"$set": {field: start}})
    server = veil_collection.server_collection
    before = list(server.find({}, sort=[("_id", 1)]))
    with pytest.raises(FieldTypeError):
        veil_collection.update_many({"_id": {"$in": [1, 4, 5]}}, {"$inc": {field: delta}})
    assert list(server.find({}, sort=[("_id", 1)])) == before
