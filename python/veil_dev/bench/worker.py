"""Veil's side of an analytic benchmark in a child process: timed, capped, measured.

A query that runs away must not take the benchmark (or the machine) with it:
before a fix, TPC-DS q54 and q81 grew the client's local DuckDB past 14 GB.
So Veil's session lives in a child process (spawned: no DuckDB or threads
inherited across a fork) that keeps it warm across queries and runs, and the
parent watches it:

- each run has a deadline (``limits.deadline`` in the child interrupts the
  server statement and the local plan); a child that does not answer within
  the deadline and a grace period is killed: ``timeout``;
- the child's resident memory is read every 50 ms; past ``memory_cap`` bytes
  it is killed: ``memory``. The child's session gets a memory limit of three
  quarters of the cap (``Session(memory_limit=)``), so that its local DuckDB spills
  or fails (Veil's OutOfMemoryError: also ``memory``) before;
- each run reports the child's peak resident memory during that run (its
  ``VmHWM``, reset before the run), the client's whole footprint: keys,
  decrypted columns, the local DuckDB.

A killed child is replaced by a fresh one (a new session) for the next query.

With ``calibrate`` (a benchmark over a link) the child first calibrates the cost
model through the session's own server URL (``veil calibrate``'s measures: a
statement's round trip, the fetch rate, decryption): the link's round trips and
bandwidth become the model's, and the planner chooses plans by cost for that link.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pyarrow as pa

from veil.exec.server import FetchStats
from veil_dev.bench.limits import (
    MemoryCapExceeded,
    QueryTimeout,
    deadline,
    interrupter,
    peak_bytes,
    reset_peak,
    rss_bytes,
)

GRACE_SECONDS = 30.0  # after the deadline, for the interrupt to land, before a kill
POLL_SECONDS = 0.05


@dataclass
class VeilRun:
    seconds: float
    table: pa.Table
    stats: FetchStats
    fallback: str | None  # the plan's fallback: why Veil fetched whole tables, if it did
    peak_bytes: int


class VeilWorker:
    """A child process holding one Veil session over ``client_dir``."""

    def __init__(
        self, client_dir: Path, timeout: float, memory_cap: int, *, calibrate: bool = False
    ) -> None:
        self.client_dir, self.timeout, self.memory_cap = client_dir, timeout, memory_cap
        self.calibrate = calibrate
        self._context = multiprocessing.get_context("spawn")
        self._process: Any = None
        self._conn: Connection | None = None

    def _start(self) -> Connection:
        if self._conn is not None:
            return self._conn
        parent, child = self._context.Pipe()
        limit = self.memory_cap * 3 // 4
        args = (child, str(self.client_dir), self.timeout, limit, self.calibrate)
        self._process = self._context.Process(target=_serve, args=args, daemon=True)
        self._process.start()
        child.close()
        self._conn = parent
        self._ready(parent)
        return parent

    def _ready(self, conn: Connection) -> None:
        """Wait for the child's session (and calibration) outside any query's deadline:
        calibrating over a slow link takes longer than a query may."""
        while not conn.poll(POLL_SECONDS):
            if not self._process.is_alive():
                code = self._process.exitcode
                self._kill()
                raise RuntimeError(f"the client process died at start (exit {code})")
        kind, value = conn.recv()
        if kind != "ready":
            self._kill()
            raise RuntimeError(value)

    def run(self, sql: str) -> VeilRun:
        """One run of ``sql``; QueryTimeout, MemoryCapExceeded or RuntimeError when it fails."""
        try:
            return self._run(sql)
        except (OSError, EOFError) as exc:  # the child died at start or mid-answer
            self._kill()
            raise RuntimeError(f"the client process failed: {exc}") from exc

    def _run(self, sql: str) -> VeilRun:
        conn = self._start()
        conn.send(sql)
        started = time.monotonic()
        while not conn.poll(POLL_SECONDS):
            rss = rss_bytes(self._process.pid)
            if rss is None or not self._process.is_alive():
                code = self._process.exitcode
                self._kill()
                if code == -signal.SIGKILL:  # not ours: the kernel's out-of-memory killer
                    raise MemoryCapExceeded("the client process was killed (out of memory?)")
                raise RuntimeError(f"the client process died (exit {code})")
            if rss > self.memory_cap:
                self._kill()
                raise MemoryCapExceeded(f"client over {self.memory_cap / 2**30:g} GiB")
            if time.monotonic() - started > self.timeout + GRACE_SECONDS:
                self._kill()
                raise QueryTimeout(f"over {self.timeout:g} s (killed)")
        kind, value = conn.recv()
        if kind == "ok" and value.peak_bytes > self.memory_cap:  # between two looks
            self._kill()
            raise MemoryCapExceeded(f"client peaked over {self.memory_cap / 2**30:g} GiB")
        if kind == "ok":
            return value
        if kind == "timeout":
            raise QueryTimeout(value)
        if kind == "memory":
            raise MemoryCapExceeded(value)
        raise RuntimeError(value)

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn = None, None

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError, BrokenPipeError):
                self._conn.send(None)
            self._process.join(timeout=30)
        self._kill()


def _serve(
    conn: Connection, client_dir: str, timeout: float, local_limit: int, calibrate: bool
) -> None:
    """The child: one session, one query at a time, until None arrives."""
    from veil.cost.calibration import calibration_of
    from veil.session.session import Session

    try:
        session = Session(client_dir, memory_limit=f"{local_limit}B")
        if calibrate:  # once per client directory: a restarted child finds it saved
            calibration_of(session)
    except Exception as exc:
        conn.send(("error", f"the session could not start: {type(exc).__name__}: {exc}"[:300]))
        return
    conn.send(("ready", None))
    try:
        while (sql := conn.recv()) is not None:
            conn.send(_one_run(session, sql, timeout))
    finally:
        session.close()


def _one_run(session: Any, sql: str, timeout: float) -> tuple[str, object]:
    reset_peak()
    cancels = [interrupter(session.backend), session.local.interrupt]
    try:
        with deadline(timeout, cancels):
            started = time.perf_counter()
            result = session.run(sql)
            seconds = time.perf_counter() - started
    except QueryTimeout as exc:
        return "timeout", str(exc)
    except Exception as exc:  # the benchmark records a failure and goes on
        memory = type(exc).__name__ in ("OutOfMemoryError", "MemoryError")
        kind = "memory" if memory or "out of memory" in str(exc).lower() else "error"
        return kind, f"{type(exc).__name__}: {exc}"[:300]
    fallback = describe(getattr(result.plan, "fallback", None))
    return "ok", VeilRun(seconds, result.table, result.stats, fallback, peak_bytes())


def describe(fallback: object) -> str | None:
    """A plan's fallback in words, for the JSON: ``run/binder: <detail>``, and whether its
    shape is on the planner's documented list of shapes Veil cannot split."""
    if fallback is None:
        return None
    stage, shape = getattr(fallback, "stage", "?"), getattr(fallback, "shape", "?")
    documented = " (documented)" if getattr(fallback, "documented", False) else ""
    return f"{stage}/{shape}{documented}: {fallback}"[:300]
