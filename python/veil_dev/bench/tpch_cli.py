"""``veil bench tpch``'s arguments; the benchmark (and its imports) load when it runs."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_WORK_DIR = Path.home() / ".cache" / "veil" / "bench-tpch"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "tpch",
        help="TPC-H on plaintext and through Veil in the same engine, side by side",
        description="Generate TPC-H, load it plaintext and through Veil into two databases "
        "of one engine (same indexes), run the queries on both and report per query the "
        "median times, their ratio, Veil's server/transfer/client split, the bytes received "
        "and the time over a simulated link; every Veil answer is checked.",
    )
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--backend", choices=("duckdb", "postgres", "spark"), default="duckdb")
    parser.add_argument(
        "--server",
        help="a PostgreSQL URL to use instead of a throwaway cluster, or a Spark master "
        "(spark://HOST:PORT) instead of spark-local[2]",
    )
    parser.add_argument("--runs", type=int, default=3, help="timed runs per query and side")
    parser.add_argument("--queries", help="comma-separated query numbers (default: all 22)")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    parser.add_argument("--bandwidth-mbit", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per query run")
    parser.add_argument(
        "--design",
        help="load Veil's side under this design file (`veil design`) instead of the greedy "
        "design of the 22 queries; give each design its own --work-dir",
    )
    parser.add_argument("--json", help="default bench/tpch/tpch_<backend>_sf<SF>.json")
    parser.add_argument("--png", help="default bench/tpch/tpch_<backend>_sf<SF>.png")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from veil_dev.bench.tpch import run_tpch

    return run_tpch(args)
