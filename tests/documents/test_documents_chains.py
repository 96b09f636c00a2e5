"""Chained ``h_add`` fields: grouped sums from one server aggregation, checked complete,
and the fetched path whenever a chain has a hole (the oracle is plain pymongo)."""

from __future__ import annotations

import random
import traceback
from pathlib import Path

import pytest
from documents_processes import run_writers

import veil.documents
from veil.documents.chainlayout import ChainLayout
from veil.documents.errors import FieldTypeError, SchemaError

DOMAIN = [-1000, 1000]
SCHEMA = {
    "fields": {
        "g": "index",
        "tag": "do_nothing",
        "v": {"attr": "h_add", "chain": "g", "domain": DOMAIN},
        "w": {"attr": "h_add", "chain": "tag", "domain": [0, 10]},
    }
}
SUM_BY_G = [{"$group": {"_id": "$g", "s": {"$sum": "$v"}}}]


def rows(count: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        document = {"_id": i, "g": rng.choice([1, 2, 3, None]), "tag": rng.choice("ab")}
        if rng.random() < 0.9:  # some values missing, some null
            document["v"] = rng.choice([rng.randint(*DOMAIN), None, DOMAIN[0], DOMAIN[1]])
        if document["g"] == 3:  # an int with room for an $inc by 1
            document["v"] = rng.randint(DOMAIN[0], DOMAIN[1] - 1)
        document["w"] = rng.randint(0, 10)
        if document["g"] is None and rng.random() < 0.5:
            del document["g"]
        out.append(document)
    return out


@pytest.fixture(params=["auto", "server"])
def loaded(url, key_file, plain, request):
    """300 documents in Veil and plain; Veil under both sums strategies (a chained field's
    fallback is the fetched path whatever ``sums`` says)."""
    with veil.documents.connect(url, key_file, {"c": SCHEMA}, sums=request.param) as database:
        documents = rows(300)
        for at in range(0, len(documents), 50):
            database.c.insert_many([dict(d) for d in documents[at : at + 50]])
        plain.c.insert_many(documents)
        yield database.c, plain.c


def grouped(collection, pipeline):
    """Veil's answer, sorted: (key, outputs in name order) per group."""
    answer = collection.aggregate(pipeline)
    return sorted(
        ((row["_id"], *[row[k] for k in sorted(row) if k != "_id"]) for row in answer), key=repr
    )


def expected(plain_collection, pipeline):
    """The same from plain documents, grouped here (FerretDB has no $avg, one accumulator)."""
    *match, group = pipeline
    spec = group["$group"]
    documents = plain_collection.find(match[0]["$match"] if match else {})
    groups: dict = {}
    for document in documents:
        key = document.get(spec["_id"][1:]) if spec["_id"] else None
        groups.setdefault(key, []).append(document)
    out = []
    for key, members in groups.items():
        row = [key]
        for name in sorted(k for k in spec if k != "_id"):
            ((op, argument),) = spec[name].items()
            values = [1] * len(members) if argument == 1 else [
                m[argument[1:]] for m in members if isinstance(m.get(argument[1:]), int)
            ]  # fmt: skip
            row.append(
                sum(values) if op == "$sum" else (sum(values) / len(values) if values else None)
            )
        out.append(tuple(row))
    return sorted(out, key=repr)


def count_aggregations(collection):
    """How many server aggregations and finds the next query sends (wraps its reads)."""
    calls = {"aggregate": 0, "find": 0}
    reads = collection.reads
    aggregate, find, raw = reads.aggregate, reads.find_projected, reads.find_raw

    def counted_aggregate(pipeline):
        calls["aggregate"] += 1
        return aggregate(pipeline)

    def counted_find(query, projection):
        calls["find"] += 1
        return find(query, projection)

    def counted_raw(query, projection):
        calls["find"] += 1
        return raw(query, projection)

    reads.aggregate, reads.find_projected, reads.find_raw = (
        counted_aggregate,
        counted_find,
        counted_raw,
    )
    return calls


def test_chain_sums_equal_plaintext_sums_in_one_aggregation(loaded):
    veil_c, plain_c = loaded
    calls = count_aggregations(veil_c)
    assert grouped(veil_c, SUM_BY_G) == expected(plain_c, SUM_BY_G)
    assert calls == {"aggregate": 1, "find": 0}  # no ids, no fallback
    for pipeline in (
        [{"$group": {"_id": "$g", "a": {"$avg": "$v"}, "n": {"$sum": 1}}}],
        [{"$group": {"_id": "$tag", "s": {"$sum": "$w"}}}],
    ):
        assert grouped(veil_c, pipeline) == expected(plain_c, pipeline)
    assert calls["find"] == 0


def test_a_filter_or_another_key_falls_back_to_the_fetched_path(loaded):
    veil_c, plain_c = loaded
    for pipeline in (
        [{"$match": {"tag": "a"}}, *SUM_BY_G],
        [{"$group": {"_id": "$tag", "s": {"$sum": "$v"}}}],
        [{"$group": {"_id": None, "s": {"$sum": "$v"}}}],
    ):
        calls = count_aggregations(veil_c)
        assert grouped(veil_c, pipeline) == expected(plain_c, pipeline)
        assert calls["find"] == 1


def test_a_filter_on_the_chain_key_alone_still_sums_on_the_server(loaded):
    """Such a filter keeps or drops each group whole: no hole, one aggregation."""
    veil_c, plain_c = loaded
    for match in (
        {"g": 2},
        {"g": {"$in": [1, 3]}},
        {"g": {"$gte": 2}},
        {"$or": [{"g": 1}, {"g": None}]},
        {"$and": [{"g": {"$ne": 3}}, {"g": {"$lte": 2}}]},
    ):
        pipeline = [{"$match": match}, *SUM_BY_G]
        calls = count_aggregations(veil_c)
        assert grouped(veil_c, pipeline) == expected(plain_c, pipeline), match
        assert calls == {"aggregate": 1, "find": 0}, match
    # a filter splitting the null group (missing against null g) is caught by the count
    for match in ({"g": {"$exists": False}}, {"g": {"$exists": True}}):
        pipeline = [{"$match": match}, *SUM_BY_G]
        calls = count_aggregations(veil_c)
        assert grouped(veil_c, pipeline) == expected(plain_c, pipeline), match
        assert calls == {"aggregate": 1, "find": 1}, match


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c.delete_one({"g": 2}),
        lambda c: c.delete_many({"tag": "a"}),
        lambda c: c.update_one({"g": 1}, {"$set": {"v": 7}}),
        lambda c: c.update_many({"g": 3}, {"$inc": {"v": 1}}),
        lambda c: c.update_one({"g": 1}, {"$set": {"g": 2}}),
        lambda c: c.update_one({"g": 2}, {"$unset": {"g": ""}}),
        lambda c: c.update_one({"g": 3}, {"$inc": {"g": -2}}),
        lambda c: c.update_one({"g": 3}, {"$unset": {"v": ""}}),
        lambda c: c.replace_one({"g": 2}, {"g": 1, "tag": "b", "v": 5, "w": 1}),
    ],
)
def test_deletes_and_updates_give_right_sums(loaded, change):
    veil_c, plain_c = loaded
    change(veil_c)
    change(plain_c)
    for pipeline in (SUM_BY_G, [{"$group": {"_id": "$g", "a": {"$avg": "$v"}}}]):
        assert grouped(veil_c, pipeline) == expected(plain_c, pipeline)
    assert sorted(veil_c.find(), key=lambda d: d["_id"]) == sorted(
        plain_c.find(), key=lambda d: d["_id"]
    )


