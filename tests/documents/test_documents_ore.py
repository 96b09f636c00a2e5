"""``ore`` index fields: the oracle's filters, sorts, groups and random updates over a schema
whose indexes are ORE with server-stored B+-trees (small nodes, so the trees grow several
levels), min/max, concurrent writer processes, and bad input."""

from __future__ import annotations

import copy
import random
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import pymongo
import pytest
import test_documents_oracle as oracle
from documents_processes import run_writers
from test_documents_oracle import FILTERS, PIPELINES, SCHEMA, SORTS, make_documents

import veil.documents
from veil.crypto.keys import write_key_file
from veil.documents import FieldTypeError, SchemaError, UnsupportedQueryError, oretree, versions
from veil.errors import VeilError

ORE_SCHEMA: dict[str, Any] = copy.deepcopy(SCHEMA)
for _path in ("title", "year", "price", "when", "meta.rating"):
    _spec = ORE_SCHEMA["fields"][_path]
    ORE_SCHEMA["fields"][_path] = dict(
        {"attr": _spec} if isinstance(_spec, str) else _spec, scheme="ore"
    )
SMALL_NODES = 8  # keys per node in these tests: 300 documents make a three-level tree


@pytest.fixture
def small_nodes(monkeypatch):
    monkeypatch.setattr(oretree, "CAPACITY", SMALL_NODES)


def _load(database: Any, plain: Any) -> None:
    documents = make_documents(300, seed=7)
    for start in range(0, 300, 60):  # several batches: later ones split existing nodes
        database.movies.insert_many(copy.deepcopy(documents[start : start + 60]))
    plain.movies.insert_many(copy.deepcopy(documents))


@pytest.fixture(scope="module")
def loaded(ferretdb, tmp_path_factory):
    """One loaded pair for the read-only oracle tests (loading the trees takes seconds)."""
    key_file = tmp_path_factory.mktemp("ore") / "veil.key"
    write_key_file(key_file)
    client = pymongo.MongoClient(ferretdb.url)
    database = veil.documents.connect(f"{ferretdb.url}veil_ore", key_file, {"movies": ORE_SCHEMA})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(oretree, "CAPACITY", SMALL_NODES)
        _load(database, client["veil_ore_plain"])
    yield database.movies, client["veil_ore_plain"].movies
    database.close()
    client.drop_database("veil_ore")
    client.drop_database("veil_ore_plain")
    client.close()


@pytest.fixture
def pair(url, key_file, plain, small_nodes):
    database = veil.documents.connect(url, key_file, {"movies": ORE_SCHEMA})
    _load(database, plain)
    yield database.movies, plain.movies
    database.close()


@pytest.mark.parametrize("query", FILTERS, ids=[str(f)[:60] for f in FILTERS])
def test_find_and_count(loaded, query):
    oracle.test_find_and_count(loaded, query)


@pytest.mark.parametrize("sort", SORTS, ids=[str(s) for s in SORTS])
def test_sort_skip_limit(loaded, sort):
    oracle.test_sort_skip_limit(loaded, sort)


@pytest.mark.parametrize("pipeline", PIPELINES, ids=[str(p)[:70] for p in PIPELINES])
def test_aggregate(loaded, pipeline):
    oracle.test_aggregate(loaded, pipeline)


def test_random_updates_and_deletes(pair):
    oracle.test_random_updates_and_deletes(pair)


def test_tree_is_deep_and_holds_every_value(loaded):
    veil_collection, _ = loaded
    tree = veil_collection.codec.ciphers["year"].ore.tree
    root = tree._fetch([oretree.ROOT])[0]
    assert root.level >= 2
    assert len(tree.range(None, None)) == sum(
        1 for d in make_documents(300, seed=7) if d.get("year") is not None
    )


