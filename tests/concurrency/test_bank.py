"""A bank: clients move money between accounts at once, each transfer one UPDATE.

Every transfer that reported success moved its amount exactly once, and no other
did: each account ends at its opening balance plus the transfers it took part in,
so the total never changes. A reader summing the balances meanwhile sees that total
every time.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from tests.concurrency.conftest import connected, race, rows

ACCOUNTS = 6
OPENING = 100
CLIENTS = 3
TRANSFERS = 8  # per client
TRANSFER = (
    "UPDATE acc SET bal = bal + CASE WHEN id = {a} THEN -{d} ELSE {d} END WHERE id IN ({a}, {b})"
)


def _transfers(seed: int) -> list[tuple[int, int, int]]:
    """(from, to, amount) triples."""
    rng = random.Random(seed)
    return [(*rng.sample(range(ACCOUNTS), 2), rng.randint(1, 30)) for _ in range(TRANSFERS)]


def test_concurrent_transfers_keep_every_balance(
    load_tables: Callable[[dict[str, pa.Table]], Path],
) -> None:
    ids = pa.array(range(ACCOUNTS), pa.int64())
    opening = pa.array([OPENING] * ACCOUNTS, pa.int64())
    client = load_tables({"acc": pa.table({"id": ids, "bal": opening})})
    total = ACCOUNTS * OPENING
    assert rows(client, "SELECT sum(bal) FROM acc WHERE id IN (0, 1)") == [(2 * OPENING,)]
    plans = [_transfers(seed) for seed in range(CLIENTS)]
    statements = [[TRANSFER.format(a=a, b=b, d=d) for a, b, d in plan] for plan in plans]

    sums: list[object] = []
    stop = threading.Event()
    reader = threading.Thread(target=_read_sums, args=(client, sums, stop))
    reader.start()
    try:
        done = race(client, statements)
    finally:
        stop.set()
        reader.join()

    assert set(done.failures()) <= {"SerializationError"}, done.failures()
    assert all(d.rowcount == 2 for d in done.succeeded())
    expected = {i: OPENING for i in range(ACCOUNTS)}
    moved = {TRANSFER.format(a=a, b=b, d=d): (a, b, d) for plan in plans for a, b, d in plan}
    for transfer in done.succeeded():
        a, b, d = moved[transfer.sql]
        expected[a] -= d
        expected[b] += d
    assert dict(rows(client, "SELECT id, bal FROM acc")) == expected
    assert rows(client, "SELECT count(*), count(DISTINCT id), sum(bal) FROM acc") == [
        (ACCOUNTS, ACCOUNTS, total)
    ]
    assert sums and all(s == total for s in sums), sums


def _read_sums(client: Path, sums: list[object], stop: threading.Event) -> None:
    """Sum the balances, again and again, until ``stop``."""
    with connected(client) as cursor:
        while not stop.is_set():
            sums.append(cursor.execute("SELECT sum(bal) FROM acc").fetchall()[0][0])
