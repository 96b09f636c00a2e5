"""``veil tpcds gen``."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("tpcds", help="TPC-DS data")
    commands = parser.add_subparsers(dest="tpcds_command", required=True, metavar="COMMAND")
    gen = commands.add_parser(
        "gen",
        help="generate TPC-DS tables as Parquet (one file per table)",
        description="Generate the 24 TPC-DS tables with tpcgen-cli as OUT/<table>.parquet.",
    )
    gen.add_argument("--sf", type=float, default=0.1, help="scale factor (default 0.1)")
    gen.add_argument("--out", type=Path, default=Path("tpcds"), help="output directory")
    gen.add_argument("--overwrite", action="store_true", help="replace existing files")
    gen.set_defaults(handler=run_gen)


def run_gen(args: argparse.Namespace) -> int:
    from veil_dev.tpcds.gen import generate

    paths = generate(args.sf, args.out, overwrite=args.overwrite)
    print(f"wrote {len(paths)} tables at scale factor {args.sf:g} to {args.out}")
    return 0