def test_untouched_groups_still_sum_on_the_server(loaded):
    veil_c, plain_c = loaded
    for c in (veil_c, plain_c):
        c.delete_one({"g": 2})
    calls = count_aggregations(veil_c)
    assert grouped(veil_c, SUM_BY_G) == expected(plain_c, SUM_BY_G)
    assert calls == {"aggregate": 1, "find": 1}  # the hole is found, the query fetched


def test_a_failed_insert_leaves_a_hole_that_is_noticed(loaded):
    veil_c, plain_c = loaded
    with pytest.raises(veil.documents.DocumentsError):
        veil_c.insert_many([{"_id": 1000, "g": 1, "v": 5}, {"_id": 0, "g": 1, "v": 6}])
    plain_c.insert_one({"_id": 1000, "g": 1, "v": 5})  # ordered: the first was written
    assert grouped(veil_c, SUM_BY_G) == expected(plain_c, SUM_BY_G)


def test_values_outside_the_domain_are_refused_naming_the_field(url, key_file):
    with veil.documents.connect(url, key_file, {"c": SCHEMA}) as database:
        database.c.insert_one({"_id": 1, "g": 1, "v": 1000})
        for bad in (1001, -1001, 2**70):
            with pytest.raises(
                FieldTypeError, match=r"field 'v': .* outside the domain \[-1000, 1000\]"
            ):
                database.c.insert_many([{"g": 1, "v": 0}, {"g": 2, "v": bad}])
        with pytest.raises(FieldTypeError, match="field 'v'"):
            database.c.update_one({"_id": 1}, {"$inc": {"v": 1}})
        with pytest.raises(FieldTypeError, match="field 'v'"):
            database.c.update_one({"_id": 1}, {"$set": {"v": 5000}})
        assert database.c.count_documents({}) == 1
        assert database.c.find_one({"_id": 1})["v"] == 1000
        # nothing half-written: the refused batches claimed no position
        assert grouped(database.c, SUM_BY_G) == [(1, 1000)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attr": "h_add", "chain": "g"}, "needs a 'domain'"),
        ({"attr": "h_add", "chain": "nope", "domain": [0, 1]}, "chain field 'nope'"),
        ({"attr": "h_add", "chain": "s", "domain": [0, 1]}, "chain field 's'"),
        ({"attr": "h_add", "scheme": "paillier", "chain": "g", "domain": [0, 1]}, "under 'ashe'"),
        ({"attr": "index", "domain": [0, 1]}, "under 'ashe'"),
        ({"attr": "h_add", "domain": [2, 1]}, "low <= high"),
        ({"attr": "h_add", "chain": "g", "domain": [-(2**62), 2**62]}, "too wide"),
    ],
)
def test_bad_chain_schemas_are_refused(url, key_file, options, message):
    schema = {"c": {"fields": {"g": "index", "s": "static", "v": options}}}
    with (
        pytest.raises(SchemaError, match=message),
        veil.documents.connect(url, key_file, schema) as db,
    ):
        db.c.find_one()


