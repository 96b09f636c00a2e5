"""A session's shared table locks keep their files open between writes (issue 41).

Released, a kept file excludes nobody: a rebuild's exclusive lock gets it at
once; held, the rebuild waits. Each table's file is opened once per session.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from veil.session import table_locks
from veil.session.table_locks import SharedLocks

_OPEN = table_locks.lock_file  # not the counting one a test puts in its place


def _free(client_dir: Path, table: str) -> bool:
    """Whether another open file of ``table``'s lock could hold it alone right now."""
    fd = _OPEN(client_dir, table)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_a_released_lock_keeps_its_file_and_excludes_nobody(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []

    def counted(client_dir: Path, table: str) -> int:
        opened.append(table)
        return _OPEN(client_dir, table)

    monkeypatch.setattr(table_locks, "lock_file", counted)
    locks = SharedLocks(tmp_path)
    for _ in range(3):
        assert locks.take("orders") and not locks.take("orders")
        assert not _free(tmp_path, "orders")  # a rebuild waits for the writer
        locks.release()
        assert _free(tmp_path, "orders")
    assert opened.count("orders") == 1
    locks.take("lineitem")
    locks.close()
    assert _free(tmp_path, "lineitem") and not locks.held


def test_past_its_limit_a_session_closes_the_files_it_does_not_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table_locks, "_KEPT_OPEN", 2)
    locks = SharedLocks(tmp_path)
    locks.take("a")
    locks.take("b")
    locks.release("b")
    locks.take("c")  # "b" is closed, "a" (held) stays
    assert sorted(locks._open) == ["a", "c"] and not _free(tmp_path, "a")
    locks.close()
    assert not locks._open and _free(tmp_path, "a")
