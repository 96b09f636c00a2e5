"""``audit.jsonl``: one JSON line per statement, appended, never rewritten.

Several connections, threads and processes append at once. Each line leaves
in one ``write()`` on a descriptor opened with ``O_APPEND``, under an
exclusive ``flock`` of the file, so lines never interleave. A process that
dies in the middle of a write leaves at most one partial last line: the next
writer first ends it with a newline (so its own line starts clean), and
readers skip any line that is not a whole JSON object.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

AUDIT_FILE = "audit.jsonl"


class AuditLog:
    """The append side of a client directory's audit log (the file is created mode 0600)."""

    def __init__(self, client_dir: str | os.PathLike[str]):
        self.path = Path(client_dir) / AUDIT_FILE
        self._fd = self._open()
        self._lock = threading.Lock()  # flock is per open file: threads take turns here

    def _open(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)

    def record(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one line (an ``Observer``'s sink)."""
        line = (json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        with self._lock:
            if _moved(self.path, self._fd):  # rotated away (docs/ops.md): a new log
                os.close(self._fd)
                self._fd = self._open()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                if _ends_partial(self._fd):
                    line = b"\n" + line  # a writer died mid-line: that line stays apart
                _write_all(self._fd, line)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _moved(path: Path, fd: int) -> bool:
    """Whether ``path`` no longer names the file open as ``fd`` (moved away or removed)."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return True
    held = os.fstat(fd)
    return (named.st_ino, named.st_dev) != (held.st_ino, held.st_dev)


def _ends_partial(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _write_all(fd: int, data: bytes) -> None:
    while data:  # a regular file takes it whole; a full disk may not
        data = data[os.write(fd, data) :]


def read_records(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """The whole records of the log at ``path``, and how many damaged lines were skipped."""
    records, damaged = [], 0
    for line in _lines(Path(path)):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            damaged += 1
    return records, damaged


def _lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as file:
        for line in file:
            if line.strip():
                yield line  # an unfinished last line fails to parse and is skipped