def test_layouts_keep_the_words_sum_below_2_63():
    for lo, hi in ((0, 1), (-1000, 1000), (-50_000, 49_999), (0, 2**32), (0, 2**45)):
        layout = ChainLayout.for_domain("v", lo, hi)
        top = layout.word(hi, (1 << layout.sum_bits) - 1 - (hi - lo))
        assert layout.capacity * top < 2**63
        assert layout.capacity * (hi - lo) < 2**layout.sum_bits


def _tiny_chains(collection, monkeypatch):
    """Chains of ``v`` summing 3 values each (2 count bits), so sub-chains show at once."""
    tiny = ChainLayout.for_domain("v", *DOMAIN)
    cipher = collection.codec.ciphers["v"]
    monkeypatch.setattr(cipher.chained, "layout", ChainLayout(tiny.lo, tiny.hi, 2, tiny.sum_bits))
    return cipher


def _long_chains(count: int = 40) -> list[dict]:
    """Chains of 10+ values in groups 0, 1 and null (missing and null ``g`` apart)."""
    documents = [{"_id": i, "g": i % 3 or None, "v": i * 7 % 50 - 20} for i in range(count)]
    for d in documents[::6]:
        del d["g"]
    return documents


def test_chains_longer_than_their_capacity_sum_in_sub_chains(url, key_file, plain, monkeypatch):
    with veil.documents.connect(url, key_file, {"c": SCHEMA}) as database:
        cipher = _tiny_chains(database.c, monkeypatch)
        documents = _long_chains()
        for at in range(0, len(documents), 7):
            database.c.insert_many([dict(d) for d in documents[at : at + 7]])
        plain.c.insert_many(documents)
        stored = database.c.reads.find_projected({}, {cipher.name + "p": 1, cipher.name + "s": 1})
        assert {(d[cipher.name + "p"] - 1) // 3 for d in stored} == {
            d.get(cipher.name + "s", 0) for d in stored
        }
        calls = count_aggregations(database.c)
        assert grouped(database.c, SUM_BY_G) == expected(plain.c, SUM_BY_G)
        assert calls == {"aggregate": 1, "find": 0}  # its writer knows the chains are long
        avg = [{"$group": {"_id": "$g", "a": {"$avg": "$v"}, "n": {"$sum": 1}}}]
        assert grouped(database.c, avg) == expected(plain.c, avg)
    with veil.documents.connect(url, key_file, {"c": SCHEMA}) as database:
        _tiny_chains(database.c, monkeypatch)
        calls = count_aggregations(database.c)
        assert grouped(database.c, SUM_BY_G) == expected(plain.c, SUM_BY_G)
        assert calls == {"aggregate": 2, "find": 0}  # a new client learns it from the lengths
        for c in (database.c, plain.c):  # a hole in one sub-chain: that query is fetched
            c.delete_one({"_id": 13})
        calls = count_aggregations(database.c)
        assert grouped(database.c, SUM_BY_G) == expected(plain.c, SUM_BY_G)
        assert calls == {"aggregate": 1, "find": 1}


