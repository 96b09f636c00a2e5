"""Encrypted documents written by several clients at once (issue 38).

Each test runs on both MongoDB-wire servers the suite starts: FerretDB 1.24,
whose single-document updates are not atomic (Veil claims each version it
supersedes), and mongo-java-server, whose are (Veil's conditional update is a
compare-and-set there). Each checks its invariants on what the calls reported
and on the documents afterwards, and reports anomalies by kind.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import veil.documents
from tests.documents.conftest import database_name, ferretdb, mongo_java  # noqa: F401
from veil.documents import oretree, versions
from veil.documents.client import Database
from veil.documents.versions import claim_key

THREADS = 4
#: Every attribute that takes ``$inc``, by its field name.
SCHEMA = {
    "fields": {
        "g": "do_nothing",
        "plain": "do_nothing",
        "det": {"attr": "static", "type": "int"},
        "ope": "index",
        "ore": {"attr": "index", "scheme": "ore"},
        "ashe": "h_add",
        "paillier": {"attr": "h_add", "scheme": "paillier"},
        "chained": {"attr": "h_add", "chain": "g", "domain": [-1000, 100_000]},
        "revealed": {
            "attr": "h_add", "chain": "g", "domain": [-1000, 100_000], "reveal_increments": True,
        },
        "mul": "h_mul",
    },
}  # fmt: skip
COUNTERS = [f for f in SCHEMA["fields"] if f not in ("g", "mul")]


@pytest.fixture(params=["ferretdb", "mongo_java"])
def server_url(request: pytest.FixtureRequest, database_name: str) -> str:  # noqa: F811
    """A fresh database on each of the session's document servers."""
    return f"{request.getfixturevalue(request.param).url}{database_name}"


def _connect(url: str, key_file: Path | str) -> Database:
    return veil.documents.connect(url, key_file, {"c": SCHEMA})


def _zeroes(id_: int) -> dict[str, Any]:
    return {"_id": id_, "g": 0, **dict.fromkeys(COUNTERS, 0), "mul": 1}


