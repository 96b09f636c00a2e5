"""Encrypt the next batches while the server stores the last ones.

A load's two halves use different cores: the client encrypts (native kernels
and Arrow, which release the GIL) and the server stores (DuckDB in-process
releases it as well; PostgreSQL is another process). Run one after the other
they add up; ``prefetched`` runs the producing iterator in a thread a few
batches ahead of the consumer, so they overlap. The batches come out in the
producer's order, its errors come out where its batch would have, and a
consumer that stops early (a failed insert) stops the producer.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from typing import TypeVar

T = TypeVar("T")

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