def test_chains_begun_before_sub_chains_are_fetched_past_their_capacity(
    url, key_file, plain, monkeypatch
):
    """Their words past the capacity carry no sub-chain: their sums must not be trusted."""
    with veil.documents.connect(url, key_file, {"c": SCHEMA}) as database:
        cipher = _tiny_chains(database.c, monkeypatch)
        claims = database.c.positions.of(cipher)
        claims.epoch()
        claims.collection.update_one({"_id": "epoch"}, {"$unset": {"v": ""}})
    with veil.documents.connect(url, key_file, {"c": SCHEMA}) as database:
        cipher = _tiny_chains(database.c, monkeypatch)
        documents = _long_chains()
        database.c.insert_many([dict(d) for d in documents])
        plain.c.insert_many(documents)
        stored = database.c.reads.find_projected({}, {cipher.name + "s": 1, "_id": 0})
        assert not any(stored)  # no sub-chain stored
        calls = count_aggregations(database.c)
        assert grouped(database.c, SUM_BY_G) == expected(plain.c, SUM_BY_G)
        assert calls == {"aggregate": 1, "find": 1}


def _write(url: str, key_file: str, worker: int, count: int, report: str) -> None:
    try:
        with veil.documents.connect(url, key_file, {"c": SCHEMA}) as database:
            rng = random.Random(worker)
            for start in range(0, count, 4):
                database.c.insert_many(
                    [{"_id": f"{worker}-{start + i}", "g": rng.choice([1, 2]), "v": rng.randint(-9, 9)}
                     for i in range(4)]
                )  # fmt: skip
                database.c.insert_one({"_id": f"{worker}-{start}x", "g": 1, "v": 1})
    except BaseException:
        Path(report).write_text(traceback.format_exc())
        raise


def test_concurrent_writer_processes_lose_nothing_and_never_reuse_a_position(
    url, key_file, tmp_path
):
    workers, count = 4, 40
    run_writers(_write, url, key_file, workers, count, tmp_path)
    with veil.documents.connect(url, key_file, {"c": SCHEMA}) as database:
        documents = database.c.find().to_list()
        assert len(documents) == workers * (count + count // 4)
        cipher = database.c.codec.ciphers["v"]
        stored = database.c.reads.find_projected({}, {cipher.name + "c": 1, cipher.name + "p": 1})
        positions = [(d[cipher.name + "c"], d[cipher.name + "p"]) for d in stored]
        assert len(set(positions)) == len(positions)  # one-time pads: no position twice
        for chain in {c for c, _ in positions}:
            mine = sorted(p for c, p in positions if c == chain)
            assert mine == list(range(1, len(mine) + 1))  # no holes: every claim written
        calls = count_aggregations(database.c)
        want = {}
        for d in documents:
            want[d["g"]] = want.get(d["g"], 0) + d["v"]
        assert dict(grouped(database.c, SUM_BY_G)) == want
        assert calls == {"aggregate": 1, "find": 0}


def test_a_dropped_collection_starts_new_chains(url, key_file):
    with veil.documents.connect(url, key_file, {"c": SCHEMA}) as database:
        database.c.insert_many([{"g": 1, "v": 5}, {"g": 1, "v": 6}])
        cipher = database.c.codec.ciphers["v"]
        before = database.c.reads.find_projected({}, {cipher.name + "c": 1, "_id": 0})
        database.c.drop()
        database.c.insert_many([{"g": 1, "v": 7}])
        after = database.c.reads.find_projected({}, {cipher.name + "c": 1, cipher.name + "p": 1})
        assert after[0][cipher.name + "c"] != before[0][cipher.name + "c"]  # a new epoch
        assert after[0][cipher.name + "p"] == 1
        assert grouped(database.c, SUM_BY_G) == [(1, 7)]


def test_another_client_reads_lengths_written_by_others(url, key_file):
    with (
        veil.documents.connect(url, key_file, {"c": SCHEMA}) as writer,
        veil.documents.connect(url, key_file, {"c": SCHEMA}) as reader,
    ):
        writer.c.insert_one({"g": 1, "v": 1})
        assert grouped(reader.c, SUM_BY_G) == [(1, 1)]
        for value in range(2, 8):  # more claims than the reader's two steps from its cache
            writer.c.insert_one({"g": 1, "v": value})
        calls = count_aggregations(reader.c)
        assert grouped(reader.c, SUM_BY_G) == [(1, sum(range(1, 8)))]
        assert calls == {"aggregate": 1, "find": 0}
