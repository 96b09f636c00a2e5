"""Throughput of the backends on 1M synthetic rows: loads, reads, HOM sums.

Run: .venv/bin/python scripts/postgres/measure_backends.py [--backends duckdb,postgres,spark]
(starts a throwaway PostgreSQL; Spark runs as spark-local[2]). Prints one line per
operation and backend; figures are kept in docs/backends.md and docs/spark.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from sqlglot import exp

from veil.backends import Backend, connect, n_square_bytes, render
from veil.crypto import hom
from veil_dev.servers.postgres import ThrowawayCluster

ROWS = 1_000_000
HOM_ROWS = 100_000


def seconds(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def tables() -> dict[str, pa.Table]:
    rng = np.random.default_rng(1)
    keys = pa.array(rng.integers(-(2**62), 2**62, ROWS))
    fixed = pa.table(
        {
            "a": keys,
            "b": pa.array(rng.integers(0, 2**31, ROWS).astype(np.int32)),
            "c": pa.array([bytes(24)] * ROWS, pa.binary()),
        }
    )
    varying = pa.table({"a": keys, "s": pa.array([b"x" * (i % 40) for i in range(ROWS)])})
    return {"fixed": fixed, "varying": varying}


def measure(backend: Backend, name: str) -> None:
    for label, table in tables().items():
        took = seconds(lambda t=table, lb=label: backend.bulk_load(f"t_{lb}", t))
        print(f"{name}: bulk load {label}: {ROWS / took / 1e6:.2f} M rows/s")
    took = seconds(lambda: backend.execute('SELECT * FROM "t_fixed"'))
    print(f"{name}: execute 3 columns to Arrow: {ROWS / took / 1e6:.2f} M rows/s")
    took = seconds(lambda: list(backend.execute_batches('SELECT * FROM "t_fixed"')))
    print(f"{name}: execute_batches: {ROWS / took / 1e6:.2f} M rows/s")
    key = hom.PaillierKey.from_seed(bytes(32), bits=2048)
    ciphertexts = key.encrypt_ints(list(range(2000))) * (HOM_ROWS // 2000)
    groups = pa.array(np.arange(HOM_ROWS) % 10)
    backend.bulk_load("t_hom", pa.table({"g": groups, "c": pa.array(ciphertexts, pa.binary())}))
    total = backend.hom_sum(exp.column("c"), exp.Placeholder(this="1"))
    query = render(exp.select("g", total).from_("t_hom").group_by("g"), backend.dialect)
    took = seconds(lambda: backend.execute(query, [n_square_bytes(key.public.n_square)]))
    print(f"{name}: HOM sum 2048-bit, 10 groups: {HOM_ROWS / took / 1e3:.0f} k ciphertexts/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backends", default="duckdb,postgres")
    chosen = parser.parse_args().backends.split(",")
    with tempfile.TemporaryDirectory() as directory:
        if "duckdb" in chosen:
            duck = connect(f"duckdb://{Path(directory) / 'server.duckdb'}")
            measure(duck, "duckdb")
            duck.close()
        if "spark" in chosen:
            spark = connect(f"spark-local[2]?warehouse={Path(directory) / 'warehouse'}")
            measure(spark, "spark")
            spark.close()
    if "postgres" not in chosen:
        return
    cluster = ThrowawayCluster()
    cluster.start()
    try:
        postgres = connect(cluster.create_schema("measure"))
        measure(postgres, "postgresql")
        postgres.close()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
