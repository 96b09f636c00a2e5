"""Unmodified pgbench through ``veil serve``: TPC-B's invariants hold on both backends.

On each backend (an embedded DuckDB file, a schema of the session's PostgreSQL
cluster), an empty client directory served by ``veil serve`` (in this process)
is initialised by ``pgbench -i -s 2`` with all its default steps (drop, create
tables WITH (fillfactor), COPY ... FREEZE, VACUUM, ALTER TABLE ADD PRIMARY KEY),
then runs ``pgbench -c 8 -j 2 -t 3`` in ``-M simple`` and then ``-M prepared``
(the extended protocol with untyped parameters). Veil's writers collide on the
few branch and teller rows and report SQLSTATE 40001; ``--max-tries`` makes
pgbench roll back and retry. ``-n``: no VACUUM/TRUNCATE of the history between
runs, so its rows count every transaction since ``-i``.

After each run, read through the same server with psycopg: sum(abalance) =
sum(tbalance) = sum(bbalance) = sum(delta), branches = scale, tellers = 10 *
scale, accounts = 100,000 * scale, history = the transactions pgbench reports
as done, no duplicated key. Failures are reported by kind (``veil_dev.bench.oltp``).
A transaction pgbench gave up on after ``--max-tries`` is not an anomaly (it was
rolled back, and the invariants say so); a client pgbench aborted on another
error is.

Measured on 2 shared cores: ``pgbench -i -s 2`` takes about 4 s on either
backend. Veil runs TPC-B at 1.5-2.5 tps at 8 clients (bench/RESULTS.md), so a run
was ``-T 20`` (about 40 transactions) until it became a count: ``-t 3`` per client,
24 transactions a run whatever the load. It stays a race: the 8 clients start
together and every TPC-B transaction updates one of the 2 branch rows (and one of
20 tellers), so their first transactions already collide and retry (the message
reports the retries), and the invariants are checked after each mode.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from veil_dev.bench.oltp import (
    Run,
    anomalies,
    empty_client_dir,
    initialize,
    psycopg_query,
    run_tpcb,
    served,
)

SCALE = 2
CLIENTS = 8
PER_CLIENT = 3  # transactions per client and run (pgbench -t)
MAX_TRIES = 100


@pytest.fixture
def port(backend_url: str, tmp_path: Path) -> Iterator[str]:
    """``veil serve --insecure-local`` over an empty client directory on ``backend_url``."""
    with served(empty_client_dir(tmp_path / "client", backend_url)) as found:
        yield found


def test_untyped_parameters_take_the_type_of_their_place(port: str) -> None:
    """What ``-M prepared`` sends: text parameters whose Parse gave no type (OID 0)."""
    dsn = f"host=127.0.0.1 port={port} user=bench dbname=veil"
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute("CREATE TABLE acc (id INT PRIMARY KEY, bal INT, day DATE, note TEXT)")
        with con.cursor() as cur:
            insert = "INSERT INTO acc (id, bal, day, note) VALUES (%s, %s, %s, %s)"
            cur.execute(insert, ("1", "10", "2024-02-29", "x"), prepare=True)
            cur.execute(insert, ("2", "-3", None, "42"), prepare=True)
        con.execute("UPDATE acc SET bal = bal + %s WHERE id = %s", ("5", "1"), prepare=True)
        found = con.execute(
            "SELECT id, bal, day, note FROM acc WHERE bal BETWEEN %s AND %s AND id IN (%s, %s) "
            "ORDER BY id",
            ("-5", "100", "1", "2"),
        ).fetchall()
        assert found == [(1, 15, dt.date(2024, 2, 29), "x"), (2, -3, None, "42")]
        first = con.execute("SELECT id FROM acc ORDER BY id LIMIT %s OFFSET %s", ("1", "1"))
        assert first.fetchall() == [(2,)]


def test_ready_for_query_carries_the_transaction_status(port: str) -> None:
    """What pgbench's ``--max-tries`` reads to know it must ROLLBACK before a retry."""
    idle, open_, failed = (
        psycopg.pq.TransactionStatus.IDLE,
        psycopg.pq.TransactionStatus.INTRANS,
        psycopg.pq.TransactionStatus.INERROR,
    )
    dsn = f"host=127.0.0.1 port={port} user=bench dbname=veil"
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
        seen = [con.info.transaction_status]
        con.execute("BEGIN")
        seen.append(con.info.transaction_status)
        con.execute("INSERT INTO t VALUES (%s, %s)", (1, 1))  # the extended protocol
        seen.append(con.info.transaction_status)
        with pytest.raises(psycopg.errors.UniqueViolation):
            con.execute("INSERT INTO t VALUES (%s, %s)", (1, 2))
        seen.append(con.info.transaction_status)
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            con.execute("SELECT v FROM t")
        seen.append(con.info.transaction_status)
        con.execute("ROLLBACK")
        seen.append(con.info.transaction_status)
        assert seen == [idle, open_, open_, failed, failed, idle]
        assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_pgbench_keeps_tpcb_invariants(port: str) -> None:
    initialize(port, SCALE)
    dsn = f"host=127.0.0.1 port={port} user=bench dbname=veil"
    with psycopg_query(dsn) as query:
        assert anomalies(query, SCALE, 0) == {}, "pgbench -i made other tables than TPC-B's"
    done, reports = 0, []
    for mode in ("simple", "prepared"):
        run = run_tpcb(port, Run("veil", mode, CLIENTS, 0, PER_CLIENT), max_tries=MAX_TRIES)
        done += run.transactions
        with psycopg_query(dsn) as query:
            found = anomalies(query, SCALE, done)
        if run.exit_code:
            found["pgbench errors"] = [f"exit {run.exit_code}", *run.errors[:5]]
        if run.transactions + run.failed != CLIENTS * PER_CLIENT:
            found["missing transactions"] = [f"-M {mode}: {run.transactions} done"]
        reports.append((mode, run, found))
    message = "\n".join(
        f"-M {mode}: {run.transactions} done, {run.failed} failed after {MAX_TRIES} tries, "
        f"{run.retries} retries; anomalies: "
        + ("none" if not found else "; ".join(f"{k}: {v}" for k, v in found.items()))
        for mode, run, found in reports
    )
    assert not any(found for _, _, found in reports), message
