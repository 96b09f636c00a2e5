"""The oracle: every operation through veil.documents and through plain pymongo on the
same FerretDB, results compared, over a schema that mixes every attribute."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import random
import secrets
from typing import Any

import pymongo
import pytest

import veil.documents
from veil.crypto.keys import write_key_file

SCHEMA = {
    "fields": {
        "title": {"attr": "index", "type": "string"},
        "year": "index",
        "price": {"attr": "index", "type": "decimal", "scale": 2},
        "when": {"attr": "index", "type": "datetime"},
        "tags": {"attr": "index", "type": "string"},
        "notes": "static",
        "gross": "h_add",
        "meta.src": "do_nothing",
        "meta.rating": "index",
    },
    "default": "refuse",
}
WORDS = [
    "Rain Man",
    "rain",
    "Ürük",
    "日本語タイトル",
    "",
    "a",
    "ab",
    "Movie Movie Long",
    "zz",
    "Émile",
]
EXTREMES = [-(2**63), 2**63 - 1, -1, 0, 1, 1988, -2026]


def make_documents(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    documents = []
    for i in range(count):
        document: dict[str, Any] = {
            "_id": i,
            "title": rng.choice(WORDS) + (str(rng.randrange(5)) if rng.random() < 0.5 else ""),
            "year": rng.choice(EXTREMES) if rng.random() < 0.15 else rng.randrange(1950, 2030),
            "price": round(rng.uniform(-50, 500), rng.choice([0, 2, 3])),
            "when": dt.datetime(1960, 1, 1) + dt.timedelta(minutes=rng.randrange(10**8)),
            "tags": rng.sample(["drama", "comedy", "noir", "ß", "x"], rng.randrange(0, 3)),
            "notes": rng.choice([{"plot": "secret " + str(i)}, "text", [1, 2], None]),
            "gross": rng.randrange(-(10**12), 10**12),
            "meta": {"src": rng.choice(["imdb", "tmdb"]), "rating": rng.randrange(-5, 6)},
        }
        for field in ("title", "year", "price", "tags", "gross", "notes", "when"):
            roll = rng.random()
            if roll < 0.08:
                del document[field]
            elif roll < 0.14:
                document[field] = None
        if rng.random() < 0.1:
            del document["meta"]["rating"]
        documents.append(document)
    return documents


@pytest.fixture
def sums():
    """How grouped h_add sums run; the aggregate tests run both ways."""
    return "server"


BOTH_SUMS = pytest.mark.parametrize("sums", ["server", "fetch"])


@pytest.fixture
def pair(url, key_file, plain, sums):
    """A pair of its own, for a test that writes."""
    database = veil.documents.connect(url, key_file, {"movies": SCHEMA}, sums=sums)
    documents = make_documents(300, seed=7)
    database.movies.insert_many(copy.deepcopy(documents))
    plain.movies.insert_many(copy.deepcopy(documents))
    yield database.movies, plain.movies
    database.close()


@pytest.fixture(scope="module")
def loaded(ferretdb, tmp_path_factory):
    """The read-only tests' pair, loaded once: one database read through a connection per
    ``sums`` (reads leave the stored documents as they were; the writing test has its own)."""
    key_file = tmp_path_factory.mktemp("oracle") / "veil.key"
    write_key_file(key_file)
    name = f"veil_oracle_{secrets.token_hex(4)}"
    client = pymongo.MongoClient(ferretdb.url)
    connections = {
        sums: veil.documents.connect(
            f"{ferretdb.url}{name}", key_file, {"movies": SCHEMA}, sums=sums
        )
        for sums in ("server", "fetch")
    }
    documents = make_documents(300, seed=7)
    connections["server"].movies.insert_many(copy.deepcopy(documents))
    client[f"{name}_plain"].movies.insert_many(copy.deepcopy(documents))
    yield {sums: (c.movies, client[f"{name}_plain"].movies) for sums, c in connections.items()}
    for connection in connections.values():
        connection.close()
    client.drop_database(name)
    client.drop_database(f"{name}_plain")
    client.close()


@pytest.fixture
def read_pair(loaded, sums):
    return loaded[sums]


FILTERS: list[dict[str, Any]] = [
    {},
    {"year": 1988},
    {"year": {"$gte": 1980, "$lt": 1990}},
    {"year": {"$gt": 2**63 - 2}},
    {"year": {"$lte": -(2**63)}},
    {"year": {"$in": [1950, 1999, -1, None]}},
    {"year": {"$nin": [1950, 1999]}},
    {"year": {"$ne": None}},
    {"year": None},
    {"year": {"$exists": False}},
    {"title": "Rain Man"},
    {"title": {"$gt": "Rain"}},
    {"title": {"$gte": "Movie Movie Long1", "$lt": "rain"}},
    {"title": {"$in": ["a", "ab", "日本語タイトル3"]}},
    {"title": {"$ne": "zz"}},
    {"title": {"$lt": ""}},
    {"price": {"$gt": 100.005}},
    {"price": {"$gte": 0, "$lte": 10}},
    {"price": 12.5},
    {"price": {"$ne": 12.5}},
    {"when": {"$gte": dt.datetime(1980, 1, 1), "$lt": dt.datetime(1990, 6, 1, 12)}},
    {"tags": "noir"},
    {"tags": {"$in": ["ß", "x"]}},
    {"tags": {"$gt": "d"}},
    {"meta.rating": {"$gte": 3}},
    {"meta.src": "imdb"},
    {"$or": [{"year": {"$lt": 1960}}, {"title": {"$gt": "zz"}}]},
    {"$or": [{"year": {"$lt": 1960}}, {"price": {"$gt": 400}}]},
    {"$and": [{"year": {"$gt": 1970}}, {"meta.src": "tmdb"}], "price": {"$lt": 200}},
    {"$nor": [{"year": {"$lt": 1990}}]},
    {"_id": {"$in": [3, 5, 8]}},
    {"gross": {"$exists": True}},
]


def by_id(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(documents, key=lambda d: d["_id"])


@pytest.mark.parametrize("query", FILTERS, ids=[str(f)[:60] for f in FILTERS])
def test_find_and_count(read_pair, query):
    veil_collection, plain_collection = read_pair
    expected = by_id(list(plain_collection.find(query)))
    assert by_id(veil_collection.find(query).to_list()) == expected
    assert veil_collection.count_documents(query) == len(expected)


SORTS = [
    [("year", 1), ("_id", 1)],
    [("year", -1), ("_id", -1)],
    [("title", 1), ("_id", 1)],
    [("price", -1), ("_id", 1)],
    [("when", 1), ("_id", 1)],
    [("tags", 1), ("_id", 1)],
    [("meta.rating", -1), ("_id", 1)],
]


@pytest.mark.parametrize("sort", SORTS, ids=[str(s) for s in SORTS])
def test_sort_skip_limit(read_pair, sort):
    veil_collection, plain_collection = read_pair
    for query in ({}, {"year": {"$gte": 1990}}, {"title": {"$gt": "Movie"}}):
        expected = list(plain_collection.find(query).sort(sort).skip(3).limit(17))
        assert veil_collection.find(query).sort(sort).skip(3).limit(17).to_list() == expected
        assert veil_collection.find(query, sort=sort).to_list() == list(
            plain_collection.find(query, sort=sort)
        )


def test_projection(read_pair):
    veil_collection, plain_collection = read_pair
    projections = (
        {"title": 1, "year": 1}, {"notes": 0, "meta": 0}, {"meta.src": 1, "_id": 0},
        {"meta": 1, "gross": 1}, {"meta.rating": 1, "tags": 1, "_id": 1}, ["when", "price"],
    )  # fmt: skip
    for projection, query in itertools.product(
        projections, ({"year": {"$gt": 2000}}, {"title": {"$gt": "R"}})
    ):
        assert by_id_or_list(veil_collection.find(query, projection).to_list()) == by_id_or_list(
            list(plain_collection.find(query, projection))
        )


def by_id_or_list(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if documents and "_id" in documents[0]:
        return by_id(documents)
    return sorted(documents, key=repr)


# FerretDB 1.24 computes only the first accumulator of a $group, so each oracle
# pipeline has one; Veil's own multi-accumulator groups are checked against them.
PIPELINES: list[list[dict[str, Any]]] = [
    [{"$group": {"_id": "$year", "s": {"$sum": "$gross"}}}],
    [{"$match": {"year": {"$gte": 1990}}}, {"$group": {"_id": "$year", "n": {"$count": {}}}}],
    [{"$match": {"year": {"$lt": 2000}}}, {"$group": {"_id": None, "s": {"$sum": "$gross"}}}],
    [{"$group": {"_id": "$meta.src", "n": {"$sum": 1}}}],
    [{"$group": {"_id": {"y": "$year", "s": "$meta.src"}, "n": {"$count": {}}}}],
    [{"$match": {"title": {"$gt": "R"}}}, {"$group": {"_id": "$title", "s": {"$sum": "$gross"}}}],
    [{"$group": {"_id": "$meta.rating", "s": {"$sum": "$price"}}}],
    [{"$match": {"price": {"$gt": 100}}}, {"$sort": {"price": -1, "_id": 1}}, {"$limit": 5}],
    [{"$sort": {"year": 1, "_id": 1}}, {"$skip": 4}, {"$limit": 7}, {"$project": {"title": 1}}],
]


def by_key(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: repr(r.get("_id")))


@BOTH_SUMS
@pytest.mark.parametrize("pipeline", PIPELINES, ids=[str(p)[:70] for p in PIPELINES])
def test_aggregate(read_pair, pipeline):
    veil_collection, plain_collection = read_pair
    expected = list(plain_collection.aggregate(pipeline))
    got = veil_collection.aggregate(pipeline)
    if any("$sort" in stage for stage in pipeline):
        assert got == expected
    else:
        assert _approx(by_key(got)) == _approx(by_key(expected))


def _approx(rows: list[dict[str, Any]]) -> list[Any]:
    return [
        {k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for k, v in r.items()}
        for r in rows
    ]


@BOTH_SUMS
def test_avg_on_the_server(read_pair):
    """FerretDB has no $avg: the expected averages are computed here from plain documents."""
    veil_collection, plain_collection = read_pair
    values: dict[Any, list[int]] = {}
    for document in plain_collection.find({"year": {"$gte": 1990}}):
        gross = document.get("gross")
        values.setdefault(document.get("year"), [])
        if isinstance(gross, int):
            values[document.get("year")].append(gross)
    expected = {y: (sum(v) / len(v) if v else None) for y, v in values.items()}
    pipeline = [
        {"$match": {"year": {"$gte": 1990}}},
        {"$group": {"_id": "$year", "a": {"$avg": "$gross"}}},
    ]
    got = {row["_id"]: row["a"] for row in veil_collection.aggregate(pipeline)}
    assert got.keys() == expected.keys()
    for year, average in expected.items():
        assert got[year] == (None if average is None else pytest.approx(average, rel=1e-12))


@BOTH_SUMS
def test_several_accumulators_match_single_ones(read_pair):
    """Plain FerretDB computes one accumulator a $group, so each is asked alone there;
    ``s2`` reads the same h_add field as ``s`` (its ids must be counted once)."""
    veil_collection, plain_collection = read_pair
    match = {"$match": {"year": {"$gte": 1960}}}
    group = {"_id": "$year", "s": {"$sum": "$gross"}, "c": {"$count": {}}, "n": {"$sum": 1}}
    group["s2"] = {"$sum": "$gross"}
    got = {row["_id"]: row for row in veil_collection.aggregate([match, {"$group": group}])}
    for output in ("s", "c", "n", "s2"):
        single = {"_id": "$year", output: group[output]}
        for row in plain_collection.aggregate([match, {"$group": single}]):
            assert got[row["_id"]][output] == pytest.approx(row[output], rel=1e-12)


def test_random_updates_and_deletes(pair):
    veil_collection, plain_collection = pair
    rng = random.Random(11)
    for step in range(60):
        year = rng.randrange(1950, 2030)
        query = rng.choice(
            [
                {"year": year},
                {"year": {"$gte": year}},
                {"title": {"$gt": "R"}},
                {"price": {"$lt": rng.uniform(0, 100)}},
                {"_id": rng.randrange(300)},
            ]
        )
        operation = rng.choice(["set", "unset", "inc_add", "inc_index", "replace", "delete"])
        many = rng.random() < 0.5
        if operation == "set":
            update = {
                "$set": {
                    "title": rng.choice(WORDS),
                    "notes": {"step": step},
                    "gross": rng.randrange(-1000, 1000),
                    "meta.src": "set",
                }
            }
        elif operation == "unset":
            update = {"$unset": {rng.choice(["title", "notes", "gross", "price"]): ""}}
        elif operation == "inc_add":
            update = {"$inc": {"gross": rng.randrange(-(10**6), 10**6)}}
            numeric = {"year": {"$gte": year}, "gross": {"$type": "number"}}
            query = {"_id": {"$in": [d["_id"] for d in plain_collection.find(numeric)]}}
        elif operation == "inc_index":
            update = {"$inc": {"meta.rating": 2}}
        if operation == "replace":
            replacement = make_documents(1, seed=step)[0]
            del replacement["_id"]
            expected = plain_collection.replace_one(query, copy.deepcopy(replacement))
            got = veil_collection.replace_one(query, copy.deepcopy(replacement))
        elif operation == "delete":
            method = "delete_many" if many else "delete_one"
            expected = getattr(plain_collection, method)(query)
            got = getattr(veil_collection, method)(query)
            assert got.deleted_count == expected.deleted_count, (step, query)
            continue
        else:
            method = "update_many" if many else "update_one"
            expected = getattr(plain_collection, method)(query, update)
            got = getattr(veil_collection, method)(query, update)
        assert got.matched_count == expected.matched_count, (step, query, update)
    assert by_id(veil_collection.find().to_list()) == by_id(list(plain_collection.find()))
