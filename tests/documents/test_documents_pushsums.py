"""Grouped sums on a server whose ``$group`` computes several accumulators and ``$push``
(mongo-java-server; MongoDB does too): the summed ids in the one aggregation, chained
sums over filtered runs; and the chained and sums tests written for FerretDB, again on
this server (the oracle is plain pymongo on the same server)."""

# ruff: noqa: F811  (the FerretDB modules' fixtures, imported, are the tests' arguments)

from __future__ import annotations

import random

import pytest
from test_documents_api import (  # noqa: F401  (collected here too, on this server)
    test_h_add_forms_flat_nested_and_created_by_inc,
    test_many_increments_sum_right,
)
from test_documents_chains import (  # noqa: F401  (collected here too, on this server)
    SUM_BY_G,
    count_aggregations,
    expected,
    grouped,
    loaded,
    rows,
    test_a_failed_insert_leaves_a_hole_that_is_noticed,
    test_a_filter_on_the_chain_key_alone_still_sums_on_the_server,
    test_a_filter_or_another_key_falls_back_to_the_fetched_path,
    test_chain_sums_equal_plaintext_sums_in_one_aggregation,
    test_chains_longer_than_their_capacity_sum_in_sub_chains,
    test_deletes_and_updates_give_right_sums,
)

import veil.documents
from veil.documents.errors import ServerRefusedError


@pytest.fixture
def url(mongo_java_url):
    return mongo_java_url


@pytest.fixture
def plain(mongo_java_plain):
    return mongo_java_plain


def test_the_probe_tells_the_servers_apart(url, key_file, ferretdb, database_name):
    """mongo-java-server groups with several accumulators and $push; FerretDB 1.24 does not;
    an empty collection cannot tell and is asked again."""
    with veil.documents.connect(url, key_file) as database:
        server = database.t.server_collection
        assert database.groups_push(server) is False and database._pushes is None
        database.t.insert_one({"_id": 1, "x": 1})
        assert database.groups_push(server) is True
    with veil.documents.connect(f"{ferretdb.url}{database_name}", key_file) as database:
        database.t.insert_one({"_id": 1, "x": 1})
        assert database.groups_push(database.t.server_collection) is False