@pytest.mark.parametrize(
    "query",
    [
        {"year": {"$gte": 2000, "$lte": 1990}},  # low above high: found by the docfuzz
        {"year": {"$gt": 1995, "$lt": 1995}},
        {"title": {"$gte": "zz", "$lte": "Rain"}},
    ],
)
def test_an_empty_range_over_a_deep_tree(loaded, query):
    veil_collection, plain_collection = loaded
    for walk in range(2):  # the root read afresh, then cached
        assert veil_collection.find(query).to_list() == list(plain_collection.find(query)), walk


def test_range_round_trips_are_the_tree_height(loaded):
    veil_collection, plain_collection = loaded
    tree = veil_collection.codec.ciphers["year"].ore.tree
    height = tree._fetch([oretree.ROOT])[0].level + 1
    query = {"year": {"$gte": 1990, "$lt": 2000}}
    tree._cached_root = None
    for walk, expected_trips in enumerate((height, height - 1)):  # then the root is cached
        tree.round_trips = 0
        assert veil_collection.count_documents(query) == plain_collection.count_documents(query)
        assert tree.round_trips == expected_trips, walk


def test_a_cached_root_grown_stale_misses_nothing(url, key_file, small_nodes):
    schema = {"c": {"fields": {"x": ORE_INT}}}
    with (
        veil.documents.connect(url, key_file, schema) as reader,
        veil.documents.connect(url, key_file, schema) as writer,
    ):
        writer.c.insert_many([{"x": i} for i in range(0, 200, 2)])
        assert reader.c.count_documents({"x": {"$gte": 50}}) == 75  # caches the root
        for start in range(1, 200, 20):  # splits everywhere, the root too
            writer.c.insert_many([{"x": i} for i in range(start, start + 20, 2)])
        tree = reader.c.codec.ciphers["x"].ore.tree
        assert tree._cached_root is not None
        assert tree._cached_root.version < tree._fetch([oretree.ROOT])[0].version
        assert reader.c.count_documents({"x": {"$gte": 50}}) == 150
        assert reader.c.count_documents({"x": {"$gt": 10, "$lt": 20}}) == 9


def test_min_max_and_explain(loaded):
    veil_collection, plain_collection = loaded
    for path in ("year", "price", "title", "when"):
        pipeline = [
            {"$match": {path: {"$ne": None}}},
            {"$group": {"_id": "$meta.src", "lo": {"$min": f"${path}"}, "hi": {"$max": f"${path}"}}},
        ]  # fmt: skip
        got = {row["_id"]: (row["lo"], row["hi"]) for row in veil_collection.aggregate(pipeline)}
        for source, (low, high) in got.items():
            present = {"meta.src": source, path: {"$ne": None}}
            assert low == plain_collection.find_one(present, sort=[(path, 1)])[path]
            assert high == plain_collection.find_one(present, sort=[(path, -1)])[path]
    plan = veil_collection.find({"year": {"$gt": 2000}}).sort("year", 1).explain()
    assert plan["server"]["sort"] is None and plan["client"]["sort"] == [("year", 1)]
    assert plan["client"]["filter"] is None  # ints: the tree walk is exact


def write_documents(url: str, key_file: str, worker: int, count: int, report: str) -> None:
    oretree.CAPACITY = SMALL_NODES
    # a loaded machine can deschedule the other writers for long: this test is about
    # losing nothing, not about how soon a writer gives up (``WRITE_PATIENCE``)
    oretree.WRITE_PATIENCE = 300.0
    try:
        with veil.documents.connect(url, key_file, {"c": {"fields": {"x": ORE_INT}}}) as db:
            rng = random.Random(worker)
            for start in range(0, count, 5):
                batch = [
                    {"_id": f"{worker}-{start + i}", "x": rng.randrange(-100, 100)}
                    for i in range(5)
                ]
                db.c.insert_many(batch)
    except BaseException:  # the parent's assertion says why, not only an exit code
        Path(report).write_text(traceback.format_exc())
        raise


ORE_INT = {"attr": "index", "scheme": "ore"}


