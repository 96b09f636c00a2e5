"""A private FerretDB (MongoDB wire protocol over SQLite) for tests, benchmarks and demos.

FerretDB 1.24 is built from its Go module by the project's own small ``main``
(``servers/ferretdb/main.go``: FerretDB's ``cmd/ferretdb`` panics when
installed from the module, its generated version file being absent). The
binary lands in ``target/ferretdb/`` and is rebuilt only when the Go sources
change; a file lock keeps two processes from building at once.

A server directory holds the SQLite files (``data/``), the log
(``ferretdb.log``) and ``server.json`` with the pid and port of the running
server, so ``veil documents server stop DIR`` can find it again.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from veil.errors import VeilError
from veil.servers.ports import free_port, port_open

FERRETDB_VERSION = "1.24.2"
ROOT = Path(__file__).resolve().parents[3]
GO_SOURCES = ROOT / "servers" / "ferretdb"
BUILD_DIR = ROOT / "target" / "ferretdb"
BINARY = BUILD_DIR / f"veil-ferretdb-{FERRETDB_VERSION}"
GO_CANDIDATES = ("/usr/local/go/bin/go", "/usr/lib/go/bin/go")
START_TIMEOUT_S = 30.0
BUILD_TIMEOUT_S = 1500.0


class FerretDBUnavailableError(VeilError):
    """FerretDB could not be built or started (Go missing, build failed, no port)."""

    anchor = "server-unavailable"


def find_go() -> str:
    """The ``go`` command: on PATH, or Go's usual install directories."""
    on_path = shutil.which("go")
    for candidate in ([on_path] if on_path else []) + list(GO_CANDIDATES):
        if candidate and Path(candidate).exists():
            return candidate
    raise FerretDBUnavailableError(
        "Go is needed to build FerretDB but no `go` command was found (looked on PATH and in "
        f"{', '.join(GO_CANDIDATES)}); install Go 1.24 or later"
    )


def build(force: bool = False) -> Path:
    """Build the FerretDB binary if it is missing or older than its Go sources."""
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with _locked(BUILD_DIR / ".build.lock"):
        if not force and _current():
            return BINARY
        env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN=os.environ.get("GOTOOLCHAIN", "auto"))
        partial = BINARY.with_suffix(".partial")
        command = [find_go(), "build", "-trimpath", "-buildvcs=false", "-o", str(partial), "."]
        result = subprocess.run(
            command, cwd=GO_SOURCES, env=env, capture_output=True, text=True,
            timeout=BUILD_TIMEOUT_S, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise FerretDBUnavailableError(
                f"building FerretDB failed (exit {result.returncode}): {result.stderr[-2000:]}"
            )
        partial.replace(BINARY)
    return BINARY


def _current() -> bool:
    if not BINARY.exists():
        return False
    sources = [p for p in GO_SOURCES.iterdir() if p.suffix in (".go", ".mod", ".sum")]
    return BINARY.stat().st_mtime >= max(p.stat().st_mtime for p in sources)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class FerretDBServer:
    """One FerretDB process over one directory; ``start`` it, ``stop`` it when done."""

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
        return self.directory / "ferretdb.log"

    def start(self, port: int = 0, *, stop_at_exit: bool = True) -> FerretDBServer:
        """Build if need be, start on ``port`` (a free one by default), wait until it answers.

        The server is stopped when this process exits unless ``stop_at_exit`` is false
        (``veil documents server start`` leaves it running).
        """
        binary = build()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        with open(self.log_path, "ab") as log:
            process = subprocess.Popen(
                [str(binary), "-listen", f"127.0.0.1:{self.port}", "-dir", str(self.data_dir)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        self.pid, self._process = process.pid, process
        if stop_at_exit:
            atexit.register(self.stop)  # an interrupted run must not leave a server behind
        self._wait_ready(process)
        (self.directory / "server.json").write_text(
            json.dumps({"pid": self.pid, "port": self.port, "version": FERRETDB_VERSION})
        )
        return self

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise FerretDBUnavailableError(
                    f"FerretDB exited at start (code {process.returncode}): "
                    f"{self.read_log()[-2000:]}"
                )
            if port_open("127.0.0.1", self.port):
                return
            time.sleep(0.05)
        self.stop()
        raise FerretDBUnavailableError(f"FerretDB did not listen within {START_TIMEOUT_S:.0f} s")

    @classmethod
    def running(cls, directory: str | os.PathLike[str]) -> FerretDBServer | None:
        """The server recorded in ``directory/server.json`` if its process is alive."""
        server = cls(directory)
        try:
            state = json.loads((server.directory / "server.json").read_text())
            os.kill(int(state["pid"]), 0)
        except (OSError, ValueError, KeyError):
            return None
        server.pid, server.port = int(state["pid"]), int(state["port"])
        return server

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 10 s); safe to call twice."""
        atexit.unregister(self.stop)
        if not self.pid:
            return
        pid, self.pid = self.pid, 0
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.05)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self._process is not None:
            self._process.wait()
            self._process = None
        with contextlib.suppress(FileNotFoundError):
            (self.directory / "server.json").unlink()

    def read_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def sqlite_files(self) -> list[Path]:
        """Every file FerretDB keeps its data in (the canary tests read them)."""
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
