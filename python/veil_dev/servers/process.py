"""One server process over one directory, started, found again and stopped the same way.

:class:`ServerProcess` holds what the MongoDB-wire servers of this package
share: the process starts in a session of its own with its output in a log
file, :meth:`~ServerProcess.start` waits until its port answers (or the
process exits), ``server.json`` records its kind, pid and port so that another
process (``veil documents server stop DIR``) can find it, and
:meth:`~ServerProcess.stop` sends SIGTERM, then SIGKILL. A subclass says how
to build the server and which command runs it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Self

from veil.errors import VeilError
from veil_dev.servers.ports import free_port, port_open

RECORD = "server.json"
# Records written before a second kind of server existed name no kind: FerretDB's.
FIRST_KIND = "ferretdb"


def recorded(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``directory``'s server record (kind filled in), or None if there is none."""
    try:
        state = json.loads((Path(directory) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return {"kind": FIRST_KIND, **state} if isinstance(state, dict) else None


class ServerProcess(ABC):
    """A server process of one ``kind`` over one directory; ``start`` it, ``stop`` it when done."""

    kind: ClassVar[str]  # recorded in server.json: which class finds the server again
    name: ClassVar[str]  # for messages
    version: ClassVar[str]
    log_name: ClassVar[str]
    error: ClassVar[type[VeilError]]
    start_timeout_s: ClassVar[float] = 30.0
    stop_timeout_s: ClassVar[float] = 10.0  # after SIGTERM, before SIGKILL

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.port = 0
        self.pid = 0
        self._process: subprocess.Popen[bytes] | None = None  # kept: waited on at stop

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_path(self) -> Path:
        return self.directory / self.log_name

    @abstractmethod
    def prepare(self) -> None:
        """Build or fetch what :meth:`command` runs, if need be."""

    @abstractmethod
    def command(self) -> list[str]:
        """The command that serves :attr:`data_dir` on 127.0.0.1 at :attr:`port`."""

    def start(self, port: int = 0, *, stop_at_exit: bool = True) -> Self:
        """Build if need be, start on ``port`` (a free one by default), wait until it answers.

        The server is stopped when this process exits unless ``stop_at_exit`` is false
        (``veil documents server start`` leaves it running).
        """
        self.prepare()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        with open(self.log_path, "ab") as log:
            process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives the CLI that started it; no terminal signals
            )  # fmt: skip
        self.pid, self._process = process.pid, process
        if stop_at_exit:
            atexit.register(self.stop)  # an interrupted run must not leave a server behind
        self._wait_ready(process)
        record = {"kind": self.kind, "pid": self.pid, "port": self.port, "version": self.version}
        (self.directory / RECORD).write_text(json.dumps(record))
        return self

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise self.error(
                    f"{self.name} exited at start (code {process.returncode}): "
                    f"{self.read_log()[-2000:]}"
                )
            if port_open("127.0.0.1", self.port):
                return
            time.sleep(0.05)
        self.stop()
        raise self.error(
            f"{self.name} did not listen within {self.start_timeout_s:.0f} s; it was stopped. "
            f"Its log is {self.log_path}"
        )

    @classmethod
    def running(cls, directory: str | os.PathLike[str]) -> Self | None:
        """The server of this kind recorded in ``directory/server.json`` if its process is alive."""
        server = cls(directory)
        state = recorded(directory)
        if state is None or state["kind"] != cls.kind:
            return None
        try:
            pid, port = int(state["pid"]), int(state["port"])
            os.kill(pid, 0)
        except (OSError, ValueError, KeyError):
            return None
        server.pid, server.port = pid, port
        return server

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after a while); safe to call twice."""
        atexit.unregister(self.stop)
        if not self.pid:
            return
        pid, self.pid = self.pid, 0
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + self.stop_timeout_s
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.05)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self._process is not None:
            self._process.wait()
            self._process = None
        with contextlib.suppress(FileNotFoundError):
            (self.directory / RECORD).unlink()

    def read_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def data_files(self) -> list[Path]:
        """Every file the server keeps its data in (the canary tests read them)."""
        return sorted(p for p in self.data_dir.rglob("*") if p.is_file())


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass  # not our child (started by another process): ask the kernel
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
