"""Bad input gives a clear VeilError and writes nothing half-way."""

from __future__ import annotations

import pymongo
import pytest

import veil.documents
from veil.crypto.keys import write_key_file
from veil.documents import (
    FieldTypeError,
    PartialWriteError,
    SchemaError,
    ServerError,
    UnsupportedQueryError,
)
from veil.errors import AuthenticationError, DomainError, VeilError, WrongKeyError

SCHEMA = {
    "fields": {
        "title": {"attr": "index", "type": "string"},
        "year": "index",
        "notes": "static",
        "gross": "h_add",
        "src": "do_nothing",
    }
}


@pytest.fixture
def movies(url, key_file):
    with veil.documents.connect(url, key_file, {"movies": SCHEMA}) as database:
        database.movies.insert_one({"_id": 1, "title": "Rain Man", "year": 1988, "gross": 5})
        yield database.movies


def test_unknown_field_is_refused_and_nothing_is_written(movies):
    good = {"_id": 2, "title": "Heat", "year": 1995}
    with pytest.raises(SchemaError, match="'director' is not in the collection's schema"):
        movies.insert_many([good, {"_id": 3, "director": "Levinson"}])
    assert movies.count_documents({}) == 1


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"year": "1988"}, "field 'year' is an index of type 'int'"),
        ({"year": 19.88}, "field 'year' is an index of type 'int'"),
        ({"title": 12}, "field 'title' is an index of type 'string'"),
        ({"gross": 1.5}, "field 'gross' is h_add"),
        ({"year": {"nested": 1}}, "field 'year' is an index"),
    ],
)
def test_wrong_type_for_attribute(movies, document, message):
    with pytest.raises(FieldTypeError, match=message):
        movies.insert_one(document)
    assert movies.count_documents({}) == 1


@pytest.mark.parametrize(
    ("query", "field", "operator", "attribute"),
    [
        ({"notes": "x"}, "notes", "$eq", "static"),
        ({"gross": {"$gt": 5}}, "gross", "$gt", "h_add"),
        ({"year": {"$regex": "19"}}, "year", "$regex", "index"),
        ({"unknown": 1}, "unknown", "a filter", "static (not in the schema)"),
    ],
)
def test_operator_not_allowed(movies, query, field, operator, attribute):
    with pytest.raises(UnsupportedQueryError) as raised:
        movies.find(query).to_list()
    assert (raised.value.field, raised.value.operator, raised.value.attribute) == (
        field,
        operator,
        attribute,
    )
    assert field in str(raised.value)


def test_static_equality_names_the_attribute_that_allows_it(movies):
    with pytest.raises(UnsupportedQueryError, match="declare it index"):
        movies.count_documents({"notes": "x"})
    with pytest.raises(UnsupportedQueryError, match="sort"):
        movies.find().sort("notes").to_list()
    with pytest.raises(UnsupportedQueryError, match=r"\$push"):
        movies.update_one({}, {"$push": {"notes": 1}})


@pytest.mark.parametrize("document", [{"year": 2**63}, {"gross": -(2**63) - 1}])
def test_value_outside_the_domain(movies, document):
    with pytest.raises(DomainError):
        movies.insert_one(document)
    assert movies.count_documents({}) == 1


def test_wrong_key(url, key_file, tmp_path, movies):
    other = tmp_path / "other.key"
    write_key_file(other)
    with pytest.raises(WrongKeyError, match="was encrypted with key"):
        veil.documents.connect(url, other, {"movies": SCHEMA})


def test_tampered_ciphertext(movies, ferretdb, database_name):
    plain = pymongo.MongoClient(ferretdb.url)
    try:
        stored = plain[database_name][movies.server_name]
        name = movies.codec.ciphers["title"].name
        sealed = bytearray(stored.find_one({"_id": 1})[name]["s"])
        sealed[-1] ^= 1
        stored.update_one({"_id": 1}, {"$set": {f"{name}.s": bytes(sealed)}})
    finally:
        plain.close()
    with pytest.raises(AuthenticationError):
        movies.find_one({"_id": 1})


def test_server_down(key_file):
    from veil_dev.servers.ports import free_port

    with pytest.raises(ServerError, match="did not answer"):
        veil.documents.connect(f"mongodb://127.0.0.1:{free_port()}/x", key_file, timeout_ms=300)


def test_server_stopped_midway(tmp_path, key_file):
    from veil_dev.servers.ferretdb import FerretDBServer

    server = FerretDBServer(tmp_path / "server").start()
    try:
        database = veil.documents.connect(server.url + "d", key_file, timeout_ms=300)
        database.things.insert_one({"a": 1})
    finally:
        server.stop()
    try:
        with pytest.raises(VeilError, match="did not answer"):
            database.things.find_one({})
    finally:
        database.close()


def test_failed_insert_many_says_what_was_written(movies):
    batch = [{"_id": 10, "year": 1}, {"_id": 11, "year": 2}, {"_id": 1, "year": 3}, {"_id": 12}]
    with pytest.raises(PartialWriteError) as raised:
        movies.insert_many(batch)
    assert raised.value.written_ids == [10, 11]
    assert sorted(d["_id"] for d in movies.find()) == [1, 10, 11]


@pytest.mark.parametrize(
    "schema",
    [
        {"fields": {"a": "sideways"}},
        {"fields": {"a": {"attr": "index", "type": "float"}}},
        {"fields": {"a": {"attr": "index", "scheme": "bogus"}}},
        {"fields": {"a": {"attr": "h_mul", "type": "string"}}},
        {"fields": {"$a": "static"}},
        {"fields": {"a": "static"}, "default": "maybe"},
    ],
)
def test_bad_schema(url, key_file, schema):
    with pytest.raises(SchemaError):
        veil.documents.connect(url, key_file, {"c": schema})
