"""A benchmark query's limits: a deadline that interrupts it, and the client's memory.

``deadline`` interrupts whatever runs past its time (DuckDB's ``interrupt``,
psycopg's ``cancel``) and raises :class:`QueryTimeout`. Memory is read from
``/proc``: a process's resident set now (``VmRSS``) and its high-water mark
(``VmHWM``), which writing 5 to ``/proc/self/clear_refs`` resets (Linux 4.0+),
so one long-lived process can report each query's own peak.
"""

from __future__ import annotations

import contextlib
import re
import resource
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb

from veil.backends import Backend


class QueryTimeout(Exception):
    """A query ran past the benchmark's per-query time limit."""


class MemoryCapExceeded(Exception):
    """Veil's client went past the benchmark's memory cap while running a query."""


@contextlib.contextmanager
def deadline(seconds: float, cancels: list[Callable[[], Any]]) -> Iterator[None]:
    """Interrupt whatever is running after ``seconds``; raise QueryTimeout then."""
    fired = threading.Event()

    def fire() -> None:
        fired.set()
        for cancel in cancels:
            with contextlib.suppress(Exception):
                cancel()

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except Exception as exc:
        if fired.is_set():
            raise QueryTimeout(f"over {seconds:g} s") from exc
        raise
    finally:
        timer.cancel()
    if fired.is_set():  # finished just as the timer fired: still over the limit
        raise QueryTimeout(f"over {seconds:g} s")


def interrupter(backend: Backend) -> Callable[[], Any]:
    """Cancel the statement the backend's connection is running (DuckDB, psycopg, Spark)."""
    cancel = getattr(backend, "cancel", None)
    if callable(cancel):
        return cancel
    con = getattr(backend, "_con", None)
    if isinstance(con, duckdb.DuckDBPyConnection):
        return con.interrupt
    return getattr(con, "cancel", lambda: None)


def _status_kb(pid: int | str, field: str) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) if found else None


def rss_bytes(pid: int) -> int | None:
    """Process ``pid``'s resident set now, or None if it is gone."""
    kb = _status_kb(pid, "VmRSS")
    return None if kb is None else kb * 1024


def reset_peak() -> bool:
    """Start this process's resident high-water mark afresh; False where Linux cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_bytes() -> int:
    """This process's resident high-water mark (since :func:`reset_peak`, where it worked)."""
    kb = _status_kb("self", "VmHWM")
    if kb is None:  # no /proc: the whole process's peak
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb * 1024
