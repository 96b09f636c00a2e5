"""``veil bench onions``: its arguments (the run is in ``veil_dev.bench.onions``, imported lazily)."""

from __future__ import annotations

import argparse


def register(benches: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = benches.add_parser(
        "onions",
        help="TPC-H or TPC-DS from a cold adaptive (onion) load: first and later runs, leakage",
        description="TPC-H (or TPC-DS) from a cold onion load (no workload): each query's first run, "
        "which peels what it needs, and later runs (median), checked against plaintext DuckDB; "
        "the leakage after the 22 queries and the peels' throughput.",
    )
    bench.add_argument("--data", required=True, help="directory of TPC-H (TPC-DS) .parquet files")
    bench.add_argument("--benchmark", choices=("tpch", "tpcds"), default="tpch")
    bench.add_argument("--queries", help="TPC-DS: the folder of q*.sql (default: ../shared)")
    bench.add_argument(
        "--server",
        required=True,
        help="server URL for the onion load, or `postgres` for a throwaway cluster (both "
        "loads in it; --workload-client then names the client directory to load)",
    )
    bench.add_argument("--client-dir", required=True, help="client directory (created)")
    bench.add_argument("--workload-client", help="a workload-designed client directory to compare")
    bench.add_argument("--policy-template", help="load under this policy template")
    bench.add_argument("--runs", type=int, default=3, help="later runs per query (median)")
    bench.add_argument("--json", metavar="PATH")
    bench.add_argument("--png", metavar="PATH")
    bench.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from veil_dev.bench.onions import run_onions

    return run_onions(args)
