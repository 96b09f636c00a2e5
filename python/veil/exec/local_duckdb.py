"""The client's own DuckDB, closed to the files, network and extensions of the trusted side.

The local engine finishes split plans beside the key file, on statements
that users of ``veil serve`` write; it must see only the Arrow tables Veil
registers. DuckDB enforces the part a setting can say: no file or network
access (``enable_external_access``, which cannot be turned back on while the
database runs), no extension installed or loaded, and the configuration
locked, so no statement can loosen either. ``veil.sql.sandbox`` refuses the
rest before planning.

``external_access=True`` is the application's own opt-in (the DB-API's
``veil.connect(..., external_access=True)``): DuckDB as it comes, which reads
any file the application's account can.

Memory. The sessions of one process finish their plans in ONE local engine
(``local_engine``: each session a connection of its own, whose registered
tables and temporary views no other sees), so the process keeps one stated
limit however many sessions it serves: ``VEIL_MEMORY_LIMIT`` (``4GB``,
``512MiB``, or a share of the machine such as ``25%``), by default half the
memory of the machine (or of its cgroup). Past it DuckDB spills sorts, joins
and aggregates to a private temporary directory (mode 0700, removed when the
process ends; it holds plaintext, as the client's memory does), and what
cannot spill fails with ``OutOfMemoryError`` instead of growing until the
system kills the process. A process that is killed cannot remove its
directory, so the directory is named by its process id and the next process
that makes one removes those whose process is gone (``sweep_spills``).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

import duckdb

from veil.errors import ParameterError

_LOCKED = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "lock_configuration": True,
}

DEFAULT_SHARE = 0.5  # of the machine's memory: the rest is the fetched Arrow tables' and others'
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|[kmgt]i?b|b|bytes)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


def local_duckdb(*, external_access: bool = False) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB of its own (the plaintext catalogue, a scratch binder)."""
    if external_access:
        return duckdb.connect()
    return duckdb.connect(config=dict(_LOCKED))


class _Engines:
    """The process's local engines, one per (external access, memory limit)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[bool, int], duckdb.DuckDBPyConnection] = {}
        self._spill: str | None = None
        self._spill_lock = threading.Lock()

    def connection(self, external_access: bool, limit: int) -> duckdb.DuckDBPyConnection:
        with self._lock:
            engine = self._open.get((external_access, limit))
            if engine is None:
                config: dict[str, str | bool | int | float | list[str]] = (
                    {} if external_access else dict(_LOCKED)
                )
                config["memory_limit"] = f"{limit}B"
                config["temp_directory"] = self.spill_directory()
                engine = self._open[(external_access, limit)] = duckdb.connect(config=config)
            return engine.cursor()

    def spill_directory(self) -> str:
        with self._spill_lock:
            if self._spill is None:
                sweep_spills(Path(tempfile.gettempdir()))
                # mode 0700
                self._spill = tempfile.mkdtemp(prefix=f"{_SPILL_PREFIX}{os.getpid()}-")
                atexit.register(shutil.rmtree, self._spill, ignore_errors=True)
            return self._spill


_SPILL_PREFIX = "veil-spill-"
_SPILL_NAME = re.compile(rf"^{_SPILL_PREFIX}(\d+)-")


def sweep_spills(directory: Path) -> list[Path]:
    """Remove this user's spill directories in ``directory`` whose process has ended.

    A killed client (SIGKILL, the kernel's OOM killer) leaves gigabytes of
    plaintext sorts behind; the name's process id says whose a directory is.
    A live process's directory, another user's, or one named otherwise is left.
    """
    removed = []
    for entry in directory.glob(f"{_SPILL_PREFIX}*"):
        found = _SPILL_NAME.match(entry.name)
        try:
            mine = entry.is_dir() and entry.stat().st_uid == os.getuid()
        except OSError:
            continue
        if found is None or not mine or _alive(int(found.group(1))):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


_ENGINES = _Engines()


def source_duckdb() -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB that reads what a load, re-key or redesign encrypts (the user's
    own files, or rows registered from the old table), under the process's memory limit
    (``memory_limit_bytes``) and spilling to the private directory past it.

    Without a limit DuckDB takes 80% of the machine before it spills: ordering TPC-H SF 10's
    lineitem (60M rows) for its load grew the process to 18 GB beside other work, and the
    kernel killed it.
    """
    return duckdb.connect(
        config={
            "memory_limit": f"{memory_limit_bytes()}B",
            "temp_directory": _ENGINES.spill_directory(),
        }
    )


def local_engine(
    *, external_access: bool = False, memory_limit: str | None = None
) -> duckdb.DuckDBPyConnection:
    """A new connection to the process's local engine for finishing plans.

    ``memory_limit``: the engine's (``memory_limit_bytes``); sessions asking for
    another limit share another engine.
    """
    return _ENGINES.connection(external_access, memory_limit_bytes(memory_limit))


def memory_limit_bytes(setting: str | None = None) -> int:
    """The local engine's limit: ``setting``, else ``VEIL_MEMORY_LIMIT``, else half the
    machine's memory (``DEFAULT_SHARE``)."""
    text = setting if setting is not None else os.environ.get("VEIL_MEMORY_LIMIT", "")
    if not text.strip():
        return int(machine_memory() * DEFAULT_SHARE)
    found = _SIZE.match(text)
    if found is None:
        raise ParameterError(
            f"memory limit {text!r} is not a size: give bytes with a unit (4GB, 512MiB) "
            "or a share of the machine's memory (25%)"
        )
    number, unit = float(found.group(1)), (found.group(2) or "b").lower()
    size = machine_memory() * number / 100 if unit == "%" else number * _UNITS[unit]
    if size < 2**24:
        raise ParameterError(f"memory limit {text!r} is below 16 MiB: DuckDB cannot run in it")
    return int(size)


def machine_memory() -> int:
    """Physical memory, or this process's cgroup limit when that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def describe_bytes(size: int) -> str:
    """``size`` as people read it (9.4 GiB)."""
    value, unit = float(size), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{value:.1f} {unit}" if unit != "bytes" else f"{size} bytes"
