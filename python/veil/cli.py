"""The ``veil`` command line.

Each area of Veil contributes its own subcommands through a ``register``
function in its ``cli`` module, so this file stays a short index.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from veil.errors import VeilError

# Modules that define ``register(subparsers)``; an area that is not installed
# yet is skipped so the CLI works while Veil grows.
COMMAND_MODULES = (
    "veil.crypto.cli",
    "veil.bench.cli",
    "veil.bench.kv.cli",
    "veil.bench.documents.cli",
    "veil.frontend.cli",
    "veil.frontend.design_cli",
    "veil.frontend.layers_cli",
    "veil.serve.cli",
    "veil.tpch.cli",
)


def build_parser() -> argparse.ArgumentParser:
    from veil import __version__

    parser = argparse.ArgumentParser(prog="veil", description="Veil: an encrypted database system.")
    parser.add_argument("--version", action="version", version=f"veil {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        if _installed(name):
            importlib.import_module(name).register(subparsers)
    return parser


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package does not exist yet
        return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except VeilError as exc:
        print(f"veil: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("veil: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
