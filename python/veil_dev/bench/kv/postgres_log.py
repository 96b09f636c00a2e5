"""``postgres-log``: a real server log of realistic size, written here by PostgreSQL 15.

The machine's own logs are small (``dpkg-log`` is 5,273 lines, 32 KB
compressed), so fixed per-table costs decide how they store. This dataset is
the log a throwaway PostgreSQL 15 cluster writes while ``pgbench`` runs a
fixed workload against it: its TPC-B-like transactions (seeded, so the same
statements in the same order for each client), a new connection per
transaction (``-C``: connection, authorisation and disconnection lines), and
every statement, checkpoint and autovacuum logged. Nothing is downloaded and
nothing is synthesised by Veil: every line is the server's.

Runs differ only where a log differs between runs of one workload
(timestamps, process ids, client ports, durations, the interleaving of the
two clients), so the log is generated once, kept in a cache file, and reused
by every later run; ``veil kv bench`` names the file and its SHA-256 in its
output. One record is one log entry: a line starting with a timestamp, with
any continuation lines (an autovacuum's tab-indented details) joined to it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from veil.backends.base import ServerUnavailableError
from veil.errors import VeilError
from veil_dev.servers.postgres import SUPERUSER, ThrowawayCluster, find_bin_dir

SCALE = 2  # pgbench -i -s: 200,000 accounts
CLIENTS = 2
TRANSACTIONS_PER_CLIENT = 15_000  # ~300,000 log entries, ~35 MB
RANDOM_SEED = 14
DATABASE = "bench"

# Logged beside the throwaway cluster's defaults (log_statement=all); the
# prefix is a common production one: time, process id, user@database.
LOG_SETTINGS = {
    "log_line_prefix": "'%m [%p] %q%u@%d '",
    "log_connections": "on",
    "log_disconnections": "on",
    "log_checkpoints": "on",
    "log_autovacuum_min_duration": "0",
    "autovacuum_naptime": "'5s'",
    "checkpoint_timeout": "'30s'",
}

ENTRY_START = re.compile(rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


class PostgresLogError(VeilError):
    """The PostgreSQL log dataset could not be generated or read."""

    anchor = "kv-dataset"


def cache_path(transactions_per_client: int = TRANSACTIONS_PER_CLIENT) -> Path:
    """Where the generated log is kept (``VEIL_DATASET_CACHE`` or ~/.cache/veil/datasets)."""
    root = os.environ.get("VEIL_DATASET_CACHE") or Path.home() / ".cache" / "veil" / "datasets"
    name = f"postgres-log-s{SCALE}-c{CLIENTS}-t{transactions_per_client}-seed{RANDOM_SEED}.log"
    return Path(root) / name


def postgres_log(transactions_per_client: int = TRANSACTIONS_PER_CLIENT) -> list[bytes]:
    """The log's entries, generating the log first if no cached copy exists."""
    path = cache_path(transactions_per_client)
    if not path.exists():
        generate(path, transactions_per_client)
    return entries(path.read_bytes())


def entries(text: bytes) -> list[bytes]:
    """One record per log entry: continuation lines join the entry they follow."""
    records: list[bytes] = []
    for line in text.splitlines():
        if ENTRY_START.match(line) or not records:
            records.append(line)
        elif line.strip():
            records[-1] += b"\n" + line
    return [record for record in records if record.strip()]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def generate(path: Path, transactions_per_client: int = TRANSACTIONS_PER_CLIENT) -> None:
    """Run the workload on a throwaway cluster and keep its log at ``path``."""
    cluster = ThrowawayCluster(extension=False, settings=LOG_SETTINGS)
    try:
        cluster.start()
        cluster.create_database(DATABASE)
        _pgbench(cluster, "-i", "-s", str(SCALE), "-q")
        _pgbench(
            cluster, "-C", "-c", str(CLIENTS), "-j", str(CLIENTS),
            "-t", str(transactions_per_client), "--random-seed", str(RANDOM_SEED),
        )  # fmt: skip
        cluster.stop_server()
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        shutil.copyfile(cluster.log_path, partial)
        partial.replace(path)  # a reader never sees half a log
    except ServerUnavailableError as error:
        raise PostgresLogError(
            f"could not generate the postgres-log dataset ({error}); it needs PostgreSQL 15's "
            "server and pgbench (`apt-get install postgresql-15`)"
        ) from error
    finally:
        cluster.stop()


def _pgbench(cluster: ThrowawayCluster, *args: str) -> None:
    command = [str(find_bin_dir() / "pgbench"), "-h", "127.0.0.1", "-p", str(cluster.port)]
    command += ["-U", SUPERUSER, *args, DATABASE]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ServerUnavailableError(f"pgbench failed: {result.stderr.strip()[-2000:]}")
