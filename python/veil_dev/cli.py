"""The commands the tooling adds to ``veil``: bench, kv, documents, tpch, tpcds and demo.

``veil.cli`` calls :func:`register` when ``veil_dev`` is importable (a checkout);
elsewhere it registers the same names (``veil.cli.TOOLING_COMMANDS``) as pointers
to a checkout. This module imports only argparse, so ``veil --help`` stays quick:
each command imports its libraries when it runs.
"""

from __future__ import annotations

import argparse
import importlib

# The modules that define ``register(subparsers)`` for a top-level command.
COMMAND_MODULES = (
    "veil_dev.bench.cli",
    "veil_dev.bench.kv.cli",
    "veil_dev.bench.documents.cli",
    "veil_dev.tpch.cli",
    "veil_dev.tpcds.cli",
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    demo = subparsers.add_parser(
        "demo", help="TPC-H through Veil on an embedded DuckDB server, checked against plaintext"
    )
    demo.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    demo.add_argument("--dir", default=None, help="working directory (default: a temporary one)")
    demo.add_argument("--json", default=None, help="write the table's figures here too")
    demo.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from veil_dev.demo import demo

    return 0 if demo(args.sf, args.dir, args.json) else 1
