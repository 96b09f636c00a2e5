"""``veil tpch gen`` and ``veil tpch queries``."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("tpch", help="TPC-H data and queries")
    commands = parser.add_subparsers(dest="tpch_command", required=True, metavar="COMMAND")

    gen = commands.add_parser(
        "gen",
        help="generate TPC-H tables as Parquet (one file per table)",
        description="Generate the eight TPC-H tables with tpchgen-cli as OUT/<table>.parquet.",
    )
    gen.add_argument("--sf", type=float, default=0.1, help="scale factor (default 0.1)")
    gen.add_argument("--out", type=Path, required=True, help="output directory")
    gen.add_argument("--overwrite", action="store_true", help="replace existing files")
    gen.set_defaults(handler=run_gen)

    queries = commands.add_parser(
        "queries",
        help="write the 22 TPC-H queries (validation parameters) as .sql files",
        description="Write q01.sql ... q22.sql, with the specification's validation parameters.",
    )
    queries.add_argument("--out", type=Path, required=True, help="output directory")
    queries.set_defaults(handler=run_queries)


def run_gen(args: argparse.Namespace) -> int:
    from veil_dev.tpch.gen import generate

    paths = generate(args.sf, args.out, overwrite=args.overwrite)
    print(f"wrote {len(paths)} tables at scale factor {args.sf:g} to {args.out}")
    return 0


def run_queries(args: argparse.Namespace) -> int:
    from veil_dev.tpch.queries import write_queries

    paths = write_queries(args.out)
    print(f"wrote {len(paths)} queries to {args.out}")
    return 0
