"""The load's encrypt-ahead thread: order, errors and early stops come through."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from veil.load.prefetch import prefetched


def test_items_come_in_order() -> None:
    assert list(prefetched(iter(range(100)), depth=3)) == list(range(100))


def test_empty_source() -> None:
    assert list(prefetched(iter([]))) == []


def test_a_producer_error_is_raised_where_its_item_would_be() -> None:
    def failing() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("row 3 is bad")

    seen: list[int] = []
    with pytest.raises(ValueError, match="row 3 is bad"):
        for item in prefetched(failing()):
            seen.append(item)
    assert seen == [1, 2]


def test_a_consumer_that_stops_stops_and_closes_the_producer() -> None:
    closed = threading.Event()
    made: list[int] = []

    def endless() -> Iterator[int]:
        try:
            n = 0
            while True:
                made.append(n)
                yield n
                n += 1
        finally:
            closed.set()

    stream = prefetched(endless(), depth=2)
    assert [next(stream) for _ in range(5)] == [0, 1, 2, 3, 4]
    stream.close()  # what a failed insert does to the generator it was reading
    assert closed.is_set()
    assert len(made) <= 5 + 2 + 1  # never more than the queue's depth ahead


def test_the_producer_runs_in_another_thread() -> None:
    threads: list[str] = []

    def named() -> Iterator[int]:
        threads.append(threading.current_thread().name)
        yield 1

    assert list(prefetched(named())) == [1]
    assert threads == ["veil-load-encrypt"]
