"""One YCSB run (50/50 reads and updates by ``_id``) on client threads or client processes.

Threads share one Python process, so with several of them Veil's client work
(BSON, AES-GCM per field, filter translation) runs under one GIL; a real
deployment runs several application processes, each with its own client.
``processes`` gives each client slot its own process and its own connection
(plain pymongo or Veil with the same key), started and connected before the
clock starts: the slots wait at a barrier, and the run's time is from the
earliest start to the latest end (``time.monotonic`` is one clock for every
process on Linux). Both systems get the same treatment.
"""

from __future__ import annotations

import multiprocessing
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymongo
import pymongo.errors

from veil.errors import VeilError

#: Attempts of a YCSB operation the server refuses, and the first backoff (doubling).
RETRIES = 8
BACKOFF_S = 0.005
#: Seconds a child process may take to import, connect and reach the barrier.
START_TIMEOUT_S = 300


@dataclass
class Slot:
    """What one client slot measured: latency per operation kind, retries, errors."""

    reads: list[float] = field(default_factory=list)
    updates: list[float] = field(default_factory=list)
    retries: int = 0
    errors: list[str] = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0


def run_slot(
    collection: Any, keys: np.ndarray, updates: np.ndarray, slot: int, stride: int, check: bool
) -> Slot:
    """Operations ``slot, slot + stride, ...``; a refused one (FerretDB's SQLite answers
    "database is locked" to some concurrent writes) is retried after a random, doubling
    backoff, as an application would, and its latency includes the retries."""
    out, rng = Slot(start=time.monotonic()), random.Random(slot)
    for j in range(slot, len(keys), stride):
        start = time.perf_counter()
        for attempt in range(RETRIES):
            try:
                _operation(collection, keys, updates, j, check)
                break
            except (VeilError, pymongo.errors.PyMongoError) as exc:
                if attempt == RETRIES - 1:
                    out.errors.append(str(exc)[:200])
                else:
                    out.retries += 1
                    time.sleep(rng.uniform(0, BACKOFF_S * 2**attempt))
        else:
            continue
        (out.updates if updates[j] else out.reads).append(time.perf_counter() - start)
    out.end = time.monotonic()
    return out


def _operation(collection: Any, keys: np.ndarray, updates: np.ndarray, j: int, check: bool) -> None:
    """Operation ``j``: a read, or (``updates[j]`` nonzero) an update whose 100-byte value
    ``updates[j]`` and ``j`` make new to the record: an update that writes what the
    record already holds is no write at all to FerretDB (it skips unchanged documents),
    while Veil's fresh ciphertext always is one."""
    key = f"user{int(keys[j]):012d}"
    if updates[j]:
        collection.update_one({"_id": key}, {"$set": {"field3": f"u{int(updates[j]):03d}{j:096d}"}})
    else:
        document = collection.find_one({"_id": key})
        if check:
            assert document is not None and len(document["field0"]) == 100


def on_threads(
    collection: Any, keys: np.ndarray, updates: np.ndarray, threads: int, check: bool
) -> list[Slot]:
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda s: run_slot(collection, keys, updates, s, threads, check),
                             range(threads)))  # fmt: skip


@dataclass(frozen=True)
class Target:
    """Where a child process connects: plain pymongo, or Veil with ``secret``'s key."""

    url: str
    database: str
    secret: bytes | None  # None: plain pymongo
    schemas: dict[str, Any]


def on_processes(
    target: Target, keys: np.ndarray, updates: np.ndarray, processes: int, check: bool
) -> list[Slot]:
    context = multiprocessing.get_context("spawn")  # no driver state forked mid-use
    barrier, results = context.Barrier(processes + 1), context.Queue()
    children = [
        context.Process(
            target=_child, args=(target, keys, updates, s, processes, check, barrier, results)
        )
        for s in range(processes)
    ]
    for child in children:
        child.start()
    barrier.wait(START_TIMEOUT_S)
    slots = [results.get(timeout=24 * 3600) for _ in children]
    for child in children:
        child.join()
    if any(isinstance(s, str) for s in slots):
        raise RuntimeError(
            f"a YCSB client process failed: {next(s for s in slots if isinstance(s, str))}"
        )
    return slots


def _child(
    target: Target, keys: np.ndarray, updates: np.ndarray, slot: int, stride: int, check: bool,
    barrier: Any, results: Any,
) -> None:  # fmt: skip
    try:
        client, collection = _connect(target)
    except Exception as exc:  # reported to the parent, which raises it
        barrier.abort()
        results.put(f"connect: {exc}")
        return
    try:
        barrier.wait(START_TIMEOUT_S)
        results.put(run_slot(collection, keys, updates, slot, stride, check))
    except Exception as exc:
        results.put(f"{type(exc).__name__}: {exc}")
    finally:
        client.close()


def _connect(target: Target) -> tuple[Any, Any]:
    if target.secret is None:
        plain: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(target.url)
        return plain, plain[target.database].usertable
    import veil.documents
    from veil.crypto.keys import MasterKey

    database = veil.documents.connect(
        target.url, MasterKey(target.secret), target.schemas, database=target.database
    )
    return database, database.usertable


def percentiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "p50_us": 1e6 * ordered[len(ordered) // 2],
        "p99_us": 1e6 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "mean_us": 1e6 * statistics.fmean(ordered),
    }


def summary(slots: list[Slot]) -> dict[str, Any]:
    """ops/s over the run's wall time, latency percentiles overall and per kind."""
    reads = [x for s in slots for x in s.reads]
    updates = [x for s in slots for x in s.updates]
    elapsed = max(s.end for s in slots) - min(s.start for s in slots)
    errors = [e for s in slots for e in s.errors]
    out: dict[str, Any] = {"ops_per_s": (len(reads) + len(updates)) / elapsed}
    out |= {"retries": sum(s.retries for s in slots)} | percentiles(reads + updates)
    out |= {"read_p50_us": percentiles(reads)["p50_us"] if reads else None}
    out |= {"update_p50_us": percentiles(updates)["p50_us"] if updates else None}
    return out | {"errors": len(errors), "first_error": errors[0] if errors else None}