def _race(clients: list[Database], work: Callable[[Database, int], None]) -> Counter[str]:
    """Run ``work(database, client)`` on a thread per client; the errors by kind."""
    errors: Counter[str] = Counter()
    start = threading.Barrier(len(clients))

    def run(client: int) -> None:
        start.wait()
        try:
            work(clients[client], client)
        except Exception as exc:  # an anomaly, reported by kind
            errors[f"{type(exc).__name__}: {exc}"[:200]] += 1

    threads = [threading.Thread(target=run, args=(c,)) for c in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


@pytest.fixture
def clients(server_url: str, key_file: Path) -> Iterator[list[Database]]:
    opened = [_connect(server_url, key_file) for _ in range(THREADS)]
    try:
        yield opened
    finally:
        for database in opened:
            database.close()


def _lost(documents: list[dict[str, Any]], expected: dict[str, int]) -> dict[str, Any]:
    """Fields whose counters differ from ``expected``: {field: (found, expected)}."""
    return {
        f"{d['_id']}.{f}": (d.get(f), n)
        for d in documents
        for f, n in expected.items()
        if d.get(f) != n
    }


def test_lost_update_counter_on_every_attribute(clients: list[Database]) -> None:
    """``$inc`` of one document from four clients, field by field, then of every field
    at once: every increment is kept, on every attribute kind."""
    rounds = 3
    clients[0].c.insert_one(_zeroes(1))

    def work(database: Database, _: int) -> None:
        for _ in range(rounds):
            for field in COUNTERS:
                database.c.update_one({"_id": 1}, {"$inc": {field: 1}})
            database.c.update_one({"_id": 1}, {"$inc": dict.fromkeys(COUNTERS, 1)})

    errors = _race(clients, work)
    found = clients[0].c.find_one({"_id": 1})
    lost = _lost([found], dict.fromkeys(COUNTERS, 2 * rounds * THREADS))
    assert (dict(errors), lost) == ({}, {})


def test_update_many_and_filters_lose_nothing(clients: list[Database]) -> None:
    """``update_many`` over a filter the server evaluates, and ``update_one`` by a filter
    on an encrypted field, beside each other: each document's counters are exact."""
    clients[0].c.insert_many([_zeroes(i) for i in range(3)])
    rounds = 3

    def work(database: Database, client: int) -> None:
        for _ in range(rounds):
            database.c.update_many({"g": 0}, {"$inc": {"ope": 1, "ashe": 1, "plain": 1}})
            database.c.update_one({"det": {"$exists": True}, "_id": 2}, {"$inc": {"det": 1}})

    errors = _race(clients, work)
    documents = clients[0].c.find({}).sort("_id", 1).to_list()
    expected = {"ope": rounds * THREADS, "ashe": rounds * THREADS, "plain": rounds * THREADS}
    lost = _lost(documents, expected) | _lost(documents[2:], {"det": rounds * THREADS})
    assert (dict(errors), lost) == ({}, {})


def test_update_many_over_many_documents_counts_each_once(clients: list[Database]) -> None:
    """``update_many`` over more documents than one bulk of claimed writes holds (blind
    ``$inc``, one command for them all; a client-side ``$inc``, one statement each, in
    bulks, from two of the clients), beside ``update_one`` of single documents: every
    call's counts are exact and every counter holds each increment once."""
    documents, rounds, few = 110, 1, 55
    clients[0].c.insert_many([_zeroes(i) for i in range(documents)])
    matched: Counter[str] = Counter()

    def work(database: Database, client: int) -> None:
        for _ in range(rounds):
            blind = database.c.update_many({"g": 0}, {"$inc": {"plain": 1, "ashe": 1}})
            if client < 2:
                on_client = database.c.update_many({"_id": {"$lt": few}}, {"$inc": {"det": 1}})
                matched["client"] += on_client.matched_count
            single = database.c.update_one({"_id": client}, {"$inc": {"plain": 1}})
            matched["blind"] += blind.matched_count
            matched["blind modified"] += blind.modified_count
            matched["single"] += single.matched_count

    errors = _race(clients, work)
    calls = rounds * THREADS
    found = clients[0].c.find({}).sort("_id", 1).to_list()
    lost = {
        **_lost(found[:THREADS], {"plain": calls + rounds, "ashe": calls, "det": 2 * rounds}),
        **_lost(found[THREADS:few], {"plain": calls, "ashe": calls, "det": 2 * rounds}),
        **_lost(found[few:], {"plain": calls, "ashe": calls, "det": 0}),
    }
    assert (dict(errors), lost, dict(matched)) == ({}, {}, {
        "blind": calls * documents, "blind modified": calls * documents,
        "client": 2 * rounds * few, "single": calls,
    })  # fmt: skip


def test_concurrent_inserts_of_one_id_have_one_winner(clients: list[Database]) -> None:
    """Each client inserts the same ``_id``s: exactly one insert of each succeeds, the
    others are refused, and each document reads back whole."""
    wins: Counter[int] = Counter()
    refusals: Counter[str] = Counter()

    def work(database: Database, client: int) -> None:
        for id_ in range(5):
            try:
                database.c.insert_one(dict(_zeroes(id_), det=client))
                wins[id_] += 1
            except veil.documents.ServerError as exc:
                refusals["duplicate" if "duplicate" in str(exc).lower() else str(exc)] += 1

    errors = _race(clients, work)
    documents = clients[0].c.find({}).to_list()
    assert (dict(errors), dict(wins), dict(refusals)) == (
        {}, dict.fromkeys(range(5), 1), {"duplicate": 5 * (THREADS - 1)},
    )  # fmt: skip
    assert sorted(d["_id"] for d in documents) == list(range(5))
    assert all(d["det"] in range(THREADS) and d["ope"] == 0 for d in documents)


def test_writes_beside_deletes_and_replaces(clients: list[Database]) -> None:
    """Increments beside replaces and deletes by an encrypted filter: no document comes
    back once deleted, none is deleted that no longer matched, a replace is whole."""
    clients[0].c.insert_many([_zeroes(i) for i in range(6)])

    def work(database: Database, client: int) -> None:
        for round_ in range(3):
            if client == 0:
                replacement = {k: v for k, v in _zeroes(0).items() if k != "_id"}
                database.c.replace_one({"_id": round_}, dict(replacement, ope=-1))
            elif client == 1:
                database.c.delete_one({"ope": {"$gte": 100}})  # none matches: kept
                database.c.delete_many({"_id": {"$gte": 5}, "ope": {"$gte": 0}})
            else:
                for id_ in range(6):
                    database.c.update_one({"_id": id_}, {"$inc": {"ope": 1, "ashe": 1}})

    errors = _race(clients, work)
    documents = {d["_id"]: d for d in clients[0].c.find({}).to_list()}
    assert dict(errors) == {}
    assert sorted(documents) == [0, 1, 2, 3, 4]  # 5 deleted, nothing resurrected
    for id_ in (3, 4):
        assert documents[id_]["ope"] == documents[id_]["ashe"] == 3 * (THREADS - 2)
    for id_ in (0, 1, 2):  # replaced at some point: the increments since are whole pairs
        assert documents[id_]["ope"] + 1 == documents[id_]["ashe"] or (
            documents[id_]["ope"] == documents[id_]["ashe"]
        ), documents[id_]


def test_a_dead_writers_claim_is_taken_over(
    clients: list[Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim left by a writer that died before writing (its version still current)
    blocks the document only for the lease: the next writer takes it over."""
    database = clients[0]
    if database.writes != "claimed":
        pytest.skip("this server's updates are atomic: Veil claims nothing there")
    monkeypatch.setattr(versions, "LEASE", 1.0)
    database.c.insert_one(_zeroes(1))
    collection = database.c
    stored = collection.server_collection.find_one({"_id": 1})
    assert stored is not None
    version = stored[collection.codec.version]
    collection._claims.collection.insert_one({"_id": claim_key(1, version, 0)})
    collection.update_one({"_id": 1}, {"$inc": {"ope": 1, "det": 1}})
    assert (collection.find_one({"_id": 1})["ope"], collection.find_one({"_id": 1})["det"]) == (
        1, 1,
    )  # fmt: skip


def _writer(url: str, key_file: str, ready: str) -> None:
    """A writer process incrementing every counter until it is killed."""
    with _connect(url, key_file) as database:
        Path(ready).touch()
        while True:
            for id_ in range(3):
                database.c.update_one({"_id": id_}, {"$inc": dict.fromkeys(COUNTERS, 1)})
            database.c.update_many({"g": 0}, {"$inc": {"ope": 1, "det": 1}})


def test_a_writer_killed_mid_update_leaves_every_document_readable(
    clients: list[Database], server_url: str, key_file: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Writer processes killed with SIGKILL while updating: every document reads back
    whole (each field decrypts), and later writes go through and lose nothing."""
    monkeypatch.setattr(versions, "LEASE", 1.0)
    database = clients[0]
    database.c.insert_many([_zeroes(i) for i in range(3)])
    context = multiprocessing.get_context("spawn")
    for round_ in range(2):
        ready = tmp_path / f"ready-{round_}"
        process = context.Process(target=_writer, args=(server_url, str(key_file), str(ready)))
        process.start()
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5 + round_ * 0.37)
        assert process.pid is not None
        os.kill(process.pid, signal.SIGKILL)
        process.join()
    before = {d["_id"]: d for d in database.c.find({}).to_list()}
    assert sorted(before) == [0, 1, 2]
    for document in before.values():
        assert set(COUNTERS) <= set(document), document

    def work(client: Database, _: int) -> None:
        for id_ in range(3):
            client.c.update_one({"_id": id_}, {"$inc": dict.fromkeys(COUNTERS, 1)})

    errors = _race(clients, work)
    after = {d["_id"]: d for d in database.c.find({}).to_list()}
    lost = {
        f"{id_}.{f}": (before[id_][f], after[id_][f])
        for id_ in before
        for f in COUNTERS
        if after[id_][f] != before[id_][f] + THREADS
    }
    assert (dict(errors), lost) == ({}, {})


def test_a_dead_writers_ore_node_claim_is_taken_over(
    clients: list[Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim of the ORE tree's root left by a writer that died before writing it (on
    both servers: the tree claims its nodes whatever the documents' writes) blocks the
    field's inserts only for the lease: the next writers take it over and lose nothing."""
    monkeypatch.setattr(versions, "LEASE", 1.0)
    database = clients[0]
    database.c.insert_one(_zeroes(0))
    tree = database.c.codec.ciphers["ore"].ore.tree
    assert tree is not None
    root = tree._fetch([oretree.ROOT])[0]
    tree._claims.insert_one({"_id": oretree.claim_id(root.id, root.version + 1)})

    def work(client: Database, number: int) -> None:
        client.c.insert_one(dict(_zeroes(1 + number), ore=number))
        client.c.update_one({"_id": 0}, {"$inc": {"ore": 1}})

    errors = _race(clients, work)
    found = {d["_id"]: d["ore"] for d in database.c.find({"ore": {"$gte": 0}})}
    assert (dict(errors), found) == ({}, {0: THREADS, **{1 + n: n for n in range(THREADS)}})
