"""Blind ``$inc`` of chained ``h_add`` fields that reveal increments: one server command,
no hole, sums still from one aggregation, and the read-modify-write whenever the drift
bound cannot be proved (the oracle is plain pymongo)."""

from __future__ import annotations

import random

import pytest
from test_documents_chains import count_aggregations, expected, grouped, rows

import veil.documents
from veil.documents import drift
from veil.documents.chainlayout import ChainLayout
from veil.documents.errors import SchemaError

DOMAIN = [-1000, 1000]
SCHEMA = {
    "fields": {
        "g": "index",
        "tag": "do_nothing",
        "v": {"attr": "h_add", "chain": "g", "domain": DOMAIN, "reveal_increments": True},
        "w": {"attr": "h_add", "chain": "tag", "domain": [0, 10]},
    }
}
SUM_BY_G = [{"$group": {"_id": "$g", "s": {"$sum": "$v"}}}]
AVG_BY_G = [{"$group": {"_id": "$g", "a": {"$avg": "$v"}, "n": {"$sum": 1}}}]


@pytest.fixture
def loaded(url, key_file, plain):
    with veil.documents.connect(url, key_file, {"c": SCHEMA}) as database:
        documents = rows(300)
        for at in range(0, len(documents), 100):
            database.c.insert_many([dict(d) for d in documents[at : at + 100]])
        plain.c.insert_many(documents)
        yield database.c, plain.c


def rewrites(collection):
    """Counts the read-modify-write updates the next operations take."""
    calls = {"rmw": 0}
    original = collection.updates.read_modify_write

    def counted(*args, **kwargs):
        calls["rmw"] += 1
        return original(*args, **kwargs)

    collection.updates.read_modify_write = counted
    return calls


def same_documents(veil_c, plain_c):
    return sorted(veil_c.find(), key=lambda d: d["_id"]) == sorted(
        plain_c.find(), key=lambda d: d["_id"]
    )


def test_many_blind_incs_keep_sums_on_the_server_and_values_exact(loaded):
    """Positive and negative increments, many on the same documents, driving values far
    outside the declared domain: every one blind, sums still one aggregation."""
    veil_c, plain_c = loaded
    targets = [d["_id"] for d in plain_c.find() if isinstance(d.get("v"), int)]
    rng = random.Random(7)
    calls = rewrites(veil_c)
    for _ in range(150):
        id_, delta = rng.choice(targets[:20]), rng.randint(-2500, 2500)
        for c in (veil_c, plain_c):
            assert c.update_one({"_id": id_}, {"$inc": {"v": delta}}).modified_count == 1
    assert calls["rmw"] == 0
    assert any(abs(d["v"]) > DOMAIN[1] for d in plain_c.find() if isinstance(d.get("v"), int))
    aggregations = count_aggregations(veil_c)
    for pipeline in (SUM_BY_G, AVG_BY_G):
        assert grouped(veil_c, pipeline) == expected(plain_c, pipeline)
    assert aggregations == {"aggregate": 3, "find": 0}  # $avg: a $sum and a count
    assert same_documents(veil_c, plain_c)
    # a filtered sum is fetched: each value opened in its drift window
    fetched = [{"$match": {"tag": "a"}}, *SUM_BY_G]
    assert grouped(veil_c, fetched) == expected(plain_c, fetched)


def test_an_inc_the_bound_cannot_cover_reads_and_rewrites(loaded, monkeypatch):
    veil_c, plain_c = loaded
    monkeypatch.setattr(veil_c.codec.ciphers["v"].chained, "drift_budget", 10)
    id_ = next(d["_id"] for d in plain_c.find({"g": 3}))
    calls = rewrites(veil_c)
    for delta in (4, -4, 3, -20):  # 4 + 4 within the budget of 10, then 15 and 35 past it
        for c in (veil_c, plain_c):
            c.update_one({"_id": id_}, {"$inc": {"v": delta}})
    assert calls["rmw"] == 2
    assert grouped(veil_c, SUM_BY_G) == expected(plain_c, SUM_BY_G)
    assert same_documents(veil_c, plain_c)


@pytest.mark.parametrize(
    "change",
    [
        lambda c, _: c.update_many({"g": 3}, {"$inc": {"v": 2}}),  # many: read-modify-write
        lambda c, _: c.update_one({"g": 3}, {"$inc": {"v": 5, "w": 0}}),  # w: no reveal
        lambda c, missing: c.update_one({"_id": missing}, {"$inc": {"v": 5}}),  # no value
        lambda c, _: c.update_one({"_id": 12345}, {"$inc": {"v": 5}}),  # no document
    ],
)
def test_other_increments_take_the_read_modify_write(loaded, change):
    veil_c, plain_c = loaded
    missing = next(d["_id"] for d in plain_c.find() if "v" not in d)
    calls = rewrites(veil_c)
    for c in (veil_c, plain_c):
        change(c, missing)
    assert calls["rmw"] == 1
    assert grouped(veil_c, SUM_BY_G) == expected(plain_c, SUM_BY_G)
    assert same_documents(veil_c, plain_c)


def test_the_server_sees_the_increment_and_nothing_else_changes(loaded):
    """What the option gives away: the word moves by delta << k, its chain and position
    stay (no new claim in the group's chain, no hole)."""
    veil_c, plain_c = loaded
    cipher = veil_c.codec.ciphers["v"]
    names = {cipher.name: 1, cipher.name + "c": 1, cipher.name + "p": 1}
    id_ = next(d["_id"] for d in plain_c.find({"g": 1}) if isinstance(d.get("v"), int))
    (before,) = veil_c.reads.find_projected({"_id": id_}, names)
    veil_c.update_one({"_id": id_}, {"$inc": {"v": -3}})
    (after,) = veil_c.reads.find_projected({"_id": id_}, names)
    k = cipher.chained.layout.count_bits
    assert after[cipher.name] - before[cipher.name] == -3 << k
    assert after[cipher.name + "p"] == before[cipher.name + "p"]


def test_reveal_increments_only_on_chained_fields(url, key_file):
    schema = {"c": {"fields": {"v": {"attr": "h_add", "reveal_increments": True}}}}
    with (
        pytest.raises(SchemaError, match="reveal_increments"),
        veil.documents.connect(url, key_file, schema) as db,
    ):
        db.c.find_one()


@pytest.mark.parametrize("domain", [(-1000, 1000), (0, 10), (-100_000, 100_000), (0, 2**32)])
def test_sums_are_exact_exactly_while_the_bound_holds(domain):
    """Words at the extremes the bound allows open to the true sum; one unit of drift
    more and the bound refuses (a window wider than 2**M would wrap)."""
    layout = ChainLayout.for_domain("v", *domain)
    top = (1 << layout.sum_bits) - 1
    rng = random.Random(1)
    for length in (1, 2, 17, layout.capacity):
        spare = top - length * (layout.hi - layout.lo)
        most = min(spare // 2, drift.budget(layout))
        assert drift.sum_is_exact(layout, length, most)
        if most < drift.budget(layout):
            assert not drift.sum_is_exact(layout, length, most + 1)
        for sign in (1, -1):  # every value at one end, all the drift on one word
            values = [layout.hi if sign > 0 else layout.lo] * min(length, 50)
            n = len(values)
            pads = [rng.randrange(1 << layout.sum_bits) for _ in values]
            words = [layout.word(v, p) for v, p in zip(values, pads, strict=True)]
            words[0] += drift.increment(layout, sign * most)
            total = sum(words)
            assert abs(total) < 2**63
            opened = layout.open(total, sum(pads), n, most)
            assert opened == sum(values) + sign * most
