"""Stop a server when the process that started it dies, however it dies.

``atexit`` handlers run only when Python exits normally; a test run or
benchmark killed with SIGKILL (a CI timeout, the OOM killer, a user's kill -9)
left its PostgreSQL clusters running, each holding shared buffers and a
port, until the machine restarted. :func:`stop_when_gone` starts a small
watcher that holds the read end of a pipe whose write end only the starting
process holds: the kernel closes it when that process ends, by any signal,
and the watcher then runs the server's stop command and removes its files.
A normal stop does the same first, so the watcher then finds nothing to do.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# The watcher is a POSIX shell, not Python: run as PostgreSQL's service user it
# may not read this interpreter's installation. ``cat`` returns at EOF, once
# every holder of the write end has exited.
_WATCHER = 'cat >/dev/null; dir=$1; shift; [ -d "$dir" ] || exit 0; (cd "$dir" && "$@") >/dev/null 2>&1; rm -rf "$dir"'


_WAITING: list[subprocess.Popen[bytes]] = []


class Lifeline:
    """The write end of a watcher's pipe; ``cut`` it once the server is stopped."""

    def __init__(self, watcher: subprocess.Popen[bytes], write_end: int) -> None:
        self._watcher = watcher
        self._write_end: int | None = write_end

    def cut(self) -> None:
        """Close this process's end and wait for the watcher, which finds its server's
        directory gone and exits."""
        if self._write_end is not None:
            os.close(self._write_end)
            self._write_end = None
            try:
                self._watcher.wait(timeout=5)
            except subprocess.TimeoutExpired:
                # A forked child of this process still holds the write end; the watcher
                # ends with it. Kept referenced so that it is not reported as leaked.
                _WAITING.append(self._watcher)


def stop_when_gone(stop: list[str], directory: Path, *, user: str | None = None) -> Lifeline:
    """Run ``stop`` (as ``user``) in ``directory`` and remove ``directory`` once this process
    has ended, unless ``directory`` is gone by then.

    The watcher runs in a session of its own, so a signal to this process's
    group (Ctrl-C in a terminal) does not stop it before its work.
    """
    read_end, write_end = os.pipe()  # not inherited by exec'd children (O_CLOEXEC)
    try:
        watcher = subprocess.Popen(
            ["/bin/sh", "-c", _WATCHER, "lifeline", str(directory), *stop],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            user=user,
        )
    finally:
        os.close(read_end)
    return Lifeline(watcher, write_end)
