"""API details: explain, h_add increments, schema files, unnamed fields, server sums."""

from __future__ import annotations

import json
import random

import pytest

import veil.documents
from veil.documents import DocumentsError, UnsupportedQueryError


def test_explain_shows_server_and_client_parts(url, key_file):
    schema = {"m": {"year": "index", "title": {"attr": "index", "type": "string"}}}
    with veil.documents.connect(url, key_file, schema) as database:
        cursor = database.m.find({"year": {"$gte": 1980}}).sort("year", -1).limit(5)
        plan = cursor.explain()
        (name,) = {k.split(".")[0] for k in plan["server"]["filter"]}
        assert name.startswith("f") and "year" not in json.dumps(str(plan["server"]))
        assert plan["server"]["limit"] == 5 and plan["client"]["filter"] is None
        inexact = database.m.find({"title": {"$gt": "M"}}).limit(5).explain()
        assert inexact["client"]["filter"] == {"title": {"$gt": "M"}}
        assert inexact["server"]["limit"] == 0 and inexact["client"]["limit"] == 5


@pytest.mark.parametrize("sums", ["server", "fetch"])
def test_many_increments_sum_right(url, key_file, sums):
    """Halves pass 2**31 after a few blind $inc (FerretDB wraps int32 $inc: stored as int64)."""
    rng = random.Random(3)
    schema = {"t": {"g": "index", "v": "h_add"}}
    with veil.documents.connect(url, key_file, schema, sums=sums) as database:
        values = {i: rng.randrange(-(2**40), 2**40) for i in range(40)}
        database.t.insert_many([{"_id": i, "g": i % 3, "v": v} for i, v in values.items()])
        for _ in range(6):
            delta = rng.randrange(-(2**45), 2**45)
            database.t.update_many({"g": {"$lte": 1}}, {"$inc": {"v": delta}})
            for i in values:
                values[i] += delta if i % 3 <= 1 else 0
            one = rng.randrange(40)
            database.t.update_one({"_id": one}, {"$inc": {"v": 7}})
            values[one] += 7
        assert {d["_id"]: d["v"] for d in database.t.find()} == values
        rows = database.t.aggregate([{"$group": {"_id": "$g", "s": {"$sum": "$v"}}}])
        expected = {g: sum(v for i, v in values.items() if i % 3 == g) for g in range(3)}
        assert {row["_id"]: row["s"] for row in rows} == expected


def _nest(database, id_, oldest=False):
    """Rewrite document ``id_``'s flat ASHE form as an earlier nested one, server-side."""
    cipher = database.t.codec.ciphers["v"]
    stored = database.t.server_collection.find_one({"_id": id_})
    nested = {p: stored[cipher.name + p] for p in ("h", "i", "j") if cipher.name + p in stored}
    nested["l"] = stored[cipher.name]
    if oldest:
        nested = {"v": 1, "l": nested["l"], "h": nested["h"], "i": [nested["i"]]}
    database.t.server_collection.update_one(
        {"_id": id_},
        {"$set": {cipher.name: nested}, "$unset": dict.fromkeys(cipher.stored_names[1:], "")},
    )


@pytest.mark.parametrize("sums", ["server", "fetch"])
def test_h_add_forms_flat_nested_and_created_by_inc(url, key_file, sums):
    """The flat form (three top-level int64s), a value created by a blind $inc (ids only
    in ``j``), a null, and values of both earlier nested forms (``{l, h, i, j}`` and
    ``{v: 1, l, h, i: [ids]}``) read, sum and average like any other; a ``$set`` rewrites
    a nested value flat and drops the old value's companions."""
    schema = {"t": {"g": "index", "v": "h_add"}}
    with veil.documents.connect(url, key_file, schema, sums=sums) as database:
        database.t.insert_many([{"_id": 1, "g": 1, "v": 10}, {"_id": 2, "g": 1}])
        database.t.insert_many([{"_id": 3, "g": 2, "v": -4}, {"_id": 4, "g": 2, "v": 7}])
        database.t.insert_one({"_id": 5, "g": 1, "v": None})
        database.t.update_one({"_id": 2}, {"$inc": {"v": 5}})
        database.t.update_one({"_id": 2}, {"$inc": {"v": 1}})
        database.t.update_one({"_id": 3}, {"$inc": {"v": 100}})
        cipher = database.t.codec.ciphers["v"]
        flat = database.t.server_collection.find_one({"_id": 1})
        assert isinstance(flat[cipher.name], int) and isinstance(flat[cipher.name + "i"], int)
        _nest(database, 3)
        _nest(database, 4, oldest=True)
        assert [d.get("v") for d in database.t.find().sort("_id", 1)] == [10, 6, 96, 7, None]
        pipeline = [{"$group": {"_id": "$g", "s": {"$sum": "$v"}, "a": {"$avg": "$v"}}}]
        rows = {row["_id"]: (row["s"], row["a"]) for row in database.t.aggregate(pipeline)}
        assert rows == {1: (16, 8.0), 2: (103, 51.5)}
        database.t.update_one({"_id": 3}, {"$set": {"v": 2}})
        stored = database.t.server_collection.find_one({"_id": 3})
        assert set(stored) == {
            "_id",
            database.t.codec.version,
            database.t.codec.ciphers["g"].name,
            *cipher.stored_names[:3],
        }
        assert database.t.find_one({"_id": 3}, {"v": 1}) == {"_id": 3, "v": 2}
        database.t.update_one({"_id": 2}, {"$unset": {"v": ""}})
        assert database.t.find_one({"_id": 2}) == {"_id": 2, "g": 1}
        assert database.t.count_documents({"v": {"$exists": True}}) == 4


