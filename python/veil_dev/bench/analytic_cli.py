"""``veil bench tpch`` and ``veil bench tpcds``'s arguments; the benchmark (and its
imports) load when it runs."""

from __future__ import annotations

import argparse
from pathlib import Path

CACHE = Path.home() / ".cache" / "veil"
LINKS = ("lan", "cloud", "monomi")  # veil_dev.servers.toxiproxy.LINKS, without importing it


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tpch = _add(subparsers, "tpch", "TPC-H", "the 22 queries")
    tpch.add_argument("--queries", dest="only", help="comma-separated query numbers (default: all)")
    tpch.add_argument(
        "--design",
        help="load Veil's side under this design file (`veil design`) instead of the greedy "
        "design of the 22 queries; give each design its own --work-dir",
    )
    tpch.set_defaults(handler=_run_tpch)
    tpcds = _add(subparsers, "tpcds", "TPC-DS", "the queries of --queries DIR")
    tpcds.add_argument(
        "--queries",
        type=Path,
        dest="query_dir",
        help="a folder of qNN.sql files (default: ../shared/tpcds/queries beside the repository)",
    )
    tpcds.add_argument("--only", help="comma-separated queries of that set (q01,q54 or 1,54)")
    tpcds.set_defaults(handler=_run_tpcds, design=None)


def _add(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    title: str,
    queries: str,
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        name,
        help=f"{title} on plaintext and through Veil in the same engine, side by side",
        description=f"Generate {title}, load it plaintext and through Veil into two databases "
        f"of one engine (same indexes), run {queries} on both, alternating, and report per "
        "query the median times, their ratio, Veil's server/transfer/client split, the bytes "
        "received, the client's peak memory, any fallback, and the time over a link; every "
        "Veil answer is checked against plaintext DuckDB.",
    )
    parser.add_argument("--sf", type=float, default=1.0, help=f"{title} scale factor")
    parser.add_argument("--backend", choices=("duckdb", "postgres", "spark"), default="duckdb")
    parser.add_argument(
        "--server",
        help="a PostgreSQL URL to use instead of a throwaway cluster, or a Spark master "
        "(spark://HOST:PORT) instead of spark-local[2]",
    )
    parser.add_argument("--runs", type=int, default=3, help="timed runs per query and side")
    parser.add_argument("--work-dir", type=Path, default=CACHE / f"bench-{name}")
    parser.add_argument(
        "--bandwidth-mbit",
        type=float,
        default=10.0,
        help="the link the time over a link is computed for, without --link (default 10)",
    )
    parser.add_argument(
        "--link",
        choices=LINKS,
        help="PostgreSQL only: both sides' queries cross a Toxiproxy link in both directions: "
        "lan 1 Gbit/s 0.5 ms RTT, cloud 100 Mbit/s 10 ms RTT, monomi 10 Mbit/s 20 ms RTT",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per query run")
    parser.add_argument(
        "--memory-cap-gb",
        type=float,
        default=6.0,
        help="Veil's client process is stopped past this resident size: the query is "
        "recorded as memory (default 6)",
    )
    parser.add_argument("--json", help=f"default bench/{name}/{name}_<backend>_sf<SF>.json")
    parser.add_argument("--png", help=f"default bench/{name}/{name}_<backend>_sf<SF>.png")
    return parser


def _check(args: argparse.Namespace) -> None:
    if args.link and args.backend != "postgres":
        raise SystemExit("--link runs on PostgreSQL only (--backend postgres)")


def _run_tpch(args: argparse.Namespace) -> int:
    from veil_dev.bench.analytic import run_bench
    from veil_dev.bench.suite import tpch_suite

    _check(args)
    return run_bench(args, tpch_suite())


def _run_tpcds(args: argparse.Namespace) -> int:
    from veil_dev.bench.analytic import run_bench
    from veil_dev.bench.suite import tpcds_suite

    _check(args)
    return run_bench(args, tpcds_suite(args.query_dir))
