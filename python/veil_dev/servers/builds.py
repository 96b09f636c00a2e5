"""Where the servers this package builds land, and the lock that keeps builds one at a time.

Several test processes (pytest-xdist workers, a benchmark beside a test run) may
ask for the same server at once: one builds under :func:`locked`, the others
wait and then find it :func:`current`.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
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
