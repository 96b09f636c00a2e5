"""Writers beside rebuilds: ALTER TABLE and re-encryption while other clients write the table.

A rebuild reads the table whole, loads new server tables and swaps the design;
a row written to the old tables in between would be lost with them. Writers
and rebuilds take the table's lock (``veil.session.table_locks``), so every
increment and every insert survives any number of rebuilds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import veil
from tests.concurrency.conftest import race, rows
from veil.load.ddl import reencrypt
from veil.session.session import Session


@pytest.fixture
def client(load_tables: Callable[[dict[str, pa.Table]], Path]) -> Path:
    counters = pa.table({"id": pa.array(range(4), pa.int64()), "n": pa.array([0] * 4, pa.int64())})
    return load_tables({"counters": counters})


def test_writes_beside_alter_and_reencryption_are_kept(client: Path) -> None:
    stop = threading.Event()
    rebuilt: list[str] = []
    failed: list[BaseException] = []

    def rebuild() -> None:
        try:
            with veil.connect(client) as con:
                for step in range(3):
                    con.execute(f"ALTER TABLE counters ADD COLUMN extra{step} INT DEFAULT {step}")
                    rebuilt.append("alter")
                    con.execute(f"ALTER TABLE counters DROP COLUMN extra{step}")
                    rebuilt.append("drop")
            session = Session(client)
            try:
                reencrypt(session, "counters")
                rebuilt.append("reencrypt")
            finally:
                session.close()
        except BaseException as exc:
            failed.append(exc)
        finally:
            stop.set()

    rebuilder = threading.Thread(target=rebuild)
    rebuilder.start()
    writes = [
        [
            f"UPDATE counters SET n = n + 1 WHERE id = {k % 4}"
            if i % 2
            else f"INSERT INTO counters (id, n) VALUES ({100 + 10 * k + i}, 0)"
            for i in range(10)
        ]
        for k in range(3)
    ]
    result = race(client, writes)
    rebuilder.join()
    assert not failed, failed
    assert rebuilt == ["alter", "drop"] * 3 + ["reencrypt"]
    assert set(result.failures()) <= {"SerializationError"}, result.failures()
    increments = len(result.succeeded("UPDATE"))
    inserts = {int(d.sql.split("(")[2].split(",")[0]) for d in result.succeeded("INSERT")}
    stored = rows(client, "SELECT id, n FROM counters ORDER BY id")
    assert sum(n for i, n in stored if i < 4) == increments  # no increment lost
    assert {i for i, _ in stored if i >= 100} == inserts  # no insert lost, none invented
    assert len(stored) == len({i for i, _ in stored})  # none duplicated
