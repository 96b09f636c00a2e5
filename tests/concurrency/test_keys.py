"""PRIMARY KEY and UNIQUE: a server unique index on DET ciphertexts, on DuckDB and PostgreSQL.

Declared in CREATE TABLE or added by ALTER TABLE (as ``pgbench -i`` does), kept
through later rebuilds, enforced for INSERT, UPDATE and COPY with 23505 naming
the table and key columns; clients racing to insert one key: exactly one wins.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import veil
from tests.concurrency.conftest import rows
from veil.errors import SerializationError
from veil.sql.errors import NotNullViolationError, UniqueViolationError


@pytest.fixture
def client(load_tables: Callable[[dict[str, pa.Table]], Path]) -> Path:
    return load_tables({"seed": pa.table({"x": pa.array([1], pa.int64())})})


def test_declared_keys_are_enforced(client: Path) -> None:
    with veil.connect(client) as con:
        con.execute("CREATE TABLE people (id BIGINT PRIMARY KEY, email TEXT UNIQUE, n INT)")
        con.execute("INSERT INTO people VALUES (1, 'a@x', 1), (2, 'b@x', 2), (3, NULL, 3)")
        con.execute("INSERT INTO people VALUES (4, NULL, 4)")  # UNIQUE allows nulls
        for bad in (
            "INSERT INTO people VALUES (1, 'c@x', 9)",
            "INSERT INTO people VALUES (5, 'a@x', 9)",
            "INSERT INTO people VALUES (6, 'd@x', 1), (6, 'e@x', 2)",
            "UPDATE people SET id = 2 WHERE id = 1",
            "UPDATE people SET email = 'b@x' WHERE id = 1",
        ):
            with pytest.raises(UniqueViolationError, match="people"):
                con.execute(bad)
        with pytest.raises(NotNullViolationError):
            con.execute("INSERT INTO people VALUES (NULL, 'z@x', 0)")
        con.execute("UPDATE people SET n = n + 1 WHERE id = 1")  # its own key again: fine
        con.execute("UPDATE people SET id = 10 WHERE id = 1")
        assert rows(client, "SELECT id, email, n FROM people ORDER BY id") == [
            (2, "b@x", 2), (3, None, 3), (4, None, 4), (10, "a@x", 2),
        ]  # fmt: skip
        con.execute("ALTER TABLE people ADD COLUMN extra INT")  # a rebuild keeps the keys
        with pytest.raises(UniqueViolationError):
            con.execute("INSERT INTO people (id, email) VALUES (2, 'new@x')")
        keys = rows(
            client,
            "SELECT constraint_type FROM information_schema.table_constraints "
            "WHERE table_name = 'people' AND constraint_type <> 'CHECK' ORDER BY 1",
        )
        assert keys == [("PRIMARY KEY",), ("UNIQUE",)]


def test_alter_table_adds_a_primary_key_as_pgbench_does(client: Path) -> None:
    with veil.connect(client) as con:
        con.execute("CREATE TABLE branches (bid INT NOT NULL, bbalance INT) WITH (fillfactor=100)")
        con.execute("INSERT INTO branches VALUES (1, 0), (2, 0), (2, 5)")
        with pytest.raises(UniqueViolationError):  # the rows already repeat a key
            con.execute("ALTER TABLE branches ADD PRIMARY KEY (bid)")
        con.execute("DELETE FROM branches WHERE bbalance = 5")
        con.execute("ALTER TABLE branches ADD PRIMARY KEY (bid)")
        with pytest.raises(UniqueViolationError):
            con.execute("INSERT INTO branches VALUES (2, 1)")
        con.execute("UPDATE branches SET bbalance = bbalance + 3 WHERE bid = 2")
        assert rows(client, "SELECT bid, bbalance FROM branches ORDER BY bid") == [(1, 0), (2, 3)]


def test_racing_inserts_of_one_key_have_one_winner(client: Path) -> None:
    with veil.connect(client) as con:
        con.execute("CREATE TABLE claims (k INT PRIMARY KEY, who INT)")
    outcomes: list[str] = []
    start = threading.Barrier(4)

    def claim(who: int) -> None:
        with veil.connect(client) as con:
            start.wait()
            for key in range(5):
                try:
                    con.execute(f"INSERT INTO claims VALUES ({key}, {who})")
                    outcomes.append("won")
                except UniqueViolationError:
                    outcomes.append("lost")
                except SerializationError:
                    outcomes.append("conflict")
                except Exception as exc:  # an anomaly: reported by the assertion below
                    outcomes.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=claim, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    claimed = rows(client, "SELECT k, count(*) FROM claims GROUP BY k ORDER BY k")
    assert claimed == [(k, 1) for k in range(5)]  # every key once: no duplicate, none lost
    assert set(outcomes) <= {"won", "lost", "conflict"}, outcomes
    assert outcomes.count("won") == 5 and len(outcomes) == 20