def test_schema_file_and_unnamed_fields_sealed(url, key_file, tmp_path):
    path = tmp_path / "schemas.json"
    path.write_text(json.dumps({"c": {"fields": {"k": "index"}, "default": "static"}}))
    with veil.documents.connect(url, key_file, path) as database:
        document = {"_id": 1, "k": 5, "free": {"nested": [1, "two"]}, "other": None}
        database.c.insert_one(dict(document))
        assert database.c.find_one({"k": 5}) == document
        with pytest.raises(UnsupportedQueryError, match=r"'free\.nested'"):
            database.c.find_one({"free.nested": 1})
        with pytest.raises(UnsupportedQueryError):
            database.c.update_one({"k": 5}, {"$set": {"free": 1}})


def test_collection_without_schema_seals_everything(url, key_file):
    with veil.documents.connect(url, key_file) as database:
        database.notes.insert_one({"_id": "a", "text": "hello"})
        assert database["notes"].find_one() == {"_id": "a", "text": "hello"}
        assert database.notes.count_documents({"_id": "a"}) == 1


def test_sums_default_to_fetching_on_ferretdb(url, key_file):
    """FerretDB's ``$group`` computes one accumulator per query: the server path costs more."""
    with veil.documents.connect(url, key_file) as database:
        assert database.sums == "fetch"
    with veil.documents.connect(url, key_file, sums="server") as database:
        assert database.sums == "server"


def test_bad_options(url, key_file):
    with pytest.raises(DocumentsError, match="sums"):
        veil.documents.connect(url, key_file, sums="sometimes")
    with veil.documents.connect(url, key_file, {"m": {"n": "static"}}) as database:
        with pytest.raises(UnsupportedQueryError, match="create_index"):
            database.m.create_index("n")
        with pytest.raises(DocumentsError, match="cannot change _id"):
            database.m.replace_one({}, {"_id": 3})


def test_client_side_increment_retries_when_another_writer_came_first(url, key_file, monkeypatch):
    """$inc on an index field is read-modify-write, written only if the stored document is
    unchanged; a writer that came first makes it read again and re-apply. (Concurrent
    writers on FerretDB 1.24 lose updates even through plain pymongo: its updates are not
    atomic, see docs/documents.md, so the interleaving is forced here.)"""
    from veil.documents.updates import Updates

    schema = {"c": {"n": "index", "h": "h_add"}}
    with (
        veil.documents.connect(url, key_file, schema) as database,
        veil.documents.connect(url, key_file, schema) as other,
    ):
        database.c.insert_one({"_id": "x", "n": 0, "h": 0})
        original = Updates.client_update
        interleaved = []

        def late(self, document, client_ops, server_update):
            if not interleaved:  # another writer gets in between our read and our write
                interleaved.append(1)
                other.c.update_one({"_id": "x"}, {"$inc": {"n": 10}})
            return original(self, document, client_ops, server_update)

        monkeypatch.setattr(Updates, "client_update", late)
        result = database.c.update_one({"_id": "x"}, {"$inc": {"n": 1, "h": 2}})
        assert result.matched_count == 1
        assert database.c.find_one({"_id": "x"}) == {"_id": "x", "n": 11, "h": 2}
