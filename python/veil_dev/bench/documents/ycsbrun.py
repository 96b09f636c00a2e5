"""One YCSB run (50/50 reads and updates by ``_id``) on client threads or client processes.

Threads share one Python process, so with several of them Veil's client work
(BSON, AES-GCM per field, filter translation) runs under one GIL; a real
deployment runs several application processes, each with its own client.
``processes`` gives each client slot its own process and its own connection
(plain pymongo or Veil with the same key), started and connected before the
clock starts: the slots wait at a barrier, and the run's time is from the
earliest start to the latest end (``time.monotonic`` is one clock for every
process on Linux). Both systems get the same treatment.

SIGTERM or SIGINT during a run sets a stop event that every slot checks between
operations (:func:`stop_on_signals`), so its threads or processes end after their
current operation and the run raises :class:`Stopped`; a thread cannot be killed, and
without the event a stopped run's threads went on with their remaining operations
(seconds each at 1M).
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pymongo
import pymongo.errors

from veil.errors import VeilError

#: Attempts of a YCSB operation the server refuses, and the first backoff (doubling).
RETRIES = 8
BACKOFF_S = 0.005
#: Seconds a child process may take to import, connect and reach the barrier.
START_TIMEOUT_S = 300
#: The signals that stop a run.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopEvent(Protocol):
    """``threading.Event`` or a multiprocessing one: what a slot checks between operations."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Stopped(BaseException):
    """A run stopped by a signal, raised once its slots have ended (a BaseException, as
    KeyboardInterrupt is, so that no ``except Exception`` on the way up swallows it)."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


@contextmanager
def stop_on_signals(stop: StopEvent) -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT set ``stop`` instead of their usual action;
    after it (its slots ended), raise :class:`Stopped` if one came. The handlers are
    installed only in the main thread (Python runs handlers there and allows installing
    them nowhere else) and the previous ones restored on the way out."""
    received: list[int] = []

    def handler(signum: int, frame: object) -> None:
        received.append(signum)
        stop.set()

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():  # None: a handler not installed from Python
            signal.signal(signum, signal.SIG_DFL if old is None else old)
    if received:
        raise Stopped(received[0])


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
    collection: Any, keys: np.ndarray, updates: np.ndarray, slot: int, stride: int, check: bool,
    stop: StopEvent,
) -> Slot:  # fmt: skip
    """Operations ``slot, slot + stride, ...`` until ``stop`` is set; a refused one
    (FerretDB's SQLite answers "database is locked" to some concurrent writes) is retried
    after a random, doubling backoff, as an application would, and its latency includes
    the retries."""
    out, rng = Slot(start=time.monotonic()), random.Random(slot)
    for j in range(slot, len(keys), stride):
        if stop.is_set():
            break
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
                    stop.wait(rng.uniform(0, BACKOFF_S * 2**attempt))
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
    stop = threading.Event()
    # the pool's exit joins the slots, then the signals' exit raises Stopped if one came
    with stop_on_signals(stop), ThreadPoolExecutor(threads) as pool:
        slots = pool.map(
            lambda s: run_slot(collection, keys, updates, s, threads, check, stop),
            range(threads),
        )
        return list(slots)


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
    barrier, results, stop = context.Barrier(processes + 1), context.Queue(), context.Event()
    children = [
        context.Process(
            target=_child,
            args=(target, keys, updates, s, processes, check, barrier, results, stop),
        )
        for s in range(processes)
    ]
    with stop_on_signals(stop):
        for child in children:
            child.start()
        barrier.wait(START_TIMEOUT_S)
        slots = _collect(results, children)
        for child in children:
            child.join()
    if any(isinstance(s, str) for s in slots):
        raise RuntimeError(
            f"a YCSB client process failed: {next(s for s in slots if isinstance(s, str))}"
        )
    return slots


def _collect(results: Any, children: list[Any]) -> list[Any]:
    """Each child's figures (or failure); a child that died without either fails the run
    instead of leaving the parent waiting."""
    slots: list[Any] = []
    while len(slots) < len(children):
        try:
            slots.append(results.get(timeout=1))
        except queue.Empty:
            if all(not child.is_alive() for child in children):
                try:  # a last report may still be in the pipe
                    slots.append(results.get(timeout=5))
                except queue.Empty:
                    raise RuntimeError("a YCSB client process died without its figures") from None
    return slots


def _child(
    target: Target, keys: np.ndarray, updates: np.ndarray, slot: int, stride: int, check: bool,
    barrier: Any, results: Any, stop: StopEvent,
) -> None:  # fmt: skip
    # Ctrl-C reaches the whole process group: the parent sets ``stop`` for its children
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        client, collection = _connect(target)
    except Exception as exc:  # reported to the parent, which raises it
        barrier.abort()
        results.put(f"connect: {exc}")
        return
    try:
        barrier.wait(START_TIMEOUT_S)
        results.put(run_slot(collection, keys, updates, slot, stride, check, stop))
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
