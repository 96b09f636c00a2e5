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
``--cold`` removes the plans earlier processes kept (``plans.sealed``) before each
Veil process, so each plans its statement from nothing.
"""

from __future__ import annotations

import argparse
import os
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
        runs["veil query (old)"] = (runs["veil query"][0], old)
        runs["veil.connect (old)"] = (runs["veil.connect"][0], old)
    return runs


def timed(run: Run, forget: Path | None = None) -> float:
    if forget is not None:
        forget.unlink(missing_ok=True)
    started = time.perf_counter()
    subprocess.run(run[0], env=run[1], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("client")
    parser.add_argument("plain")
    parser.add_argument("query")
    parser.add_argument("-n", type=int, default=11)
    parser.add_argument("--baseline", help="another checkout's python folder, run beside")
    parser.add_argument("--cold", action="store_true", help="no plan kept by earlier processes")
    args = parser.parse_args()
    kept = Path(args.client) / "plans.sealed" if args.cold else None
    runs = commands(args.client, args.plain, args.query, args.baseline)
    for run in runs.values():  # warm the page cache and the bytecode caches
        timed(run)
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    load = [os.getloadavg()[0]]
    for _ in range(args.n):
        for name, run in runs.items():
            seconds[name].append(timed(run, None if name.startswith("plain") else kept))
        load.append(os.getloadavg()[0])
    plain = statistics.median(seconds["plain python -c"])
    for name, times in seconds.items():
        median = statistics.median(times)
        over = 1000 * (median - plain)
        print(f"{name:20} median {1000 * median:6.0f} ms  over plain {over:+5.0f} ms")
    print(f"n={args.n}, load average {min(load):.1f}-{max(load):.1f}")


if __name__ == "__main__":
    main()
