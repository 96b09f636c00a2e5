"""A throwaway PostgreSQL 15 cluster for tests and benchmarks.

``initdb`` + ``pg_ctl`` on a free loopback port, trust authentication for the
superuser ``veil`` over TCP only, ``log_statement=all`` into ``log_path`` (the
canary tests read it), durability switched off (the data is disposable).

PostgreSQL's server binaries refuse to run as root. Run as root, the cluster
belongs to a system user ``veil-pg`` (created with ``useradd`` if missing) and
lives in a directory of its own under the system temp dir, since pytest's
per-user temp dirs are closed to other users.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from veil.backends.base import ServerUnavailableError
from veil_dev.servers.lifeline import Lifeline, stop_when_gone
from veil_dev.servers.ports import free_port

PG_BIN_CANDIDATES = ("/usr/lib/postgresql/15/bin",)
SERVICE_USER = "veil-pg"
SUPERUSER = "veil"
EXTENSION_INSTALLER = Path(__file__).resolve().parents[3] / "scripts/postgres/install_extension.sh"
# the C sources ship inside veil (veil.backends.pgext); the tooling only builds them
EXTENSION_SOURCES = Path(__file__).resolve().parents[2] / "veil" / "backends" / "pgext"

_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "log_statement": "'all'",
    "log_min_messages": "warning",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "wal_level": "minimal",  # a COPY into a table created in its transaction skips WAL
    "max_wal_senders": "0",
    "max_connections": "40",
    "shared_buffers": "'256MB'",
    "work_mem": "'64MB'",
}


def find_bin_dir() -> Path:
    """The directory holding PostgreSQL 15's initdb, pg_ctl and postgres."""
    override = os.environ.get("VEIL_PG_BIN")
    for candidate in ([override] if override else []) + list(PG_BIN_CANDIDATES):
        if (Path(candidate) / "pg_ctl").exists() and (Path(candidate) / "initdb").exists():
            return Path(candidate)
    raise ServerUnavailableError(
        "PostgreSQL 15 server binaries not found in /usr/lib/postgresql/15/bin; run "
        "`make pgext` (installs postgresql-15 and Veil's extension) or set VEIL_PG_BIN"
    )


def extension_current(bin_dir: Path | None) -> bool:
    """Is Veil's extension installed, and no older than its sources in this checkout?"""
    control = _pg_dir(bin_dir, "--sharedir", "/usr/share/postgresql/15") / "extension/veil.control"
    library = _pg_dir(bin_dir, "--pkglibdir", "/usr/lib/postgresql/15/lib") / "veil.so"
    if not (control.exists() and library.exists()):
        return False
    sources = [p for p in EXTENSION_SOURCES.iterdir() if p.suffix in (".c", ".sql", ".control")]
    newest_source = max((p.stat().st_mtime for p in sources), default=0.0)
    return library.stat().st_mtime >= newest_source


def _pg_dir(bin_dir: Path | None, option: str, debian_default: str) -> Path:
    pg_config = bin_dir / "pg_config" if bin_dir else None
    if pg_config is None or not pg_config.exists():
        return Path(debian_default)
    answer = subprocess.run([str(pg_config), option], capture_output=True, text=True, check=False)
    return Path(answer.stdout.strip() or debian_default)


def install_extension() -> None:
    """Build and install Veil's C extension (and PostgreSQL itself if absent)."""
    subprocess.run(["bash", str(EXTENSION_INSTALLER)], check=True)


class ThrowawayCluster:
    """One disposable PostgreSQL cluster; ``start`` it, ``stop`` it when done."""

    def __init__(
        self,
        directory: Path | None = None,
        *,
        extension: bool = True,
        settings: dict[str, str] | None = None,
    ) -> None:
        self._as_root = os.geteuid() == 0
        self._extension = extension  # False: never build or install Veil's extension
        self._settings = {**_SETTINGS, **(settings or {})}
        if self._as_root or directory is None:
            directory = Path(tempfile.mkdtemp(prefix="veil-pg-"))
        self.directory = directory
        self.data_dir = directory / "data"
        self.log_path = directory / "postgres.log"
        self.port = 0
        self._bin = Path()  # found by start(), after installing PostgreSQL if need be
        self._lifeline: Lifeline | None = None

    @property
    def url(self) -> str:
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """Install PostgreSQL 15 (and Veil's extension, if wanted) if missing or stale; start."""
        try:
            bin_dir: Path | None = find_bin_dir()
        except ServerUnavailableError:
            bin_dir = None
        if bin_dir is None or (self._extension and not extension_current(bin_dir)):
            install_extension()
        self._bin = find_bin_dir()
        if self._as_root:
            _ensure_service_user()
            shutil.chown(self.directory, SERVICE_USER, SERVICE_USER)
        self._run("initdb", "-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8")
        self._write_settings()
        # a killed test run or bench, which runs no atexit handler, must not leave it behind
        self._lifeline = stop_when_gone(
            [str(self._bin / "pg_ctl"), "stop", "-m", "immediate", "-D", str(self.data_dir)],
            self.directory,
            user=SERVICE_USER if self._as_root else None,
        )
        self.port = free_port()
        atexit.register(self.stop)  # a crashed test run must not leave a server behind
        self._run(
            "pg_ctl", "start", "-w", "-D", str(self.data_dir), "-l", str(self.log_path),
            "-o", f"-p {self.port}",
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the server and delete its files; safe to call twice."""
        atexit.unregister(self.stop)
        self.stop_server()
        shutil.rmtree(self.directory, ignore_errors=True)
        if self._lifeline is not None:
            self._lifeline.cut()
            self._lifeline = None

    def stop_server(self) -> None:
        """Stop the server but keep its files (its log is then complete)."""
        if self.port:
            self.port = 0
            self._run("pg_ctl", "stop", "-m", "fast", "-w", "-D", str(self.data_dir))

    def create_database(self, name: str) -> str:
        """A new empty database in this cluster; returns its URL."""
        self._admin(f'CREATE DATABASE "{name}"')
        return self.url_for(name)

    def create_schema(self, name: str, database: str = "postgres") -> str:
        """A URL whose tables land in a new empty schema: much faster than a database.

        Veil's extension is created once in the database's ``public`` schema,
        which stays on the search path so its functions resolve.
        """
        self._admin("CREATE EXTENSION IF NOT EXISTS veil", database)
        self._admin(f'CREATE SCHEMA "{name}"', database)
        return f"{self.url_for(database)}?options=-csearch_path%3D{name}%2Cpublic"

    def _admin(self, sql: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.url_for(database), autocommit=True) as con:
            con.execute(sql)

    def read_log(self) -> str:
        """Everything the server logged so far (every statement: log_statement=all)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _write_settings(self) -> None:
        lines = [f"{key} = {value}\n" for key, value in self._settings.items()]
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.writelines(lines)

    def _run(self, program: str, *args: str) -> None:
        command = [str(self._bin / program), *args]
        user = SERVICE_USER if self._as_root else None
        result = subprocess.run(
            command, user=user, capture_output=True, text=True, check=False, cwd=self.directory
        )
        if result.returncode != 0:
            raise ServerUnavailableError(
                f"{program} failed (exit {result.returncode}): {result.stderr.strip()[-2000:]}"
            )


def _ensure_service_user() -> None:
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SERVICE_USER,
            ],
            check=True,
        )
