"""A client killed with SIGKILL in the middle of its writes: the server rolls it back.

A worker process (``veil.connect`` on the client directory, or psycopg
through ``veil serve``) updates every even account in a transaction and then
inserts ``ROWS`` accounts at a time, again and again; it is killed with SIGKILL
halfway through its second insert (half the first one's time after the first
ended). Afterwards, on each backend (an embedded DuckDB file, a schema of the
session's PostgreSQL cluster):

- in a transaction: nothing it wrote is left (row count and balance sum as
  loaded, the transfers of the other client aside, which keep the sum);
- in autocommit: each insert is whole or absent (the rows added are a multiple
  of ``ROWS``, each with its balance), never half a statement;
- every row decrypts, no id repeats;
- another client moving money between the even accounts (the rows the killed
  transaction had updated) goes on: during the kill where it can (an embedded
  DuckDB file is one process's, so beside a killed ``veil.connect`` worker it
  runs after), and it completes transfers after the kill.

Anomalies are reported by kind in the assertion message.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pyarrow as pa
import pytest

import veil
from veil.errors import SerializationError
from veil_dev.bench.oltp import served

ACCOUNTS = 1_000
BALANCE = 100
# per insert of the worker: long enough to be killed in the middle. The kill comes half
# the first insert's time into the second, so it lands mid-statement at any size whose
# inserts take alike: 10,000 rows took 1.4-1.8 s each at load 10 (30,000: 3.7-5.3 s)
ROWS = 10_000
FIRST_NEW_ID = 1_000_000
PROGRESS = 5  # transfers the other client must complete after the kill
DEADLINE = 120.0  # seconds for each wait: a bound on a hang, never a speed measure

WORKER = """
import sys, time
via, where, kind, rows, first = sys.argv[1:6]
rows, first = int(rows), int(first)
autocommit = kind == "statement"
if via == "dbapi":
    import veil
    con = veil.connect(where, autocommit=autocommit)
    run = con.cursor().execute
else:
    import psycopg
    con = psycopg.connect(
        f"host=127.0.0.1 port={where} user=killed dbname=veil", autocommit=autocommit
    )
    run = con.execute
if kind == "transaction":
    run("UPDATE acc SET bal = bal + 1 WHERE id % 2 = 0")
print("updated", flush=True)
for k in range(1_000):
    low = first + k * rows
    start = time.perf_counter()
    run(f"INSERT INTO acc SELECT i, 1 FROM generate_series({low}, {low + rows - 1}) AS s(i)")
    print("inserted", k + 1, time.perf_counter() - start, flush=True)
