"""A counter many clients increment at once: no update lost, no row duplicated."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from tests.concurrency.conftest import race, rows

CLIENTS = 4
INCREMENTS = 8  # per client
ROWS = 10


def test_concurrent_increments_of_one_row_all_count(
    load_tables: Callable[[dict[str, pa.Table]], Path],
) -> None:
    ids = pa.array(range(ROWS), pa.int64())
    client = load_tables({"t": pa.table({"id": ids, "x": pa.array([0] * ROWS, pa.int64())})})
    rows(client, "SELECT x FROM t WHERE id = 1")  # the first query's peel, before the race
    statement = "UPDATE t SET x = x + 1 WHERE id = 1"
    done = race(client, [[statement] * INCREMENTS for _ in range(CLIENTS)])

    assert set(done.failures()) <= {"SerializationError"}, done.failures()
    updated = done.succeeded()
    assert all(d.rowcount == 1 for d in updated)
    assert rows(client, "SELECT x FROM t WHERE id = 1") == [(len(updated),)]
    assert rows(client, "SELECT count(*), count(DISTINCT id), sum(x) FROM t") == [
        (ROWS, ROWS, len(updated))
    ]
