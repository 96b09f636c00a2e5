"""Clients of ``veil serve --workers 2`` (issue 41): connections on different processes.

The workers coordinate as any two processes on one client directory do
(docs/serve.md, "Workers"). Here one connection changes the design (CREATE,
ALTER, DROP, a peel of an onion by a query that needs it) while others write
rows through the other worker, and every connection then sees the new design
and every row; and unmodified pgbench keeps TPC-B's invariants across the
workers. The server is a schema of the session's PostgreSQL cluster (an
embedded DuckDB file is held by one process: one worker).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from veil_dev.bench.oltp import (
    Run,
    anomalies,
    empty_client_dir,
    initialize,
    psycopg_query,
    run_tpcb,
    served_process,
)

pytestmark = pytest.mark.postgres

WORKERS = 2
WRITERS = 3
ROUNDS = 8  # rows each writer inserts and then updates
ATTEMPTS = 50  # a statement that collides (40001) changed nothing: it runs again


def _connections_by_worker(pids: set[int], port: str) -> dict[int, int]:
    """How many of the server's accepted connections (local port ``port``) each worker holds."""
    local = f":{int(port):04X}"
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1].endswith(local) and fields[3] == "01":  # established
                inodes.add(fields[9])
    held = {}
    for pid in pids:
        sockets = {p.readlink().name for p in Path(f"/proc/{pid}/fd").iterdir() if _socket(p)}
        held[pid] = len({s[len("socket:[") : -1] for s in sockets} & inodes)
    return held


def _socket(link: Path) -> bool:
    try:
        return link.readlink().name.startswith("socket:[")
    except OSError:
        return False


def _workers(supervisor: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == supervisor:
                found.add(int(stat.parent.name))
        except OSError:
            continue
    return found


def _again(con: psycopg.Connection[Any], sql: str, params: tuple[Any, ...] = ()) -> None:
    for _ in range(ATTEMPTS):
        try:
            con.execute(sql, params)
            return
        except psycopg.errors.SerializationFailure:
            continue
    raise AssertionError(f"collided {ATTEMPTS} times")


def test_ddl_in_one_connection_dml_in_others(postgres_url: str, tmp_path: Path) -> None:
    client = empty_client_dir(tmp_path / "client", postgres_url)
    with served_process(client, WORKERS) as (server, port):
        dsn = f"host=127.0.0.1 port={port} user=u dbname=veil"
        with psycopg.connect(dsn, autocommit=True) as con:
            con.execute("CREATE TABLE acc (id int PRIMARY KEY, bal int NOT NULL)")
        # every connection open before any statement, so they spread over both workers
        writers = [psycopg.connect(dsn, autocommit=True) for _ in range(WRITERS)]
        designer = psycopg.connect(dsn, autocommit=True)
        held = _connections_by_worker(_workers(server.pid), port)
        assert sorted(held.values()) != [0, WRITERS + 1], f"one worker took them all: {held}"
        failures: list[BaseException] = []

        def write(n: int) -> None:
            con = writers[n]
            try:
                for i in range(ROUNDS):
                    key = 1000 * n + i
                    _again(con, "INSERT INTO acc (id, bal) VALUES (%s, %s)", (key, n))
                    _again(con, "UPDATE acc SET bal = bal + 1 WHERE id = %s", (key,))
            except BaseException as exc:  # reported by the main thread
                failures.append(exc)

        def design() -> None:
            try:
                for i in range(2):
                    designer.execute(f"CREATE TABLE side_{i} (k int PRIMARY KEY, v text)")
                    designer.execute(f"INSERT INTO side_{i} VALUES (1, 'x')")
                    # an equality on an onion column: the query peels it (the design changes)
                    designer.execute("SELECT count(*) FROM acc WHERE bal = %s", (i,)).fetchall()
                _again(designer, "ALTER TABLE acc ADD COLUMN note text")
                designer.execute("DROP TABLE side_0")
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
        threads.append(threading.Thread(target=design))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        want = sorted((1000 * n + i, n + 1, None) for n in range(WRITERS) for i in range(ROUNDS))
        for con in [*writers, designer]:  # on both workers: the new design, every row
            found = con.execute("SELECT id, bal, note FROM acc ORDER BY id").fetchall()
            assert found == want
            assert con.execute("SELECT count(*) FROM acc WHERE bal = 2").fetchone() == (ROUNDS,)
            assert con.execute("SELECT v FROM side_1").fetchall() == [("x",)]
            with pytest.raises(psycopg.errors.UndefinedTable):
                con.execute("SELECT * FROM side_0")
        for con in [*writers, designer]:
            con.close()


def test_pgbench_keeps_tpcb_invariants_across_workers(postgres_url: str, tmp_path: Path) -> None:
    client = empty_client_dir(tmp_path / "client", postgres_url)
    with served_process(client, WORKERS) as (_, port):
        initialize(port, 1)
        dsn = f"host=127.0.0.1 port={port} user=bench dbname=veil"
        done, found = 0, {}
        for mode in ("simple", "prepared"):
            run = run_tpcb(port, Run("veil", mode, 4, 0, per_client=3), max_tries=100)
            done += run.transactions
            assert run.exit_code == 0, run.errors
            assert run.transactions + run.failed == 4 * 3
            with psycopg_query(dsn) as query:
                found[mode] = anomalies(query, 1, done)
        assert found == {"simple": {}, "prepared": {}}