"""


@pytest.fixture
def client(load_tables: Callable[[dict[str, pa.Table]], Path]) -> Path:
    ids = pa.array(range(1, ACCOUNTS + 1), pa.int64())
    balances = pa.array([BALANCE] * ACCOUNTS, pa.int64())
    return load_tables({"acc": pa.table({"id": ids, "bal": balances})})


@pytest.mark.parametrize("kind", ["transaction", "statement"])
@pytest.mark.parametrize("via", ["dbapi", "wire"])
def test_a_killed_writer_leaves_nothing_half_written(
    client: Path, backend_url: str, tmp_path: Path, via: str, kind: str
) -> None:
    beside = via == "wire" or not backend_url.startswith("duckdb:")
    with _served(client, via) as where:
        transfers = _Transfers(client if via == "dbapi" else where)
        found: dict[str, list[str]] = {}
        updated = transfers.start if beside else None
        inserted_before_kill = _kill_in_second_insert(tmp_path, via, where, kind, updated, found)
        if not beside:
            transfers.start()  # the embedded file is free now: the killed process held it
        at_kill = transfers.done
        transfers.wait_for(at_kill + PROGRESS)
        transfers.stop()
        found.update(transfers.anomalies(at_kill))
        found.update(_check(client, kind, inserted_before_kill))
    report = "; ".join(f"{k}: {v}" for k, v in found.items())
    assert not found, f"{via}, {kind}: {report}"


@contextmanager
def _served(client: Path, via: str) -> Iterator[str]:
    """Where the worker connects: the client directory, or a ``veil serve`` port."""
    if via == "dbapi":
        yield str(client)
        return
    with served(client) as port:
        yield port


def _kill_in_second_insert(
    tmp_path: Path,
    via: str,
    where: str,
    kind: str,
    updated: Callable[[], None] | None,
    found: dict[str, list[str]],
) -> int:
    """Run the worker, SIGKILL it halfway through its second insert; inserts it reported.

    ``updated`` is called once the worker's transaction holds its updated rows.
    """
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    args = [sys.executable, str(script), via, where, kind, str(ROWS), str(FIRST_NEW_ID)]
    worker = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert worker.stdout is not None
    lines: list[list[str]] = []
    try:
        while len(lines) < 2:
            line = worker.stdout.readline()
            if not line:
                break
            lines.append(line.split())
            if lines[-1][0] == "updated" and updated is not None:
                updated()
        if len(lines) < 2:
            found["worker failed"] = [worker.communicate(timeout=DEADLINE)[1][-2000:]]
            return 0
        time.sleep(float(lines[1][2]) / 2)  # halfway through the next insert, about
    finally:
        with suppress(ProcessLookupError):  # it may have failed on its own
            os.kill(worker.pid, signal.SIGKILL)
        worker.communicate(timeout=DEADLINE)
    return sum(1 for line in lines if line[0] == "inserted")


class _Transfers:
    """Another client moving 1 between two even accounts, in a transaction, until stopped."""

    def __init__(self, where: Path | str):
        self.where = where
        self.done = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(DEADLINE)
        if self._thread.is_alive():
            self.errors.append(f"still in a transfer {DEADLINE:.0f} s after being stopped")

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + DEADLINE
        while self.done < count and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.05)

    def anomalies(self, at_kill: int) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        if self.errors:
            found["other client's errors"] = self.errors[:5]
        if self.done < at_kill + PROGRESS:
            found["other client stalled"] = [
                f"{self.done - at_kill} transfers in {DEADLINE:.0f} s after the kill"
            ]
        return found

    def _run(self) -> None:
        with self._transfer() as transfer:
            k = 0
            while not self._stop.is_set():
                source, target = 2 + 2 * (k % 10), 4 + 2 * (k % 10)
                try:
                    transfer(source, target)
                    self.done += 1
                    k += 1
                except _RETRYABLE:
                    time.sleep(0.01)  # a collision with another writer: try again
                except Exception as exc:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(0.1)

    @contextmanager
    def _transfer(self) -> Iterator[Callable[[int, int], None]]:
        if isinstance(self.where, Path):
            con = veil.connect(self.where, autocommit=True)

            def through_veil(source: int, target: int) -> None:
                with con.transaction():
                    con.execute(f"UPDATE acc SET bal = bal - 1 WHERE id = {source}")
                    con.execute(f"UPDATE acc SET bal = bal + 1 WHERE id = {target}")

            try:
                yield through_veil
            finally:
                con.close()
            return
        import psycopg

        dsn = f"host=127.0.0.1 port={self.where} user=other dbname=veil"
        with psycopg.connect(dsn, autocommit=True) as wire:

            def through_wire(source: int, target: int) -> None:
                with wire.transaction():
                    wire.execute("UPDATE acc SET bal = bal - 1 WHERE id = %s", (source,))
                    wire.execute("UPDATE acc SET bal = bal + 1 WHERE id = %s", (target,))

            yield through_wire


def _retryable() -> tuple[type[BaseException], ...]:
    import psycopg

    return (SerializationError, psycopg.errors.SerializationFailure)


_RETRYABLE = _retryable()


def _check(client: Path, kind: str, inserted: int) -> dict[str, list[str]]:
    """What the killed worker left that it should not have, by kind."""
    found: dict[str, list[str]] = {}
    try:
        with veil.connect(client) as con:
            table = con.cursor().execute("SELECT id, bal FROM acc").fetch_arrow_table()
    except Exception as exc:
        return {"unreadable": [f"{type(exc).__name__}: {exc}"]}
    ids, balances = table.column("id").to_pylist(), table.column("bal").to_pylist()
    added = len(ids) - ACCOUNTS
    if len(set(ids)) != len(ids):
        found["duplicated id"] = [f"{len(ids)} rows, {len(set(ids))} distinct ids"]
    if None in balances:
        found["lost balance"] = [f"{balances.count(None)} rows without a balance"]
    expected_sum = ACCOUNTS * BALANCE + added  # each inserted row holds 1
    if kind == "transaction" and added != 0:
        found["half-written"] = [f"{added} rows of the killed transaction are left"]
    if kind == "statement" and (added % ROWS or added < inserted * ROWS):
        found["half-written"] = [
            f"{added} rows added: not whole inserts of {ROWS} (it reported {inserted} done)"
        ]
    total = sum(b for b in balances if b is not None)
    if total != expected_sum:
        found["balance sum"] = [f"sum(bal) = {total}, expected {expected_sum}"]
    return found
