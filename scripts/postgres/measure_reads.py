"""Reading encrypted TPC-H lineitem from PostgreSQL: psycopg rows vs ADBC Arrow, side by side.

Run: .venv/bin/python scripts/postgres/measure_reads.py [--sf 0.1] [--runs 5] [--server URL]

Generates TPC-H, loads it through Veil into a throwaway cluster (or a fresh
schema of ``--server``), then fetches every ciphertext column of lineitem's
server table, alternating the two read paths of ``PostgresBackend`` in one
process: without parameters (ADBC reads by binary COPY) and with one bigint
parameter (ADBC binds it). Prints medians in rows/s and MB/s of Arrow data.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from veil.backends.postgres import PostgresBackend
from veil.load.loader import load
from veil_dev.servers.postgres import ThrowawayCluster
from veil_dev.tpch.gen import generate


def largest_table(backend: PostgresBackend) -> tuple[str, int]:
    counts = {
        name: int(backend.execute(f'SELECT count(*) FROM "{name}"').column(0)[0].as_py())
        for name in backend.table_names()
    }
    name = max(counts, key=lambda n: counts[n])
    return name, counts[name]


def timed(read: Callable[[], pa.Table]) -> tuple[float, int]:
    started = time.perf_counter()
    table = read()
    return time.perf_counter() - started, table.nbytes


def compare(backend: PostgresBackend, table: str, rows: int, runs: int) -> None:
    schema = backend.execute(f'SELECT * FROM "{table}" LIMIT 0').schema
    integer = next(f.name for f in schema if f.type == pa.int64())
    everything = f'SELECT * FROM "{table}"'
    filtered = f'SELECT * FROM "{table}" WHERE "{integer}" >= $1'
    low = [-(2**63)]
    paths: dict[str, Callable[[], pa.Table]] = {
        "psycopg rows, no parameter": lambda: backend._execute_rows(everything, None),
        "ADBC Arrow, no parameter": lambda: backend.execute(everything),
        "psycopg rows, 1 parameter": lambda: backend._execute_rows(filtered, low),
        "ADBC Arrow, 1 parameter": lambda: backend.execute(filtered, low),
    }
    times: dict[str, list[float]] = {label: [] for label in paths}
    nbytes = 0
    for _ in range(runs):
        for label, read in paths.items():
            took, nbytes = timed(read)
            times[label].append(took)
    print(f"{table}: {rows} rows, {len(schema)} columns, {nbytes / 1e6:.0f} MB as Arrow")
    for label, seen in times.items():
        median = statistics.median(seen)
        print(
            f"  {label:28s} {median:6.3f} s  {rows / median / 1e6:5.2f} M rows/s  "
            f"{nbytes / median / 1e6:5.0f} MB/s  (runs: {', '.join(f'{t:.2f}' for t in seen)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=0.1)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--server", help="a PostgreSQL URL instead of a throwaway cluster")
    args = parser.parse_args()
    cluster = None
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        generate(args.sf, work / "data")
        if args.server:
            url = args.server
        else:
            cluster = ThrowawayCluster()
            cluster.start()
            url = cluster.create_schema("measure_reads")
        try:
            load(str(work / "data"), url, str(work / "client"), progress=lambda _: None)
            backend = PostgresBackend(url)
            table, rows = largest_table(backend)
            compare(backend, table, rows, args.runs)
            backend.close()
        finally:
            if cluster is not None:
                cluster.stop()


if __name__ == "__main__":
    main()
