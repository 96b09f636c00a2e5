"""Where the servers this package builds land, and the lock that keeps builds one at a time.

Several test processes (pytest-xdist workers, a benchmark beside a test run) may
ask for the same server at once: one builds under :func:`locked`, the others
wait and then find it :func:`current`.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TARGET = ROOT / "target"
GO_CANDIDATES = ("/usr/local/go/bin/go", "/usr/lib/go/bin/go")


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if need be) for the ``with`` block."""
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def announced(what: str, expected: str, every_s: float = 30.0) -> Iterator[None]:
    """Say on stderr that ``what`` is being built, every ``every_s`` that it still is, and its time.

    A first build runs for minutes with its tool's output captured; without these lines
    a newcomer's `veil documents server start` or `make test` looked hung.
    """
    start = time.monotonic()
    print(f"veil: building {what} (first use only; {expected})...", file=sys.stderr, flush=True)
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(every_s):
            elapsed = time.monotonic() - start
            print(
                f"veil:   ... still building {what}, {elapsed:.0f} s", file=sys.stderr, flush=True
            )

    beat = threading.Thread(target=heartbeat, name=f"build {what}", daemon=True)
    beat.start()
    try:
        yield
    finally:
        done.set()
        beat.join()
    print(f"veil: built {what} in {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)


def current(built: Path, sources: Iterable[Path]) -> bool:
    """Whether ``built`` exists and is no older than any of ``sources``."""
    if not built.exists():
        return False
    return built.stat().st_mtime >= max(p.stat().st_mtime for p in sources)


def go_command(building: str, error: type[Exception]) -> str:
    """The ``go`` command: on PATH, or Go's usual install directories; else ``error``."""
    on_path = shutil.which("go")
    for candidate in ([on_path] if on_path else []) + list(GO_CANDIDATES):
        if candidate and Path(candidate).exists():
            return candidate
    raise error(
        f"Go is needed to build {building} but no `go` command was found (looked on PATH and "
        f"in {', '.join(GO_CANDIDATES)}); install Go 1.24 or later"
    )
