"""Transactions: BEGIN ... COMMIT is one server transaction, ROLLBACK undoes every write.

Through the DB-API and through ``veil serve`` with psycopg (whose connections
are not in autocommit by default), on DuckDB and PostgreSQL servers: reads
inside a transaction see its writes and others do not until COMMIT; a failed
statement fails the transaction (25P02) until ROLLBACK; DDL commits the
transaction first (as MySQL does); clients moving money in two-statement transactions at once keep the
total; a client killed inside a transaction leaves nothing behind.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

import veil
from tests.concurrency.conftest import rows
from veil._native import WireServer
from veil.errors import SerializationError
from veil.serve.engine import Engine
from veil.sql.errors import InFailedTransactionError, QueryError

ACCOUNTS = 5
OPENING = 100


@pytest.fixture
def bank(load_tables: Callable[[dict[str, pa.Table]], Path]) -> Path:
    ids = pa.array(range(ACCOUNTS), pa.int64())
    return load_tables(
        {"acc": pa.table({"id": ids, "bal": pa.array([OPENING] * ACCOUNTS, pa.int64())})}
    )


def _balances(client: Path) -> dict[int, int]:
    return {int(i): int(b) for i, b in rows(client, "SELECT id, bal FROM acc")}  # type: ignore[call-overload]


def test_rollback_undoes_every_write_and_reads_see_their_own(bank: Path) -> None:
    before = _balances(bank)
    with veil.connect(bank, autocommit=False) as con:
        con.execute("UPDATE acc SET bal = bal - 10 WHERE id = 0")
        con.execute("INSERT INTO acc VALUES (99, 7)")
        con.execute("DELETE FROM acc WHERE id = 4")
        inside = dict(con.execute("SELECT id, bal FROM acc").fetchall())
        assert inside[0] == OPENING - 10 and inside[99] == 7 and 4 not in inside
        assert _balances(bank) == before  # another connection sees none of it
        con.rollback()
        assert dict(con.execute("SELECT id, bal FROM acc").fetchall()) == before
    assert _balances(bank) == before
    with veil.connect(bank) as con, con.transaction():  # commits at the end
        con.execute("UPDATE acc SET bal = bal + 1 WHERE id = 1")
        con.execute("INSERT INTO acc VALUES (5, 50)")
    after = _balances(bank)
    assert after[1] == OPENING + 1 and after[5] == 50 and len(after) == ACCOUNTS + 1


def test_sql_transaction_statements(bank: Path) -> None:
    with veil.connect(bank) as con:
        con.execute("BEGIN")
        con.execute("UPDATE acc SET bal = 0")
        con.execute("ROLLBACK")
        assert set(_balances(bank).values()) == {OPENING}
        con.execute("START TRANSACTION")
        con.execute("UPDATE acc SET bal = 1 WHERE id = 2")
        con.execute("COMMIT")
    assert _balances(bank)[2] == 1


def test_a_failed_statement_fails_the_transaction(bank: Path) -> None:
    with veil.connect(bank, autocommit=False) as con:
        con.execute("UPDATE acc SET bal = 0 WHERE id = 3")
        with pytest.raises(QueryError):
            con.execute("SELECT nope FROM acc")
        with pytest.raises(InFailedTransactionError):
            con.execute("SELECT count(*) FROM acc")
        with pytest.raises(InFailedTransactionError):  # COMMIT rolled it back: said so
            con.commit()
        assert con.execute("SELECT bal FROM acc WHERE id = 3").fetchall() == [(OPENING,)]
        con.rollback()


def test_ddl_commits_the_transaction_and_runs_on_its_own(bank: Path) -> None:
    """As MySQL: the client directory's design cannot roll back, so DDL commits first."""
    with veil.connect(bank, autocommit=False) as con:
        con.execute("UPDATE acc SET bal = 1 WHERE id = 1")
        con.execute("CREATE TABLE t2 (a INTEGER)")  # commits the UPDATE, then runs
        con.execute("INSERT INTO t2 VALUES (1)")  # in a new transaction
        con.rollback()
        assert con.execute("SELECT count(*) FROM t2").fetchall() == [(0,)]
    assert _balances(bank)[1] == 1


