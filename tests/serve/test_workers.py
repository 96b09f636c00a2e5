"""``veil serve --workers N`` (issue 41): worker processes on one port, supervised.

Each test starts ``veil serve`` as a user would (a process of its own) over an
empty client directory on a schema of the session's PostgreSQL cluster, with
two workers: a worker killed with SIGKILL is replaced and the server goes on
answering; SIGTERM stops every worker; a supervisor killed with SIGKILL leaves
no worker behind; ``--metrics`` sums the workers' counts. A DuckDB file server
refuses more than one worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from veil_dev.bench.oltp import empty_client_dir, served_process

WORKERS = 2


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (the supervisor's workers)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended while we looked
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _until(done: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.1)


def _count_rows(port: str) -> int:
    with psycopg.connect(f"host=127.0.0.1 port={port} user=u dbname=veil") as con:
        row = con.execute("SELECT count(*) FROM notes").fetchone()
        assert row is not None
        return int(row[0])


def _metric(address: str, name: str) -> float:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = [line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")]
    assert found, f"no {name} in:\n{text}"
    return float(found[0])


@pytest.mark.postgres
def test_a_killed_worker_is_replaced_and_sigterm_stops_all(
    postgres_url: str, tmp_path: Path
) -> None:
    client = empty_client_dir(tmp_path / "client", postgres_url)
    with served_process(client, WORKERS, "--metrics", "127.0.0.1:0") as (server, port):
        assert server.stdout is not None
        lines = [server.stdout.readline() for _ in range(2)]  # psql's line, then metrics'
        metrics = lines[1].split("http://")[1].split("/")[0]
        with psycopg.connect(f"host=127.0.0.1 port={port} user=u dbname=veil") as con:
            con.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
            con.execute("INSERT INTO notes VALUES (1, 'a'), (2, 'b')")
            con.commit()
        workers = _children(server.pid)
        assert len(workers) == WORKERS
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        _until(lambda: _metric(metrics, "veil_worker_restarts_total") == 1)
        _until(lambda: _metric(metrics, "veil_workers") == WORKERS)  # the new one is ready
        assert len(_children(server.pid) - {victim}) == WORKERS
        # every connection now reaches a live worker, old or new
        assert all(_count_rows(port) == 2 for _ in range(2 * WORKERS))
        assert _metric(metrics, 'veil_statements_total{kind="query",outcome="ok"}') >= 1
        workers = _children(server.pid)
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
    assert not any(_alive(pid) for pid in workers)


@pytest.mark.postgres
def test_workers_stop_when_their_supervisor_is_killed(postgres_url: str, tmp_path: Path) -> None:
    client = empty_client_dir(tmp_path / "client", postgres_url)
    with served_process(client, WORKERS) as (server, port):
        with psycopg.connect(f"host=127.0.0.1 port={port} user=u dbname=veil") as con:
            assert con.execute("SELECT 1").fetchone() == (1,)
        workers = _children(server.pid)
        assert len(workers) == WORKERS
        server.kill()
        server.wait(60)
        _until(lambda: not any(_alive(pid) for pid in workers), 30)


def test_a_duckdb_file_server_takes_one_worker(duckdb_url: str, tmp_path: Path) -> None:
    client = empty_client_dir(tmp_path / "client", duckdb_url)
    command = [sys.executable, "-m", "veil.cli", "serve", str(client), "--insecure-local"]
    done = subprocess.run(
        [*command, "--listen", "127.0.0.1:0", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "--workers 2 needs a PostgreSQL server" in done.stderr
    assert "use --workers 1" in done.stderr
