"""``veil bench hom-sum``: the server's Paillier sum on DuckDB and on Spark, side by side.

One table of 2048-bit Paillier ciphertexts is loaded into an embedded DuckDB (Veil's
native GMP kernel) and into a local Spark warehouse, then summed per group by each
server, median of ``--runs``: on Spark once by the Java aggregate (``veil_hom_sum_jvm``)
and once by the Python Arrow UDF over ``collect_list`` (``VEIL_SPARK_HOM=python``), on
the same Spark application. Every sum is checked equal across the three.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

DISTINCT = 2_000  # ciphertexts encrypted; the table repeats them (the server's work is the same)


def register(benches: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = benches.add_parser(
        "hom-sum",
        help="the server's Paillier sum: DuckDB beside Spark's JVM aggregate and Python UDF",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.add_argument("--rows", type=int, default=100_000, help="ciphertexts in the table")
    parser.add_argument(
        "--groups", default="1,10,1000", help="comma-separated group counts to measure"
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs per figure (median)")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--png", metavar="PATH")
    parser.set_defaults(handler=run_hom_sum)


def run_hom_sum(args: argparse.Namespace) -> int:
    import numpy as np
    import pyarrow as pa

    from veil.backends import n_square_bytes
    from veil.crypto import hom
    from veil_dev.bench.report import bar_plot, format_table, median_seconds, write_json
    from veil_dev.servers.spark import check_java

    check_java()
    group_counts = [int(g) for g in args.groups.split(",") if g.strip()]
    key = hom.PaillierKey.from_seed(bytes(32), bits=2048)
    distinct = key.encrypt_ints(list(range(DISTINCT)))
    ciphertexts = pa.array([distinct[i % DISTINCT] for i in range(args.rows)], pa.binary())
    n_square = n_square_bytes(key.public.n_square)
    results: dict[str, dict[str, float | None]] = {}
    failures: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="veil-hom-bench-") as work:
        servers = _servers(Path(work))
        try:
            for groups in group_counts:
                column = pa.array(np.arange(args.rows) % groups, pa.int64())
                table = pa.table({"g": column, "c": ciphertexts})
                for backend in {b.url: b for b in servers.values()}.values():
                    backend.bulk_load("t_hom", table)  # once per server: Spark's two share it
                answers = {}
                for name, backend in servers.items():
                    sums = partial(_sums, backend, n_square)
                    try:
                        sums()  # warm: the JVM compiles the aggregate's loop on first use
                        seconds, answers[name] = median_seconds(sums, args.runs)
                    except Exception as exc:  # a server that fails is a result too
                        failures[f"{name}, {groups} groups"] = str(exc).splitlines()[0][:300]
                        results.setdefault(name, {})[str(groups)] = None
                        continue
                    results.setdefault(name, {})[str(groups)] = args.rows / seconds
                first = next(iter(answers.values()), None)
                if any(answer != first for answer in answers.values()):
                    raise SystemExit(f"the servers' sums differ at {groups} groups")
        finally:
            for backend in servers.values():
                with contextlib.suppress(Exception):  # a server that died cannot close
                    backend.close()
    headers = ["server", *[f"{g} groups" for g in group_counts]]
    rows = [
        [name, *["failed" if v is None else f"{v / 1e3:.1f} k/s" for v in by_groups.values()]]
        for name, by_groups in results.items()
    ]
    print(f"Paillier sums, 2048-bit key, {args.rows:,} ciphertexts, median of {args.runs}:")
    print(format_table(headers, rows))
    for what, reason in failures.items():
        print(f"failed: {what}: {reason}")
    document = {
        "failures": failures,
        "rows": args.rows,
        "runs": args.runs,
        "key_bits": 2048,
        "ciphertexts_per_second": results,
    }
    if args.json:
        write_json(args.json, document)
        print(f"wrote {args.json}")
    if args.png:
        labels = [f"{g} groups" for g in group_counts]
        series: dict[str, Sequence[float | None]] = {
            name: list(by_groups.values()) for name, by_groups in results.items()
        }
        bar_plot(args.png, labels, series, title="server Paillier sum", ylabel="ciphertexts/s")
        print(f"wrote {args.png}")
    return 0


def _servers(work: Path) -> dict[str, Any]:
    from veil.backends import connect
    from veil_dev.servers.spark import local_url

    duckdb = connect(f"duckdb://{work / 'server.duckdb'}")
    spark_url = local_url(work / "warehouse")
    jvm = connect(spark_url)
    if not getattr(jvm, "_jvm_hom_sum", False):
        raise SystemExit("Veil's JVM functions are not available here (no javac?)")
    previous = os.environ.get("VEIL_SPARK_HOM")
    os.environ["VEIL_SPARK_HOM"] = "python"
    try:
        python = connect(spark_url)  # the same warehouse: it sees the JVM backend's loads
    finally:
        if previous is None:
            del os.environ["VEIL_SPARK_HOM"]
        else:
            os.environ["VEIL_SPARK_HOM"] = previous
    return {"duckdb (GMP kernel)": duckdb, "spark JVM aggregate": jvm, "spark Python UDF": python}


def _sums(backend: Any, n_square: bytes) -> list[Any]:
    from sqlglot import exp

    from veil.backends import render

    total = backend.hom_sum(exp.column("c"), exp.Placeholder(this="1"))
    query = exp.select("g", total).from_("t_hom").group_by("g").order_by("g")
    return backend.execute(render(query, backend.dialect), [n_square]).column(1).to_pylist()
