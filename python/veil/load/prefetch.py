"""Encrypt the next batches while the server stores the last ones.

A load's two halves use different cores: the client encrypts (native kernels
and Arrow, which release the GIL) and the server stores (DuckDB in-process
releases it as well; PostgreSQL is another process). Run one after the other
they add up; ``prefetched`` runs the producing iterator in a thread a few
batches ahead of the consumer, so they overlap. The batches come out in the
producer's order, its errors come out where its batch would have, and a
consumer that stops early (a failed insert) stops the producer.

``in_order`` spreads the encryption itself over the cores: the kernels release
the GIL, so one encrypting thread left a core idle on tables whose encryption
outweighs their insert (TPC-DS's store_sales, inventory: issue 40).
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_DONE = object()
_POLL_SECONDS = 0.1  # how often a producer blocked on a full queue checks for a stop


def prefetched(items: Iterator[T], depth: int = 2) -> Generator[T, None, None]:
    """The items of ``items``, produced in a thread at most ``depth`` ahead of the caller."""
    ready: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as exc:  # handed to the consumer, raised where it reads
            put(_Failed(exc))
        finally:  # a generator stopped early is closed in the thread that ran it
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="veil-load-encrypt", daemon=True)
    worker.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        worker.join()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def workers() -> int:
    """Threads to encrypt with: one per core the process may use."""
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return max(1, len(cores) if cores else os.cpu_count() or 1)


def in_order(
    items: Iterator[T], make: Callable[[], Callable[[T], R]], threads: int
) -> Generator[R, None, None]:
    """``work(item)`` for each item, in the items' order, computed by ``threads`` threads.

    Each thread calls ``make()`` once for its own ``work`` (its own ciphers and
    in-process DuckDB: nothing is shared between threads). ``items`` is read
    in the caller's thread, at most ``threads + 1`` items ahead of what it has
    yielded. An error comes out where its item's result would have; a caller
    that stops early cancels what has not started and waits for what has.
    """
    if threads <= 1:
        work = make()
        yield from (work(item) for item in items)
        return
    local = threading.local()

    def run(item: T) -> R:
        work = getattr(local, "work", None)
        if work is None:
            work = local.work = make()
        return work(item)

    running: deque[Future[R]] = deque()
    with ThreadPoolExecutor(threads, thread_name_prefix="veil-load-encrypt") as pool:
        try:
            for item in items:
                running.append(pool.submit(run, item))
                if len(running) > threads:
                    yield running.popleft().result()
            while running:
                yield running.popleft().result()
        finally:
            for future in running:
                future.cancel()
