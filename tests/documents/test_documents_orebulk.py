"""Bulk loads of ``ore`` trees (:mod:`veil.documents.orebulk`): a batch larger than a node,
meeting a root that is one leaf, is built bottom up. The built tree keeps the B-link
invariants, answers every range as a tree built value by value does, merges the keys
its root leaf already held, gives way to a writer that claimed the root first, and
takes concurrent writer processes afterwards without losing anything."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from documents_processes import run_writers
from test_documents_ore import ORE_INT, SMALL_NODES, write_documents

import veil.documents
from veil.crypto.keys import MasterKey
from veil.documents import ore as ore_module
from veil.documents import oretree
from veil.documents.ore import OreKeys, rank
from veil.documents.orebulk import Built, merge, merge_positions

SCHEMA = {"c": {"fields": {"x": ORE_INT}}}


@pytest.fixture
def small_nodes(monkeypatch):
    monkeypatch.setattr(oretree, "CAPACITY", SMALL_NODES)


@pytest.mark.parametrize("count", [9, 10, 50, 97, 500, 4000])
@pytest.mark.parametrize("capacity,fill", [(8, 6), (8, 8), (4, 2), (128, 96)])
def test_built_levels_keep_the_tree_invariants(count, capacity, fill):
    keys = [i.to_bytes(4, "big") for i in range(count)]
    built = Built(keys, [f"t{i}" for i in range(count)], capacity, fill)
    nodes = {p.id: p for level in built.levels for p in level}
    assert len(built.root_keys) <= capacity
    assert built.root_level == len(built.levels)
    if not built.levels:  # it fits the root leaf
        assert (built.root_keys, built.root_items) == (keys, [f"t{i}" for i in range(count)])
        return
    top = [nodes[i] for i in built.root_items]
    assert built.root_keys == [p.low for p in top[1:]]  # separators: smallest keys right
    for depth, level in enumerate(built.levels):
        assert [p.level for p in level] == [built.root_level - 1 - depth] * len(level)
        for piece, following in zip(level, [*level[1:], None], strict=True):
            assert len(piece.keys) <= capacity and piece.items
            assert piece.next == (following.id if following else None)
            assert piece.fence == (following.low if following else None)
            if piece.level:
                children = [nodes[i] for i in piece.items]
                assert piece.keys == [c.low for c in children[1:]]
                assert piece.low == children[0].low
        below = [i for p in level for i in p.items] if level[0].level else None
        if below is not None:  # the parents list the whole next level, in order
            assert below == [p.id for p in built.levels[depth + 1]]
    leaves = built.levels[-1] if built.levels else []
    assert [k for p in leaves for k in p.keys] == keys
    assert all(p.low == p.keys[0] for p in leaves)


def test_a_batch_within_one_node_stays_in_the_root_leaf():
    built = Built([b"a", b"b"], ["1", "2"], 8, 6)
    assert (built.root_level, built.root_keys, built.levels) == (0, [b"a", b"b"], [])


def test_merge_puts_new_entries_after_equal_old_keys():
    ore = OreKeys(MasterKey(os.urandom(32)), "db/c", "x", signed=True)
    old, new = [5, 10, 10, 20], [1, 10, 10, 15, 30]
    asked: list[int] = []

    def left_of(position: int) -> bytes:
        asked.append(position)
        return ore.left([new[position]])[0]

    positions = merge_positions(ore.right(old), len(new), left_of)
    assert positions == [1, 1, 1, 4]
    _, items = merge(ore.right(old), [f"o{v}" for v in old], positions, ore.right(new),
                     [f"n{v}" for v in new])  # fmt: skip
    assert items == ["n1", "o5", "o10", "o10", "n10", "n10", "n15", "o20", "n30"]
    assert len(asked) <= len(old) * 3  # a binary search per old key, not every entry


def test_ore_encryption_in_chunks_still_compares(monkeypatch):
    ore = OreKeys(MasterKey(os.urandom(32)), "db/c", "x", signed=True)
    keys = list(range(-5, 6))
    monkeypatch.setattr(ore_module, "CHUNK", 3)  # four native calls each
    lefts, rights = ore.left(keys), ore.right(keys)
    assert len(lefts) == len(rights) == len(keys)
    assert [rank(left, rights, inclusive=False) for left in lefts] == list(range(len(keys)))
    assert [rank(left, rights, inclusive=True) for left in lefts] == list(range(1, 12))


def _tree(collection: Any) -> oretree.OreTree:
    return collection.codec.ciphers["x"].ore.tree


def _reachable(tree: oretree.OreTree) -> list[oretree.Node]:
    """Every node reachable from the root, level by level."""
    level = tree._fetch([oretree.ROOT])
    out = list(level)
    while not level[0].leaf:
        level = tree._fetch([child for node in level for child in node.items])
        out += level
    return out


def _same_answers(bulk: Any, other: Any, values: list[int]) -> None:
    rng = random.Random(5)
    bounds = [(rng.randrange(-600, 600), rng.randrange(0, 300)) for _ in range(25)]
    for low, width in [*bounds, (-(10**6), 2 * 10**6), (values[0], 1)]:
        for query in (
            {"x": {"$gte": low, "$lt": low + width}},
            {"x": {"$gt": low, "$lte": low + width}},
            {"x": low},
        ):
            want = sorted(d["x"] for d in other.find(query))
            assert sorted(d["x"] for d in bulk.find(query)) == want, query
            assert want == sorted(v for v in values if _matches(v, query["x"]))


def _matches(value: int, condition: Any) -> bool:
    if not isinstance(condition, dict):
        return value == condition
    tests = {"$gte": value.__ge__, "$gt": value.__gt__, "$lt": value.__lt__,
             "$lte": value.__le__}  # fmt: skip
    return all(tests[op](bound) for op, bound in condition.items())


def test_a_bulk_built_tree_answers_as_one_built_value_by_value(url, key_file, small_nodes):
    values = [random.Random(1).randrange(-500, 500) for _ in range(400)]  # with repeats
    schema = {"bulk": SCHEMA["c"], "single": SCHEMA["c"]}
    with veil.documents.connect(url, key_file, schema) as database:
        database.bulk.insert_many([{"x": v} for v in values])
        for start in range(0, len(values), 5):  # walked entry by entry, splitting as it goes
            database.single.insert_many([{"x": v} for v in values[start : start + 5]])
        tree = _tree(database.bulk)
        assert [c["_id"] for c in tree._claims.find()] == ["root@1"]  # one write: the root
        nodes = _reachable(tree)
        assert tree._nodes.count_documents({}) == len(nodes)
        assert nodes[0].level == 3  # 400 keys in leaves of 6 under inner nodes of 7
        assert all(len(n.keys) <= SMALL_NODES for n in nodes)
        assert len(tree.range(None, None)) == len(values)
        _same_answers(database.bulk, database.single, values)


def test_a_bulk_load_merges_what_the_root_leaf_held(url, key_file, small_nodes, monkeypatch):
    with veil.documents.connect(url, key_file, SCHEMA) as database:
        first = [3, -7, 100, 3]
        database.c.insert_many([{"x": v} for v in first])
        made = []
        left = OreKeys.left
        monkeypatch.setattr(
            OreKeys, "left", lambda self, keys: made.append(len(keys)) or left(self, keys)
        )
        batch = [random.Random(2).randrange(-120, 120) for _ in range(200)] + [3, 3, -7]
        database.c.insert_many([{"x": v} for v in batch])
        assert sum(made) <= len(first) * 9  # the merge's binary searches only
        tree = _tree(database.c)
        assert [c["_id"] for c in tree._claims.find()] == ["root@1", "root@2"]
        values = first + batch
        assert len(tree.range(None, None)) == len(values)
        for low, high in ((-120, 120), (3, 4), (-7, 3), (99, 101), (-200, -119)):
            got = sorted(d["x"] for d in database.c.find({"x": {"$gte": low, "$lt": high}}))
            assert got == sorted(v for v in values if low <= v < high)


def test_a_bulk_load_that_loses_the_root_gives_way(url, key_file, small_nodes):
    """Another writer claims the root between the bulk load's node inserts and its root
    write: the built nodes are dropped and the batch walks in entry by entry."""
    with (
        veil.documents.connect(url, key_file, SCHEMA) as loser,
        veil.documents.connect(url, key_file, SCHEMA) as winner,
    ):
        tree = _tree(loser.c)
        insert_nodes = tree._insert_nodes
        raced = []

        def racing_insert(nodes):
            insert_nodes(nodes)
            if not raced:  # the bulk load's nodes are in; its root is not switched yet
                raced.append(True)
                winner.c.insert_one({"x": 1000})

        tree._insert_nodes = racing_insert
        values = list(range(-60, 60, 2))
        loser.c.insert_many([{"x": v} for v in values])
        assert raced
        nodes = _reachable(tree)
        assert tree._nodes.count_documents({}) == len(nodes)  # the built ones were dropped
        assert len(tree.range(None, None)) == len(values) + 1
        got = sorted(d["x"] for d in loser.c.find({"x": {"$gte": -10}}))
        assert got == [v for v in values if v >= -10] + [1000]


def test_concurrent_writers_after_a_bulk_load_lose_nothing(url, key_file, small_nodes, tmp_path):
    loaded = list(range(-300, 300, 3))
    with veil.documents.connect(url, key_file, SCHEMA) as database:
        database.c.insert_many([{"_id": f"bulk-{v}", "x": v} for v in loaded])
        assert _tree(database.c)._fetch([oretree.ROOT])[0].level >= 2
    workers, count = 4, 60
    run_writers(write_documents, url, key_file, workers, count, tmp_path)
    with veil.documents.connect(url, key_file, SCHEMA) as database:
        documents = database.c.find().to_list()
        assert len(documents) == len(loaded) + workers * count
        assert len(_tree(database.c).range(None, None)) == len(documents)
        for low, high in ((-300, 300), (-100, 100), (-50, 0), (0, 1), (17, 60)):
            query = {"x": {"$gte": low, "$lt": high}}
            want = sorted(d["_id"] for d in documents if low <= d["x"] < high)
            assert sorted(d["_id"] for d in database.c.find(query)) == want