def _transfer_in_transactions(client: Path, seed: int, count: int, outcome: list[str]) -> None:
    """``count`` transfers, each two UPDATEs in one transaction, retried on 40001."""
    rng = random.Random(seed)
    with veil.connect(client) as con:
        for _ in range(count):
            a, b = rng.sample(range(ACCOUNTS), 2)
            amount = rng.randint(1, 20)
            for _attempt in range(50):
                try:
                    with con.transaction():
                        con.execute(f"UPDATE acc SET bal = bal - {amount} WHERE id = {a}")
                        con.execute(f"UPDATE acc SET bal = bal + {amount} WHERE id = {b}")
                    outcome.append("committed")
                    break
                except SerializationError:
                    outcome.append("retried")
            else:
                outcome.append("gave up")


def test_transfers_in_transactions_keep_the_total(bank: Path) -> None:
    outcome: list[str] = []
    threads = [
        threading.Thread(target=_transfer_in_transactions, args=(bank, seed, 6, outcome))
        for seed in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcome.count("committed") + outcome.count("gave up") == 18
    balances = _balances(bank)
    assert sum(balances.values()) == ACCOUNTS * OPENING
    assert len(rows(bank, "SELECT id FROM acc")) == ACCOUNTS  # nothing duplicated


_KILLED_WRITER = """
import sys, time, veil
con = veil.connect(sys.argv[1], autocommit=False)
con.execute("UPDATE acc SET bal = -1")
con.execute("INSERT INTO acc VALUES (77, 77)")
print("written", flush=True)
time.sleep(60)
"""


def test_a_client_killed_inside_a_transaction_leaves_nothing(
    load_tables: Callable[[dict[str, pa.Table]], Path],
) -> None:
    """The server (or, for an embedded DuckDB file, its write-ahead log) drops a killed
    client's transaction."""
    client = load_tables(
        {"acc": pa.table({"id": pa.array([0, 1], pa.int64()), "bal": pa.array([5, 6])})}
    )
    _killed_after_writing([sys.executable, "-c", _KILLED_WRITER, str(client)])
    assert sorted(rows(client, "SELECT id, bal FROM acc")) == [(0, 5), (1, 6)]
    with veil.connect(client) as con:  # and the rows it held are free
        con.execute("UPDATE acc SET bal = bal + 1")
    assert sorted(rows(client, "SELECT id, bal FROM acc")) == [(0, 6), (1, 7)]


def _killed_after_writing(command: list[str]) -> None:
    """Run ``command`` until it says it wrote, then SIGKILL it."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None and process.stdout.readline().strip() == "written"
        process.kill()
        process.wait()


# -- through veil serve ------------------------------------------------------------


@pytest.fixture
def served_bank(bank: Path) -> Iterator[str]:
    engine = Engine(bank)
    server = WireServer(engine, "127.0.0.1:0", None, None, True)
    yield server.address.rsplit(":", 1)[1]
    server.stop()
    engine.close()


def _wire(port: str, *, autocommit: bool = False) -> psycopg.Connection:
    return psycopg.connect(f"host=127.0.0.1 port={port} user=u dbname=veil", autocommit=autocommit)


def test_wire_transactions(served_bank: str, bank: Path) -> None:
    with _wire(served_bank) as con:  # psycopg: BEGIN before the first statement
        con.execute("UPDATE acc SET bal = 0 WHERE id = 0")
        assert con.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert con.execute("SELECT bal FROM acc WHERE id = 0").fetchone() == (0,)
        assert _balances(bank)[0] == OPENING
        con.rollback()
        assert con.execute("SELECT bal FROM acc WHERE id = 0").fetchone() == (OPENING,)
        con.execute("UPDATE acc SET bal = 1 WHERE id = 1")
        con.commit()
        assert _balances(bank)[1] == 1
        with pytest.raises(psycopg.Error) as failed:
            con.execute("SELECT nope FROM acc")
        assert con.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        with pytest.raises(psycopg.Error) as aborted:
            con.execute("SELECT 1 FROM acc")
        assert failed.value.sqlstate == "42703" and aborted.value.sqlstate == "25P02"
        con.rollback()
        con.execute("CREATE TABLE t3 (a INTEGER)")  # DDL commits the transaction, runs alone
        con.execute("INSERT INTO t3 VALUES (3)")
        assert con.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        con.rollback()
        assert con.execute("SELECT count(*) FROM t3").fetchone() == (0,)
        con.rollback()


def test_wire_savepoints(served_bank: str, bank: Path, backend_url: str) -> None:
    with _wire(served_bank, autocommit=True) as con:
        con.execute("BEGIN")
        con.execute("UPDATE acc SET bal = 10 WHERE id = 2")
        con.execute("SAVEPOINT s")
        if backend_url.startswith("duckdb"):  # no savepoints: marks of nothing written
            con.execute("ROLLBACK TO SAVEPOINT s")
            con.execute("UPDATE acc SET bal = 11 WHERE id = 2")
            with pytest.raises(psycopg.Error) as refused:
                con.execute("ROLLBACK TO SAVEPOINT s")
            assert refused.value.sqlstate == "0A000"
            con.execute("ROLLBACK")
            assert _balances(bank)[2] == OPENING
            return
        con.execute("UPDATE acc SET bal = 11 WHERE id = 2")
        con.execute("ROLLBACK TO SAVEPOINT s")
        assert con.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert con.execute("SELECT bal FROM acc WHERE id = 2").fetchone() == (10,)
        con.execute("RELEASE SAVEPOINT s")
        con.execute("COMMIT")
    assert _balances(bank)[2] == 10


_KILLED_WIRE_CLIENT = """
import sys, time, psycopg
con = psycopg.connect(f"host=127.0.0.1 port={sys.argv[1]} user=k dbname=veil")
con.execute("UPDATE acc SET bal = -5")
print("written", flush=True)
time.sleep(60)
"""


def test_a_wire_client_killed_inside_a_transaction_leaves_nothing(
    served_bank: str, bank: Path
) -> None:
    before = _balances(bank)
    _killed_after_writing([sys.executable, "-c", _KILLED_WIRE_CLIENT, served_bank])
    with _wire(served_bank, autocommit=True) as con:  # the server rolled it back
        for _ in range(100):  # the server notices the closed socket on its own time
            try:
                con.execute("UPDATE acc SET bal = bal + 1 WHERE id = 0")
                break
            except psycopg.errors.SerializationFailure:
                continue
        got = dict(con.execute("SELECT id, bal FROM acc").fetchall())
    assert got == {**before, 0: before[0] + 1}


def test_a_write_waiting_for_a_rows_lock_goes_on_with_its_new_version(
    bank: Path, backend_url: str
) -> None:
    """On PostgreSQL, as READ COMMITTED does: a transaction's UPDATE of a row another
    transaction rewrote waits for it to commit, then updates the row as committed (no
    40001, no lost update). DuckDB fails it (40001) as before."""
    first = veil.connect(bank, autocommit=False)
    second = veil.connect(bank, autocommit=False)
    try:
        update = "UPDATE acc SET bal = bal + ? WHERE id = ?"
        for amount in (1, 2):  # the shape planned, as pgbench's after its first runs
            first.execute(update, [amount, 3])
            first.commit()
        first.execute(update, [10, 3])  # holds the row until it commits
        outcome: list[object] = []

        def waiting() -> None:
            try:
                second.execute(update, [100, 3])
                second.commit()
                outcome.append("committed")
            except SerializationError as exc:
                second.rollback()
                outcome.append(exc)

        thread = threading.Thread(target=waiting)
        thread.start()
        thread.join(0.5)  # on PostgreSQL it waits for the row's lock
        first.commit()
        thread.join(30)
        assert not thread.is_alive()
        if backend_url.startswith("postgresql"):
            assert outcome == ["committed"]
            assert _balances(bank)[3] == OPENING + 1 + 2 + 10 + 100
        else:
            assert outcome == ["committed"] or isinstance(outcome[0], SerializationError)
            assert _balances(bank)[3] in (OPENING + 13, OPENING + 113)
    finally:
        first.close()
        second.close()
