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

import os
import subprocess
from pathlib import Path

from veil.errors import VeilError
from veil_dev.servers.builds import ROOT, TARGET, announced, current, go_command, locked
from veil_dev.servers.process import ServerProcess

FERRETDB_VERSION = "1.24.2"
GO_SOURCES = ROOT / "servers" / "ferretdb"
BUILD_DIR = TARGET / "ferretdb"
BINARY = BUILD_DIR / f"veil-ferretdb-{FERRETDB_VERSION}"
START_TIMEOUT_S = 30.0
BUILD_TIMEOUT_S = 1500.0


class FerretDBUnavailableError(VeilError):
    """FerretDB could not be built or started (Go missing, build failed, no port)."""

    anchor = "server-unavailable"


def find_go() -> str:
    """The ``go`` command, or FerretDBUnavailableError saying that building it needs Go."""
    return go_command("FerretDB", FerretDBUnavailableError)


def build(force: bool = False) -> Path:
    """Build the FerretDB binary if it is missing or older than its Go sources."""
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with locked(BUILD_DIR / ".build.lock"):
        if not force and _current():
            return BINARY
        env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN=os.environ.get("GOTOOLCHAIN", "auto"))
        partial = BINARY.with_suffix(".partial")
        command = [find_go(), "build", "-trimpath", "-buildvcs=false", "-o", str(partial), "."]
        with announced(f"FerretDB {FERRETDB_VERSION} with Go", "about 1-4 minutes"):
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
    sources = [p for p in GO_SOURCES.iterdir() if p.suffix in (".go", ".mod", ".sum")]
    return current(BINARY, sources)


class FerretDBServer(ServerProcess):
    """One FerretDB process over one directory; ``start`` it, ``stop`` it when done."""

    kind = "ferretdb"
    name = "FerretDB"
    version = FERRETDB_VERSION
    log_name = "ferretdb.log"
    error = FerretDBUnavailableError
    start_timeout_s = START_TIMEOUT_S

    def prepare(self) -> None:
        build()

    def command(self) -> list[str]:
        return [str(BINARY), "-listen", f"127.0.0.1:{self.port}", "-dir", str(self.data_dir)]

    def sqlite_files(self) -> list[Path]:
        """Every file FerretDB keeps its data in (the canary tests read them)."""
        return self.data_files()
