"""Time a fresh process's first query: Veil against plaintext DuckDB, alternately.

    .venv/bin/python scripts/first_query.py CLIENT_DIR PLAIN.duckdb QUERY.sql [-n 11]
        [--baseline OLD/python] [--cold]

Each round starts four processes one after the other: ``veil query CLIENT_DIR``,
a ``python -c`` that does ``veil.connect`` and one ``execute``, and the same two
over the plaintext DuckDB file (its ``duckdb`` command-line twin is a
``python -c`` importing duckdb, which is what an application pays). The medians
of the wall times are printed with the load average, which the shared cores make
matter (issue 41: a fresh process's first query within 100 ms of plaintext).
``--baseline`` adds the two Veil processes again with another checkout's
``python`` folder first on ``PYTHONPATH`` (e.g. ``git archive`` of an older
commit, with its ``_native`` module copied in), so before and after run side by side.
They run on a copy of the client directory (beside it, ``CLIENT_DIR.baseline``,
the same server): the kept plans name the code that made them, so the two checkouts
sharing one ``plans.sealed`` would each discard the other's and both plan every time.
``--cold`` removes the plans earlier processes kept (``plans.sealed``) before each
Veil process, so each plans its statement from nothing.

Besides the wall times (which the shared cores' load inflates), the medians of
each process's CPU time (user + system) are printed: less sensitive to the load.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

VEIL_API = (
    "import sys, veil; c = veil.connect(sys.argv[1]).cursor(); "
    "c.execute(open(sys.argv[2]).read()); c.fetchall()"
)
PLAIN_API = (
    "import sys, duckdb; c = duckdb.connect(sys.argv[1], read_only=True); "
    "c.execute(open(sys.argv[2]).read()).fetchall()"
)


Run = tuple[list[str], dict[str, str]]


def commands(client: str, plain: str, query: str, baseline: str | None) -> dict[str, Run]:
    python = sys.executable
    veil = str(Path(python).with_name("veil"))
    here = dict(os.environ)
    runs = {
        "veil query": ([veil, "query", client, Path(query).read_text()], here),
        "veil.connect": ([python, "-c", VEIL_API, client, query], here),
        "plain python -c": ([python, "-c", PLAIN_API, plain, query], here),
    }
    if baseline is not None:
        old = {**here, "PYTHONPATH": baseline}
        copy = baseline_client(Path(client))
        runs["veil query (old)"] = ([veil, "query", copy, Path(query).read_text()], old)
        runs["veil.connect (old)"] = ([python, "-c", VEIL_API, copy, query], old)
    return runs


def baseline_client(client: Path) -> str:
    """A copy of ``client`` (without its kept plans) for the other checkout's processes."""
    copy = client.with_name(f"{client.name}.baseline")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(client, copy, ignore=shutil.ignore_patterns("plans.sealed"))
    return str(copy)


def timed(run: Run, forget: Path | None = None) -> tuple[float, float]:
    """The process's wall time and CPU time (user + system), in seconds."""
    if forget is not None:
        forget.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(run[0], env=run[1], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("client")
    parser.add_argument("plain")
    parser.add_argument("query")
    parser.add_argument("-n", type=int, default=11)
    parser.add_argument("--baseline", help="another checkout's python folder, run beside")
    parser.add_argument("--cold", action="store_true", help="no plan kept by earlier processes")
    args = parser.parse_args()
    runs = commands(args.client, args.plain, args.query, args.baseline)
    for run in runs.values():  # warm the page cache and the bytecode caches
        timed(run)
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    load = [os.getloadavg()[0]]
    for _ in range(args.n):
        for name, run in runs.items():
            # (the client directory is the last argument but one of both Veil commands)
            kept = Path(run[0][-2]) / "plans.sealed" if args.cold else None
            wall, used = timed(run, None if name.startswith("plain") else kept)
            seconds[name].append(wall)
            cpu[name].append(used)
        load.append(os.getloadavg()[0])
    plain = statistics.median(seconds["plain python -c"])
    plain_cpu = statistics.median(cpu["plain python -c"])
    for name, times in seconds.items():
        median, used = statistics.median(times), statistics.median(cpu[name])
        over, over_cpu = 1000 * (median - plain), 1000 * (used - plain_cpu)
        print(
            f"{name:20} median {1000 * median:6.0f} ms  over plain {over:+5.0f} ms"
            f"  | CPU {1000 * used:5.0f} ms, over plain {over_cpu:+5.0f} ms"
        )
    print(f"n={args.n}, load average {min(load):.1f}-{max(load):.1f}")


if __name__ == "__main__":
    main()