def h_add_rows(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        document = {"_id": i, "g": rng.choice([1, 2, 3, None]), "f": rng.randrange(10)}
        if rng.random() < 0.85:
            document["v"] = rng.choice([rng.randrange(-(2**40), 2**40), None, 0])
        if document["g"] is None and rng.random() < 0.5:
            del document["g"]
        out.append(document)
    return out


PIPELINES = [
    [{"$group": {"_id": "$g", "s": {"$sum": "$v"}}}],
    [{"$match": {"f": {"$lt": 4}}}, {"$group": {"_id": "$g", "s": {"$sum": "$v"}}}],
    [{"$match": {"_id": {"$gte": 50}}}, {"$group": {"_id": "$g", "a": {"$avg": "$v"}}}],
    [{"$match": {"f": 3}}, {"$group": {"_id": None, "s": {"$sum": "$v"}, "n": {"$sum": 1}}}],
    [{"$match": {"f": 99}}, {"$group": {"_id": "$g", "s": {"$sum": "$v"}}}],
]


@pytest.mark.parametrize("pipeline", PIPELINES, ids=range(len(PIPELINES)))
def test_server_sums_come_back_in_one_aggregation(url, key_file, plain, pipeline):
    """The halves' sums and every summed id in one aggregation, no find: values present,
    null, missing, created by a blind $inc and moved by one."""
    schema = {"t": {"g": "index", "f": "index", "v": "h_add"}}
    documents = h_add_rows(200, seed=5)
    with veil.documents.connect(url, key_file, schema, sums="server") as database:
        database.t.insert_many([dict(d) for d in documents])
        plain.t.insert_many(documents)
        numbers = [d["_id"] for d in documents if isinstance(d.get("v"), int)]
        missing = [d["_id"] for d in documents if "v" not in d]
        for id_, delta in ((numbers[0], 7), (numbers[1], -(2**41)), (missing[0], 1)):
            database.t.update_one({"_id": id_}, {"$inc": {"v": delta}})
            plain.t.update_one({"_id": id_}, {"$inc": {"v": delta}})
        calls = count_aggregations(database.t)
        assert grouped(database.t, pipeline) == expected(plain.t, pipeline)
        assert calls == {"aggregate": 1, "find": 0}


def test_a_refused_aggregation_takes_the_other_server_path(url, key_file, plain, monkeypatch):
    """A server refusing the one aggregation (a group's ids past its 16 MB document
    limit, say) leaves the answer to the path FerretDB takes: right, in more commands."""
    schema = {"t": {"g": "index", "f": "index", "v": "h_add"}}
    documents = h_add_rows(120, seed=6)
    with veil.documents.connect(url, key_file, schema, sums="server") as database:
        database.t.insert_many([dict(d) for d in documents])
        plain.t.insert_many(documents)
        calls = count_aggregations(database.t)
        counted = database.t.reads.aggregate

        def refuse_pushes(pipeline):
            if any("$push" in str(stage) for stage in pipeline):
                raise ServerRefusedError("aggregate: the server refused it: BSONObjectTooLarge")
            return counted(pipeline)

        monkeypatch.setattr(database.t.reads, "aggregate", refuse_pushes)
        pipeline = [{"$match": {"f": {"$gte": 2}}}, *SUM_BY_G]
        assert grouped(database.t, pipeline) == expected(plain.t, pipeline)
        assert calls["find"] == 1


@pytest.mark.parametrize(
    "match",
    [{"_id": {"$lt": 150}}, {"_id": {"$gte": 100, "$lt": 220}}, {"_id": {"$gte": 290}}],
)
def test_a_filter_following_the_write_order_sums_runs_in_one_aggregation(loaded, match):
    """Documents written in _id order fill each chain in that order: an _id range leaves
    one run of positions per group, whose pads telescope."""
    veil_c, plain_c = loaded
    for pipeline in (
        [{"$match": match}, *SUM_BY_G],
        [{"$match": match}, {"$group": {"_id": "$g", "a": {"$avg": "$v"}, "n": {"$sum": 1}}}],
    ):
        calls = count_aggregations(veil_c)
        assert grouped(veil_c, pipeline) == expected(plain_c, pipeline), match
        assert calls == {"aggregate": 1, "find": 0}, match


@pytest.mark.parametrize(
    "change",
    [
        lambda c, id_: c.delete_one({"_id": id_}),  # a hole inside the run
        lambda c, id_: c.update_one({"_id": id_}, {"$set": {"v": 3}}),  # moved to the end
        lambda c, id_: c.update_one({"_id": id_}, {"$set": {"g": 2}}),  # to another chain
    ],
)
def test_a_hole_in_a_run_is_noticed_and_fetched(loaded, change):
    veil_c, plain_c = loaded
    valued = [d["_id"] for d in rows(300) if d["_id"] < 150 and isinstance(d.get("v"), int)]
    ones = [id_ for id_ in valued if rows(300)[id_].get("g") == 1]
    middle = ones[len(ones) // 2]  # values of group 1 before and after it in the run
    change(veil_c, middle)
    change(plain_c, middle)
    pipeline = [{"$match": {"_id": {"$lt": 150}}}, *SUM_BY_G]
    calls = count_aggregations(veil_c)
    assert grouped(veil_c, pipeline) == expected(plain_c, pipeline)
    assert calls["find"] == 1


def test_runs_past_a_chains_capacity_are_summed_by_sub_chain(url, key_file, plain):
    """A wide domain leaves room for 127 words a chain: runs of 150 positions in one
    group are summed per sub-chain, each run checked on its own."""
    schema = {"c": {"fields": {"g": "index", "v": {
        "attr": "h_add", "chain": "g", "domain": [-(2**40), 2**40]}}}}  # fmt: skip
    rng = random.Random(9)
    documents = [{"_id": i, "g": i % 2, "v": rng.randrange(-(2**40), 2**40)} for i in range(600)]
    with veil.documents.connect(url, key_file, schema) as database:
        assert database.c.codec.ciphers["v"].chained.layout.capacity == 127
        for at in range(0, len(documents), 100):
            database.c.insert_many([dict(d) for d in documents[at : at + 100]])
        plain.c.insert_many(documents)
        with veil.documents.connect(url, key_file, schema) as reader:  # knows no length
            for match in ({"_id": {"$lt": 300}}, {"_id": {"$gte": 100, "$lt": 500}}, {}):
                pipeline = [{"$match": match}, *SUM_BY_G]
                for collection in (database.c, reader.c):
                    calls = count_aggregations(collection)
                    assert grouped(collection, pipeline) == expected(plain.c, pipeline), match
                    assert calls["find"] == 0, match


def test_a_filter_leaving_holes_everywhere_is_fetched(loaded):
    """Every third document: no group's positions form a run, so the one aggregation is
    followed by the fetched path."""
    veil_c, plain_c = loaded
    for f in range(3):
        match = {"_id": {"$in": [d["_id"] for d in rows(300) if d["_id"] % 3 == f]}}
        pipeline = [{"$match": match}, *SUM_BY_G]
        calls = count_aggregations(veil_c)
        assert grouped(veil_c, pipeline) == expected(plain_c, pipeline)
        assert calls == {"aggregate": 1, "find": 1}
