"""Concurrent point UPDATEs of one row found by an index of a DET key they keep (issue 41).

On DuckDB a point UPDATE finds its row by the stored value of an indexed DET
column it keeps and checks the row id among its rows
(``veil.session.stored_columns.locator``): a row another client wrote since
the match has a new id, so the write finds no row and runs again; no update
is lost.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.concurrency.conftest import connected, race, rows
from veil.load.loader import load

CLIENTS = 4
INCREMENTS = 8  # per client
ROWS = 10


# the statements as the load's workload: DET keys, and no sums that need whole rows
WORKLOAD = [
    "SELECT x, note FROM t WHERE id = 1",
    "UPDATE t SET x = x + 1, note = 'n' WHERE id = 1",
]


def test_concurrent_increments_found_by_a_key_index_all_count(
    backend_url: str, tmp_path: Path
) -> None:
    ids = pa.array(range(ROWS), pa.int64())
    x = pa.array([0] * ROWS, pa.int64())
    source = tmp_path / "source"
    source.mkdir()
    pq.write_table(
        pa.table({"id": ids, "x": x, "note": ids.cast(pa.string())}), source / "t.parquet"
    )
    client = tmp_path / "client"
    load(str(source), backend_url, str(client), WORKLOAD, progress=lambda _: None)
    with connected(client) as cursor:
        cursor.execute("CREATE INDEX t_id ON t (id)")
    statement = "UPDATE t SET x = x + 1, note = 'n' WHERE id = 1"
    done = race(client, [[statement] * INCREMENTS for _ in range(CLIENTS)])

    assert set(done.failures()) <= {"SerializationError"}, done.failures()
    updated = done.succeeded()
    assert all(d.rowcount == 1 for d in updated)
    assert rows(client, "SELECT x, note FROM t WHERE id = 1") == [(len(updated), "n")]
    assert rows(client, "SELECT count(*), count(DISTINCT id), sum(x) FROM t") == [
        (ROWS, ROWS, len(updated))
    ]
