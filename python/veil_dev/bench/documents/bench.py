"""``veil documents bench``: Veil's encrypted documents against plain pymongo, side by side.

Both clients use the same FerretDB (started for the run on a free loopback
port unless ``--url`` names a server), each in a database of its own, one
after the other for each measurement:

* ``benchmarkdb``: the Secure Mongo paper's BenchmarkDB (§3.3.2, Tables
  4.5-4.6): ``docs`` sequential ``insert_one`` of movies ``{title, Index}``,
  then ``ops`` reads searched by ``Index`` (an ``index`` field; plain:
  a native index). Per-operation latencies.
* ``ycsb``: the paper's YCSB workload (Table 3.1: 50% reads by key, 50%
  updates of one field; uniform and Zipfian) over ``docs`` records of ten
  100-byte ``static`` fields, on 1 and 8 client threads (and, with ``processes``,
  client processes: :mod:`veil_dev.bench.documents.ycsbrun`): ops/s, p50, p99.
* ``range``: ``find`` of ``Index`` in ``[k, k + width)`` (``ope``; plain:
  a native index), and of ``Rank`` (the same values under ``ore``, in
  documents of their own, against the same plain documents), with the server commands per query counted and,
  for ``ore``, the sequential round trips (tree levels, then the documents).
  The ``ore`` section (run only when named) is the ``ore`` half alone.
* ``sum``: ``$group`` by a 10-value ``index`` key with ``$sum`` of an
  ``h_add`` field (plain: ``$sum`` of the plain field), over all documents.

Every Veil read is checked against what was written. Timings are medians of
the runs; the machine is shared, so the JSON records what it was told about
other load (``--note``).
"""

from __future__ import annotations

import itertools
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import numpy as np
import pymongo
import pymongo.errors
from pymongo import monitoring

import veil.documents
from veil.crypto.keys import MASTER_KEY_BYTES, MasterKey
from veil_dev.bench.documents.ycsbrun import (
    Target,
    on_processes,
    on_threads,
    percentiles,
    summary,
)
from veil_dev.bench.kv.ycsb import zipfian_ranks
from veil_dev.servers.ferretdb import FerretDBServer

MOVIE_SCHEMA = {"fields": {"title": "static", "Index": "index"}}
SALES_SCHEMA = {"fields": {"g": "index", "v": "h_add"}}
PAILLIER_SALES_SCHEMA = {"fields": {"g": "index", "v": {"attr": "h_add", "scheme": "paillier"}}}
#: ``v`` chained by ``g`` (veil.documents.chains), over :func:`sales`' values with room
#: for the ``$inc`` runs.
CHAINED_SALES_SCHEMA = {
    "fields": {"g": "index", "v": {"attr": "h_add", "chain": "g", "domain": [-100_000, 100_000]}}
}
#: The same, with blind ``$inc`` that shows the server each increment (veil.documents.drift).
REVEALED_SALES_SCHEMA = {
    "fields": {
        "g": "index",
        "v": {"attr": "h_add", "chain": "g", "domain": [-100_000, 100_000],
              "reveal_increments": True},
    }
}  # fmt: skip
RANKED_SCHEMA = {"fields": {"Rank": {"attr": "index", "scheme": "ore"}}}
SCHEMAS = {
    "movies": MOVIE_SCHEMA,
    "sales": SALES_SCHEMA,
    "sales_paillier": PAILLIER_SALES_SCHEMA,
    "sales_chained": CHAINED_SALES_SCHEMA,
    "sales_revealed": REVEALED_SALES_SCHEMA,
    "usertable": None,
    "ranked": RANKED_SCHEMA,
}
#: Scans per query on FerretDB 1.24 (it uses no index but _id): cap them at this many
#: documents scanned per measurement.
SCAN_BUDGET = 4_000_000
YCSB_FIELDS = [f"field{i}" for i in range(10)]
YCSB_SCHEMA = {"fields": dict.fromkeys(YCSB_FIELDS, "static")}
SCHEMAS["usertable"] = YCSB_SCHEMA
LOAD_BATCH = 1000
#: Sections run only when named: parts of others, for sizes where the whole is too long.
NAMED_ONLY = ("writes", "inc", "ore", "chains")


