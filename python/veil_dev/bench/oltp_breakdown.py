"""``veil bench oltp --breakdown S``: each TPC-B statement alone, one client, where its time goes.

pgbench's TPC-B transaction is five statements between BEGIN and END. Its
throughput through ``veil serve`` says how far Veil is from plaintext, not
where the difference is. Here each statement runs alone (autocommit, and
BEGIN; END as one more), as a pgbench script of one client for ``S`` seconds
per mode, on both sides of the one cluster, and Veil's side is split:

- latency: pgbench's average, plaintext and Veil, and their ratio;
- serve CPU: the CPU the serving process spent per statement (this process:
  a ``veil serve`` of its own over the bench's client directory), which is
  the wire protocol, the session's Python and its cryptography together;
- server CPU: the CPU of the PostgreSQL backends serving Veil's connections
  (``/proc/<pid>/stat`` of each backend of the encrypted database; the
  serving process keeps its sessions, and their connections, from one pgbench
  run to the next).

Each script first runs for a second on both sides unmeasured (plans cached,
connections open). The figures are per statement (a BEGIN; END pair counts as
one).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# pgbench's own variables for TPC-B at ``:scale`` (its builtin script's)
_VARIABLES = (
    "\\set aid random(1, 100000 * :scale)\n"
    "\\set bid random(1, 1 * :scale)\n"
    "\\set tid random(1, 10 * :scale)\n"
    "\\set delta random(-5000, 5000)\n"
)
STATEMENTS = {
    "BEGIN; END": "BEGIN;\nEND;\n",
    "UPDATE accounts": "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n",
    "SELECT abalance": "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n",
    "UPDATE tellers": "UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;\n",
    "UPDATE branches": "UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;\n",
    "INSERT history": "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) "
    "VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);\n",
}

_WARM_SECONDS = 1
Backends = Callable[[], list[int]]  # the pids of the PostgreSQL backends serving Veil


def measure(
    pgbench: Path,
    seconds: int,
    modes: list[str],
    plain: tuple[int | str, str, str],
    veil: tuple[int | str, str, str],
    backends: Backends,
) -> list[dict[str, Any]]:
    """Each statement of ``STATEMENTS`` in each mode on both sides: latencies and Veil's CPU.

    ``plain``/``veil``: each side's port, user and database; Veil's is served by
    this process. ``backends``: the pids of the server backends of Veil's side.
    """
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="veil-breakdown-") as folder:
        for name, body in STATEMENTS.items():
            script = Path(folder) / f"{len(rows)}.sql"
            script.write_text(_VARIABLES + body)
            for mode in modes:
                row: dict[str, Any] = {"statement": name, "mode": mode}
                for warm in (plain, veil):
                    _run(pgbench, script, mode, _WARM_SECONDS, warm)
                _, plain_ms = _run(pgbench, script, mode, seconds, plain)
                row["plain_ms"] = plain_ms
                pids = backends()
                serve_before, server_before = time.process_time(), _cpu_seconds(pids)
                done, veil_ms = _run(pgbench, script, mode, seconds, veil)
                serve = time.process_time() - serve_before
                server = _cpu_seconds(pids) - server_before
                row["veil_ms"] = veil_ms
                row["ratio"] = veil_ms / plain_ms if plain_ms else None
                row["statements"] = done
                row["serve_cpu_ms"] = 1000 * serve / done if done else None
                row["server_cpu_ms"] = 1000 * server / done if done else None
                rows.append(row)
                print(_line(row), flush=True)
    return rows


def _run(
    pgbench: Path, script: Path, mode: str, seconds: int, side: tuple[int | str, str, str]
) -> tuple[int, float]:
    """One client running ``script`` for ``seconds``: the statements done and pgbench's
    average latency in ms."""
    port, user, database = side
    args = [
        str(pgbench), "-n", "-c", "1", "-T", str(seconds), "-M", mode, "-f", str(script),
        "-h", "127.0.0.1", "-p", str(port), "-U", user, database,
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pgbench -f {script.name} failed: {done.stderr[-2000:]}")
    count = re.search(r"number of transactions actually processed: (\d+)", done.stdout)
    latency = re.search(r"latency average = ([\d.]+) ms", done.stdout)
    if count is None or latency is None:
        raise RuntimeError(f"pgbench said neither count nor latency: {done.stdout[-2000:]}")
    return int(count.group(1)), float(latency.group(1))


def _cpu_seconds(pids: list[int]) -> float:
    """The user and system CPU of ``pids`` so far (those gone since count nothing)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _line(row: dict[str, Any]) -> str:
    ratio = f"{row['ratio']:.1f}x" if row["ratio"] else "-"
    return (
        f"breakdown {row['statement']:16} -M {row['mode']:8}: plain {row['plain_ms']:.3f} ms, "
        f"veil {row['veil_ms']:.3f} ms ({ratio}); veil serve CPU {row['serve_cpu_ms']:.3f} ms, "
        f"server CPU {row['server_cpu_ms']:.3f} ms a statement"
    )
