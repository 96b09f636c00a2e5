"""The load's encrypt-ahead thread: order, errors and early stops come through."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from veil.load.prefetch import in_order, prefetched


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


def test_in_order_keeps_the_order_and_gives_each_thread_its_own_work() -> None:
    made: list[str] = []

    def make() -> Callable[[int], tuple[int, str]]:
        mine = threading.current_thread().name
        made.append(mine)
        return lambda n: (n * n, mine)

    results = list(in_order(iter(range(200)), make, threads=3))
    assert [n for n, _ in results] == [n * n for n in range(200)]
    assert len(made) == len(set(made)) <= 3  # one work per thread, built there
    assert {thread for _, thread in results} <= set(made)


def test_in_order_raises_a_work_error_where_its_result_would_be() -> None:
    def make() -> Callable[[int], int]:
        def work(n: int) -> int:
            if n == 5:
                raise ValueError("batch 5 is bad")
            return n

        return work

    seen: list[int] = []
    with pytest.raises(ValueError, match="batch 5 is bad"):
        for item in in_order(iter(range(20)), make, threads=2):
            seen.append(item)
    assert seen == [0, 1, 2, 3, 4]


def test_in_order_stopped_early_reads_few_items_ahead() -> None:
    read: list[int] = []

    def source() -> Iterator[int]:
        for n in range(1000):
            read.append(n)
            yield n

    stream = in_order(source(), lambda: lambda n: n, threads=2)
    assert [next(stream) for _ in range(3)] == [0, 1, 2]
    stream.close()
    assert len(read) <= 3 + 2 + 1  # at most threads + 1 ahead of what was taken


def test_in_order_with_one_thread_runs_in_the_callers() -> None:
    threads = list(in_order(iter(range(3)), lambda: lambda _: threading.current_thread(), 1))
    assert threads == [threading.current_thread()] * 3