class CommandCounter(monitoring.CommandListener):
    """Counts the commands a client sends (one per round trip)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        with self._lock:
            self.count += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@contextmanager
def server_url(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with tempfile.TemporaryDirectory(prefix="veil-docbench-") as directory:
        server = FerretDBServer(directory).start()
        try:
            yield server.url
        finally:
            server.stop()


class Clients:
    """The two clients of one measurement: Veil and plain pymongo, same server."""

    def __init__(self, url: str, run: str):
        self.url, self.run = url, run
        self.veil_counter, self.plain_counter = CommandCounter(), CommandCounter()
        self._secret = os.urandom(MASTER_KEY_BYTES)  # for client processes of the same key
        self.veil = veil.documents.connect(
            url, MasterKey(self._secret), SCHEMAS, database=f"bench_veil_{run}",
            client_options={"event_listeners": [self.veil_counter]},
        )  # fmt: skip
        self._plain_client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            url, event_listeners=[self.plain_counter]
        )
        self.plain = self._plain_client[f"bench_plain_{run}"]

    def targets(self) -> tuple[Target, Target]:
        """Where client processes connect: the plain database, the Veil one."""
        return (
            Target(self.url, f"bench_plain_{self.run}", None, SCHEMAS),
            Target(self.url, f"bench_veil_{self.run}", self._secret, SCHEMAS),
        )

    def close(self) -> None:
        self.veil.close()
        self._plain_client.close()


def timed(operation: Callable[[], Any]) -> float:
    start = time.perf_counter()
    operation()
    return time.perf_counter() - start


# -- BenchmarkDB ----------------------------------------------------------------------


def movies(count: int) -> list[dict[str, Any]]:
    return [{"_id": i, "title": f"Movie title {i}", "Index": i} for i in range(count)]


def sales(count: int) -> list[dict[str, Any]]:
    return [{"_id": i, "g": i % 10, "v": (i * 7919) % 100_000 - 50_000} for i in range(count)]


def benchmarkdb(
    clients: Clients, docs: int, ops: int, seed: int, timed_inserts: int
) -> dict[str, Any]:
    """Sequential inserts, then reads searched by Index (paper Tables 4.5-4.6).

    The last ``timed_inserts`` documents are inserted one by one and timed; the
    ones before are bulk-loaded first (an insert's cost does not grow with the
    collection on FerretDB, and a 100k run stays within the machine's time).
    """
    writes = sequential_inserts(clients, docs, timed_inserts)["write"]
    keys = random.Random(seed).choices(range(docs), k=ops)
    reads: dict[str, list[float]] = {"veil": [], "plain": []}
    for key in keys:
        reads["plain"].append(timed(partial(clients.plain.movies.find_one, {"Index": key})))
        start = time.perf_counter()
        found = clients.veil.movies.find_one({"Index": key})
        reads["veil"].append(time.perf_counter() - start)
        assert found is not None and found["title"] == f"Movie title {key}"
    return {"write": writes, "read": {name: percentiles(v) for name, v in reads.items()}}


def sequential_inserts(clients: Clients, docs: int, timed_inserts: int) -> dict[str, Any]:
    """BenchmarkDB's writes alone (the ``writes`` section: no reads, whose full scans
    make a 1M run hours long): ``docs - timed_inserts`` movies bulk-loaded, the rest
    inserted one by one and timed."""
    rows = movies(docs)
    bulk = max(0, docs - timed_inserts)
    load_movies(clients, rows[:bulk])
    writes: dict[str, list[float]] = {"veil": [], "plain": []}
    for document in rows[bulk:]:  # side by side, one document each in turn
        writes["plain"].append(timed(partial(clients.plain.movies.insert_one, dict(document))))
        writes["veil"].append(timed(partial(clients.veil.movies.insert_one, dict(document))))
    return {"write": {name: percentiles(values) for name, values in writes.items()}}


def load_movies(clients: Clients, rows: list[dict[str, Any]]) -> None:
    """Index both collections on ``Index`` and bulk-load ``rows`` into each."""
    clients.plain.movies.create_index("Index")
    clients.veil.movies.create_index("Index")
    for at in range(0, len(rows), LOAD_BATCH):
        batch = rows[at : at + LOAD_BATCH]
        clients.plain.movies.insert_many([dict(r) for r in batch])
        clients.veil.movies.insert_many([dict(r) for r in batch])


# -- ranges and sums over the movies --------------------------------------------------------


def scans(docs: int, wanted: int, budget: int = SCAN_BUDGET) -> int:
    """How many full-scan queries fit the budget of documents scanned (at least 10)."""
    return max(10, min(wanted, budget // docs))


def ranges(
    clients: Clients, docs: int, width: int, queries: int, seed: int,
    measured: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Plain (native index) against ``ope`` (``Index`` of the movies), then plain ``Rank``
    against ``ore`` (``Rank`` of documents holding nothing else).

    The ``ope`` figures come first and go to ``measured`` before the ``ore`` documents are
    loaded (at 1M that load, the ORE encryption of every value on the client above all,
    takes minutes; value by value it took over an hour before the tree was bulk-built).
    """
    if clients.plain.movies.estimated_document_count() == 0:  # run without benchmarkdb
        load_movies(clients, movies(docs))
    starts = range_starts(docs, width, queries, seed)
    out: dict[str, Any] = {}
    for name, collection, counter in (
        ("plain", clients.plain.movies, clients.plain_counter),
        ("veil", clients.veil.movies, clients.veil_counter),
    ):
        out[name] = range_queries(collection, counter, "Index", starts, width, docs)
    if measured is not None:
        measured(dict(out))
    ore = ore_ranges(clients, docs, width, starts)
    out["ore_load_docs_per_s"] = ore["load_docs_per_s"]["veil"]
    return out | {name: ore[name] for name in ("plain_ranked", "veil_ore", "ore_tree")}