def test_concurrent_writer_processes_lose_nothing(url, key_file, small_nodes, tmp_path):
    workers, count = 4, 60
    run_writers(write_documents, url, key_file, workers, count, tmp_path)
    with veil.documents.connect(url, key_file, {"c": {"fields": {"x": ORE_INT}}}) as database:
        documents = database.c.find().to_list()
        assert len(documents) == workers * count
        assert len(database.c.codec.ciphers["x"].ore.tree.range(None, None)) == workers * count
        for low, high in ((-100, 100), (-50, 0), (0, 1), (17, 60)):
            query = {"x": {"$gte": low, "$lt": high}}
            want = sorted(d["_id"] for d in documents if low <= d["x"] < high)
            assert sorted(d["_id"] for d in database.c.find(query)) == want


def test_a_writer_stalled_after_its_claim_is_waited_for(url, key_file, small_nodes):
    """The claim's winner writes its node a round trip later; a writer that meets the
    claim meanwhile backs off and retries instead of giving up (CI once saw a
    descheduled winner outlast a loser's hundred immediate retries)."""
    schema = {"c": {"fields": {"x": ORE_INT}}}
    with (
        veil.documents.connect(url, key_file, schema) as slow,
        veil.documents.connect(url, key_file, schema) as fast,
    ):
        slow.c.insert_many([{"x": i} for i in range(4)])
        tree = slow.c.codec.ciphers["x"].ore.tree
        claimed, release = threading.Event(), threading.Event()
        write = tree._write

        def stalled_write(command):
            claimed.set()  # the claim is in; the node is not written yet
            release.wait(10)
            write(command)

        tree._write = stalled_write
        stalled = threading.Thread(target=slow.c.insert_one, args=({"x": 10},))
        stalled.start()
        assert claimed.wait(10)
        timer = threading.Timer(1.5, release.set)  # well past a hundred quick retries
        timer.start()
        try:
            fast.c.insert_one({"x": 11})
        finally:
            timer.join()
            stalled.join()
            tree._write = write
        assert sorted(d["x"] for d in fast.c.find({"x": {"$gte": 2}})) == [2, 3, 10, 11]


def test_a_dead_writers_node_claim_is_taken_over(url, key_file, small_nodes, monkeypatch):
    """A node claim left by a writer killed before it wrote the node (the node still at
    the version it read) blocks the node only for the lease: the next writer that has
    watched it stand that long claims the next generation, writes, and loses nothing."""
    monkeypatch.setattr(versions, "LEASE", 0.5)
    with veil.documents.connect(url, key_file, {"c": {"fields": {"x": ORE_INT}}}) as database:
        database.c.insert_many([{"x": i} for i in range(20)])  # a root over leaves
        tree = database.c.codec.ciphers["x"].ore.tree
        root = tree._fetch([oretree.ROOT])[0]
        leaf = tree._fetch([root.items[-1]])[0]  # where 100 goes
        for node in (root, leaf):  # the dead writer's claims
            tree._claims.insert_one({"_id": oretree.claim_id(node.id, node.version + 1)})
        database.c.insert_one({"x": 100})
        assert tree._fetch([leaf.id])[0].version == leaf.version + 1
        stale = oretree.claim_id(leaf.id, leaf.version + 1, 1)
        assert tree._claims.count_documents({"_id": stale}) == 1  # taken over
        database.c.insert_many([{"x": i} for i in range(20, 40)])  # splits, the root too
        assert sorted(d["x"] for d in database.c.find({"x": {"$gte": 15}})) == [
            *range(15, 40), 100,
        ]  # fmt: skip


def test_a_claim_held_past_its_lease_is_not_written(url, key_file, small_nodes, monkeypatch):
    """A writer whose claim came back later than ``LEASE / 4`` (another writer may take
    it over after ``LEASE``) leaves the node unwritten and claims the next generation."""
    with veil.documents.connect(url, key_file, {"c": {"fields": {"x": ORE_INT}}}) as database:
        database.c.insert_many([{"x": i} for i in range(4)])
        tree = database.c.codec.ciphers["x"].ore.tree
        version = tree._fetch([oretree.ROOT])[0].version
        late = [True]

        def within_lease(claimed: float) -> bool:
            return not late.pop() if late else True

        monkeypatch.setattr(oretree, "within_lease", within_lease)
        started = time.monotonic()
        database.c.insert_one({"x": 10})
        assert time.monotonic() - started < versions.LEASE / 2  # no wait for its own claim
        claims = {c["_id"] for c in tree._claims.find()}
        assert {oretree.claim_id(oretree.ROOT, version + 1, g) for g in (0, 1)} <= claims
        assert tree._fetch([oretree.ROOT])[0].version == version + 1  # written once
        assert sorted(d["x"] for d in database.c.find({"x": {"$gte": 2}})) == [2, 3, 10]