def ore_ranges(clients: Clients, docs: int, width: int, starts: list[int]) -> dict[str, Any]:
    """Plain ``Rank`` (a native index) against ``ore`` ``Rank``, in documents holding
    nothing else, each loaded by one ``insert_many`` (so the ``ore`` field's tree is
    bulk-built, :mod:`veil.documents.orebulk`); the ``ore`` section runs this alone."""
    clients.plain.ranked.create_index("Rank")
    load = {
        "plain": docs / timed(partial(load_ranked, clients.plain.ranked, docs)),
        "veil": docs / timed(partial(load_ranked, clients.veil.ranked, docs)),
    }
    ore = clients.veil.ranked.codec.ciphers["Rank"].ore
    assert ore is not None and ore.tree is not None
    tree = ore.tree
    out: dict[str, Any] = {"load_docs_per_s": load, "ore_tree": tree_shape(tree)}
    out["plain_ranked"] = range_queries(
        clients.plain.ranked, clients.plain_counter, "Rank", starts, width, docs
    )
    waves = tree.round_trips
    out["veil_ore"] = range_queries(
        clients.veil.ranked, clients.veil_counter, "Rank", starts, width, docs
    )
    # tree levels (parallel reads in each), then the documents query
    out["veil_ore"]["sequential_round_trips"] = (tree.round_trips - waves) / len(starts) + 1
    return out


def tree_shape(tree: Any) -> dict[str, int]:
    """An ORE tree's levels (the root's height + 1) and stored nodes."""
    root = tree._fetch(["root"])[0]
    return {"levels": root.level + 1, "nodes": tree._nodes.estimated_document_count()}


def range_starts(docs: int, width: int, queries: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(0, max(1, docs - width)) for _ in range(queries)]


def range_queries(
    collection: Any, counter: CommandCounter, path: str, starts: list[int], width: int, docs: int
) -> dict[str, Any]:
    """``find`` of ``path`` in ``[start, start + width)`` for each start: latencies, commands."""
    latencies, before = [], counter.count
    for start in starts:
        query = {path: {"$gte": start, "$lt": start + width}}
        t0 = time.perf_counter()
        found = list(collection.find(query))
        latencies.append(time.perf_counter() - t0)
        assert len(found) == min(width, docs - start)
    return percentiles(latencies) | {"round_trips": (counter.count - before) / len(starts)}


def load_ranked(collection: Any, docs: int) -> None:
    """One ``insert_many`` of every ranked document (the driver splits it into commands)."""
    collection.insert_many([{"_id": i, "Rank": i} for i in range(docs)])


def sums(clients: Clients, docs: int, runs: int, incs: int, seed: int) -> dict[str, Any]:
    """``$group`` by ``g`` with ``$sum`` of ``v``: plain, Veil's ASHE server sums and fetch,
    Veil's Paillier (fetched ciphertexts multiplied per group on the client), Veil's ASHE
    chained by ``g`` (one ``$group``, chain lengths read after it); then ``incs``
    ``$inc`` of ``v`` by ``_id``, plain against Veil's blind ASHE and Paillier ``$inc``."""
    rows = sales(docs)
    load = load_batches(rows, {
        "plain": clients.plain.sales, "veil": clients.veil.sales,
        "veil_paillier": clients.veil.sales_paillier, "veil_chain": clients.veil.sales_chained,
        "veil_chain_revealed": clients.veil.sales_revealed,
    })  # fmt: skip
    systems = (
        ("plain", clients.plain.sales, clients.plain_counter, None),
        ("veil_server", clients.veil.sales, clients.veil_counter, "server"),
        ("veil_fetch", clients.veil.sales, clients.veil_counter, "fetch"),
        ("veil_paillier", clients.veil.sales_paillier, clients.veil_counter, None),
        ("veil_chain", clients.veil.sales_chained, clients.veil_counter, None),
        ("veil_chain_revealed", clients.veil.sales_revealed, clients.veil_counter, None),
    )
    out = grouped_sums(clients, systems, runs, rows)
    out["load_docs_per_s"] = load
    # over a filtered set (half the documents, by _id): the unchained field's sums run on
    # the server through their ids, or are fetched; the chained field's are one run per
    # group where the server computes several accumulators (else fetched)
    filtered = (*systems[:3], systems[4])
    out["filtered"] = grouped_sums(clients, filtered, runs, rows, below=docs // 2)
    out["inc"] = increments(clients, docs, incs, seed)
    out["after_inc"] = sums_after_increments(clients, runs)
    return out


def sum_runs(docs: int) -> int:
    """Timed runs of each grouped sum: more where a sum takes milliseconds (a median of
    five is at the mercy of one slow run there), five from 40,000 documents."""
    return max(5, min(25, 200_000 // max(docs, 1)))


def load_batches(rows: list[dict[str, Any]], collections: dict[str, Any]) -> dict[str, float]:
    """``rows`` into each collection by ``insert_many`` of ``LOAD_BATCH`` (the caller's
    documents stay as they are); docs/s each."""
    load: dict[str, float] = {}
    for name, collection in collections.items():
        start = time.perf_counter()
        for at in range(0, len(rows), LOAD_BATCH):
            collection.insert_many([dict(r) for r in rows[at : at + LOAD_BATCH]])
        load[name] = len(rows) / (time.perf_counter() - start)
    return load


def grouped_sums(
    clients: Clients, systems: tuple[tuple[str, Any, CommandCounter, str | None], ...],
    runs: int, rows: list[dict[str, Any]], below: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``$group`` by ``g`` with ``$sum`` of ``v`` on each system (of the documents whose
    ``_id`` is ``below`` a bound if one is given), ``runs`` times side by side (one of
    each in turn), each answer checked against ``rows``; commands counted."""
    pipeline: list[dict[str, Any]] = [{"$group": {"_id": "$g", "s": {"$sum": "$v"}}}]
    if below is not None:
        pipeline.insert(0, {"$match": {"_id": {"$lt": below}}})
    expected: dict[int, int] = {}
    for r in rows:
        if below is None or r["_id"] < below:
            expected[r["g"]] = expected.get(r["g"], 0) + r["v"]
    latencies: dict[str, list[float]] = {name: [] for name, *_ in systems}
    trips: dict[str, int] = dict.fromkeys(latencies, 0)
    for run in range(-1, runs):  # run -1 warms up: a JVM server compiles its hot paths
        for name, collection, counter, strategy in systems:
            if strategy:
                clients.veil.sums = strategy
            before, t0 = counter.count, time.perf_counter()
            got = {row["_id"]: row["s"] for row in collection.aggregate(pipeline)}
            if run >= 0:
                latencies[name].append(time.perf_counter() - t0)
                trips[name] += counter.count - before
            assert got == expected, name
    return {
        name: percentiles(values) | {"round_trips": trips[name] / runs}
        for name, values in latencies.items()
    }


def chain_sums(clients: Clients, docs: int, runs: int, count: int, seed: int) -> dict[str, Any]:
    """The ``chains`` section: plain against the chained field alone (no ASHE, Paillier or
    revealing collections to load, for sizes where the ``sum`` section is too long): the
    grouped sum (sub-chains past a chain's capacity), then ``count`` default (read,
    claim, conditional write) ``$inc`` by ``_id``."""
    rows = sales(docs)
    load = load_batches(
        rows, {"plain": clients.plain.sales, "veil_chain": clients.veil.sales_chained}
    )
    systems = (
        ("plain", clients.plain.sales, clients.plain_counter, None),
        ("veil_chain", clients.veil.sales_chained, clients.veil_counter, None),
    )
    out = grouped_sums(clients, systems, runs, rows)
    out["load_docs_per_s"] = load
    out["inc"] = increments(
        clients, docs, count, seed,
        {"plain": clients.plain.sales, "veil_chain": clients.veil.sales_chained},
    )  # fmt: skip
    return out


def sums_after_increments(clients: Clients, runs: int) -> dict[str, Any]:
    """The grouped sum again once the ``$inc`` runs moved values: plain against the chained
    field that took them blind (its chains have no holes, so one ``$group`` still)."""
    pipeline = [{"$group": {"_id": "$g", "s": {"$sum": "$v"}}}]
    systems = (
        ("plain", clients.plain.sales, clients.plain_counter),
        ("veil_chain_revealed", clients.veil.sales_revealed, clients.veil_counter),
    )
    latencies: dict[str, list[float]] = {name: [] for name, *_ in systems}
    trips: dict[str, int] = dict.fromkeys(latencies, 0)
    for _ in range(runs):
        answers = []
        for name, collection, counter in systems:
            before, t0 = counter.count, time.perf_counter()
            answers.append({row["_id"]: row["s"] for row in collection.aggregate(pipeline)})
            latencies[name].append(time.perf_counter() - t0)
            trips[name] += counter.count - before
        assert answers[0] == answers[1]
    return {
        name: percentiles(values) | {"round_trips": trips[name] / runs}
        for name, values in latencies.items()
    }


def blind_increments(clients: Clients, docs: int, count: int, seed: int) -> dict[str, Any]:
    """The ``inc`` section: only the blind ``$inc`` paths (plain, unchained ASHE, chained
    with revealed increments) over ``docs`` sales, without the sums."""
    collections = {
        "plain": clients.plain.sales, "veil": clients.veil.sales,
        "veil_chain_revealed": clients.veil.sales_revealed,
    }  # fmt: skip
    load_batches(sales(docs), collections)
    return increments(clients, docs, count, seed, collections)


def increments(
    clients: Clients, docs: int, count: int, seed: int, systems: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``$inc`` of ``v`` by ``_id``, one of each system in turn; the values checked after."""
    rng = random.Random(seed)
    targets = [(rng.randrange(docs), rng.randrange(-1000, 1000)) for _ in range(count)]
    systems = systems or {
        "plain": clients.plain.sales, "veil": clients.veil.sales,
        "veil_paillier": clients.veil.sales_paillier, "veil_chain": clients.veil.sales_chained,
        "veil_chain_revealed": clients.veil.sales_revealed,
    }  # fmt: skip
    latencies: dict[str, list[float]] = {name: [] for name in systems}
    for id_, delta in targets:
        for name, collection in systems.items():
            update = partial(collection.update_one, {"_id": id_}, {"$inc": {"v": delta}})
            latencies[name].append(timed(update))
    checked = 20 if docs <= 100_000 else 1  # each a full scan per system on FerretDB
    for id_ in {id_ for id_, _ in targets[:checked]}:
        want = (clients.plain.sales.find_one({"_id": id_}) or {})["v"]
        for name, collection in systems.items():
            assert (collection.find_one({"_id": id_}) or {})["v"] == want, name
    return {name: percentiles(values) for name, values in latencies.items()}


# -- YCSB ------------------------------------------------------------------------------------


def ycsb_records(count: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)
    blob = letters[rng.integers(0, len(letters), size=count * 10 * 100)].tobytes().decode()
    return [
        {"_id": f"user{i:012d}", **{f: blob[(i * 10 + j) * 100 : (i * 10 + j + 1) * 100]
                                    for j, f in enumerate(YCSB_FIELDS)}}
        for i in range(count)
    ]  # fmt: skip


def load_ycsb(clients: Clients, records: list[dict[str, Any]]) -> dict[str, float]:
    return load_batches(records, {"plain": clients.plain.usertable, "veil": clients.veil.usertable})


def ycsb(
    clients: Clients, docs: int, ops: int, threads: list[int], seed: int,
    processes: list[int] | None = None,
    measured: Callable[[dict[str, Any]], None] | None = None,
    workloads: list[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Each distribution (of ``workloads``; default both) on ``threads`` client threads of
    this process (labels ``_Nt``) and on ``processes`` client processes of one thread each
    (labels ``_Np``); each workload's figures go to ``measured`` as soon as it ends (a 1M
    run takes an hour)."""
    records = ycsb_records(docs, seed)
    out: dict[str, Any] = {"load_docs_per_s": load_ycsb(clients, records)}
    rng = np.random.default_rng(seed)
    scramble = rng.permutation(docs)
    distributions = {
        "uniform": rng.integers(0, docs, size=ops),
        "zipfian": scramble[zipfian_ranks(docs, ops, rng)],
    }
    chosen = rng.random(ops) < 0.5
    # each workload updates with values of its own (nonzero: an update, and its value's
    # seed), or the second workload over the same keys would rewrite what the first wrote
    if unknown := set(workloads or ()) - set(distributions):
        raise ValueError(f"unknown YCSB workloads {sorted(unknown)}: {sorted(distributions)}")
    numbers = itertools.count(1)
    for distribution, keys in distributions.items():
        if workloads and distribution not in workloads:
            continue
        for count in threads:
            updates = chosen * next(numbers)
            out[f"{distribution}_{count}t"] = {
                "plain": summary(on_threads(clients.plain.usertable, keys, updates, count, False)),
                "veil": summary(on_threads(clients.veil.usertable, keys, updates, count, True)),
            }
            if measured is not None:
                measured(dict(out))
        for count in processes or []:
            updates = chosen * next(numbers)
            plain, encrypted = clients.targets()
            out[f"{distribution}_{count}p"] = {
                "plain": summary(on_processes(plain, keys, updates, count, False)),
                "veil": summary(on_processes(encrypted, keys, updates, count, True)),
            }
            if measured is not None:
                measured(dict(out))
    return out


def run(
    url: str | None, docs: int, ops: int, threads: list[int], range_width: int, seed: int,
    note: str, timed_inserts: int | None = None, scan_budget: int = SCAN_BUDGET,
    progress: Callable[[dict[str, Any]], None] | None = None, only: list[str] | None = None,
    processes: list[int] | None = None, incs: int | None = None,
    workloads: list[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    with server_url(url) as address:
        clients = Clients(address, f"{docs}_{os.getpid()}")
        try:
            timed = docs if timed_inserts is None else min(docs, timed_inserts)
            result: dict[str, Any] = {
                "docs": docs, "ops": ops, "note": note, "cpus": os.cpu_count(),
                "server": "FerretDB 1.24.2 (SQLite), same machine, loopback",
                "timed_inserts": timed, "scan_budget": scan_budget,
            }  # fmt: skip

            def measured(name: str, part: dict[str, Any]) -> None:  # a section's first figures
                result[name] = part
                if progress is not None:
                    progress(result)

            reads = scans(docs, ops, scan_budget)
            queries = scans(docs, ops // 10, scan_budget)
            sections: dict[str, Callable[[], dict[str, Any]]] = {
                "benchmarkdb": partial(benchmarkdb, clients, docs, reads, seed, timed),
                "range": partial(
                    ranges, clients, docs, range_width, queries, seed, partial(measured, "range")
                ),
                "sum": partial(
                    sums, clients, docs, sum_runs(docs), scans(docs, 100, scan_budget), seed
                ),
                "ycsb": partial(
                    ycsb,
                    clients,
                    docs,
                    ops,
                    threads,
                    seed,
                    processes,
                    partial(measured, "ycsb"),
                    workloads,
                ),
                "ore": partial(
                    ore_ranges,
                    clients,
                    docs,
                    range_width,
                    range_starts(docs, range_width, queries, seed),
                ),
                "writes": partial(sequential_inserts, clients, docs, timed),
                "inc": partial(blind_increments, clients, docs, incs or 10, seed),
                "chains": partial(chain_sums, clients, docs, 5, incs or 10, seed),
            }
            for name, section in sections.items():
                if (only and name not in only) or (not only and name in NAMED_ONLY):
                    continue
                result[name] = section()
                if progress is not None:
                    progress(result)
        finally:
            clients.close()
    return result