def test_bad_input(url, key_file):
    with veil.documents.connect(url, key_file, {"c": {"fields": {"x": ORE_INT}}}) as database:
        with pytest.raises(FieldTypeError, match="single values"):
            database.c.insert_one({"x": [1, 2]})
        with pytest.raises(FieldTypeError, match="integer"):
            database.c.insert_one({"x": "7"})
        with pytest.raises(UnsupportedQueryError, match=r"\$gt and \$gte"):
            database.c.find({"x": {"$gt": 1, "$gte": 2}}).to_list()
        assert database.c.count_documents({}) == 0
    with pytest.raises(SchemaError, match="one of"):
        veil.documents.connect(
            url, key_file, {"c": {"fields": {"x": {"attr": "index", "scheme": "x"}}}}
        )


def test_tampered_tree_node_fails_clearly(url, key_file):
    with veil.documents.connect(url, key_file, {"c": {"fields": {"x": ORE_INT}}}) as database:
        database.c.insert_many([{"x": i} for i in range(3)])
        tree = database.c.codec.ciphers["x"].ore.tree
        tree._nodes.update_one({"_id": oretree.ROOT}, {"$set": {"k.0": b"\x01garbage"}})
        with pytest.raises(VeilError, match="ORE ciphertext"):
            database.c.find({"x": {"$gte": 1}}).to_list()
        tree._nodes.update_one({"_id": oretree.ROOT}, {"$unset": {"h": ""}})
        with pytest.raises(VeilError, match="malformed"):
            database.c.find({"x": {"$gte": 1}}).to_list()


def test_drop_removes_the_tree(url, key_file):
    with veil.documents.connect(url, key_file, {"c": {"fields": {"x": ORE_INT}}}) as database:
        database.c.insert_many([{"x": i} for i in range(3)])
        names = set(database.server_database.list_collection_names())
        database.c.drop()
        left = set(database.server_database.list_collection_names())
        assert len(names - left) == 3  # documents, tree nodes, claims


def test_schema_file_with_ore(tmp_path: Path, url, key_file):
    schema = tmp_path / "schema.json"
    schema.write_text('{"c": {"fields": {"x": {"attr": "index", "scheme": "ore"}}}}')
    with veil.documents.connect(url, key_file, schema) as database:
        database.c.insert_one({"x": 5})
        assert database.c.find_one({"x": {"$lte": 5}})["x"] == 5


def test_a_large_batch_splits_into_full_nodes(url, key_file, small_nodes):
    """A batch many times a node's size into a tree already built (its root no longer a
    leaf, so no bulk load): leaves take many entries each and split into many pieces."""
    with veil.documents.connect(url, key_file, {"c": {"fields": {"x": ORE_INT}}}) as database:
        values = random.Random(2).sample(range(-1000, 1000), 300)
        database.c.insert_many([{"x": v} for v in values[:30]])  # bulk-built: a root over leaves
        tree = database.c.codec.ciphers["x"].ore.tree
        assert tree._fetch([oretree.ROOT])[0].level >= 1
        database.c.insert_many([{"x": v} for v in values[30:]])
        nodes = list(tree._nodes.find())
        assert max(len(n["k"]) for n in nodes) <= SMALL_NODES
        assert sum(len(n["k"]) for n in nodes if n["h"] == 0) == len(values)
        got = sorted(d["x"] for d in database.c.find({"x": {"$gt": -300, "$lte": 400}}))
        assert got == sorted(v for v in values if -300 < v <= 400)
