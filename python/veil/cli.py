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

# Modules that define ``register(subparsers)``, with the commands each registers;
# an area that is not installed yet is skipped so the CLI works while Veil grows.
# `veil COMMAND ...` builds only its own module's parser: registering them all
# (and importing what they import) cost ~35 ms of a fresh `veil query` (issue 41).
# tests/frontend/test_cli_commands.py checks that each module registers these.
COMMANDS = {
    "veil.frontend.keys_cli": ("keygen", "rotate", "status"),
    "veil.frontend.cli": ("load", "query", "shell", "tables", "explain", "calibrate"),
    "veil.frontend.design_cli": ("design", "redesign"),
    "veil.frontend.layers_cli": ("peel", "policy", "leakage", "reencrypt"),
    "veil.frontend.config_cli": ("config",),
    "veil.frontend.backup_cli": ("backup", "restore"),
    "veil.frontend.init_cli": ("init",),
    "veil.serve.cli": ("serve", "user"),
    "veil.audit.cli": ("audit",),
}
COMMAND_MODULES = tuple(COMMANDS)
# Developer tooling (benchmarks, TPC-H, test servers, the demo) sits beside this
# package in a Veil checkout (python/veil_dev) and is not in the wheel. Veil's
# modules never import it; its commands are found here by name, and where it is
# absent (``pip install veil``) each of them says where it runs.
TOOLING_MODULE = "veil_dev.cli"
TOOLING_COMMANDS = ("bench", "kv", "documents", "tpch", "tpcds", "demo")
CHECKOUT_ONLY = (
    "veil {command} runs from a Veil checkout: the tooling it belongs to (python/veil_dev: "
    "benchmarks, TPC-H, test servers, the demo) is not part of `pip install veil`. Clone "
    "Veil's repository and run `make setup` there (or `pip install -e '.[bench]'`), then "
    "use that checkout's veil (.venv/bin/veil)."
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``veil`` parser: every command's, or only ``command``'s module's when it names one."""
    from veil import __version__

    parser = argparse.ArgumentParser(prog="veil", description="Veil: an encrypted database system.")
    parser.add_argument("--version", action="version", version=f"veil {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    owner = _owner(command)
    for name in COMMAND_MODULES:
        if owner in (None, name) and _installed(name):
            importlib.import_module(name).register(subparsers)
    if owner not in (None, TOOLING_MODULE):
        return parser
    if _installed(TOOLING_MODULE):
        importlib.import_module(TOOLING_MODULE).register(subparsers)
    else:
        for tool in TOOLING_COMMANDS:
            _register_checkout_only(subparsers, tool)
    return parser


def _owner(command: str | None) -> str | None:
    """The module registering ``command``; None (every module) for anything else (``--help``)."""
    if command in TOOLING_COMMANDS:
        return TOOLING_MODULE
    found = [name for name, commands in COMMANDS.items() if command in commands]
    return found[0] if found and _installed(found[0]) else None


def _register_checkout_only(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], command: str
) -> None:
    message = CHECKOUT_ONLY.format(command=command)
    parser = subparsers.add_parser(command, help="(in a Veil checkout only)", description=message)
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(handler=lambda _args: _checkout_only(message))


def _checkout_only(message: str) -> int:
    print(f"veil: {message}", file=sys.stderr)
    return 2


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package does not exist yet
        return False


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the `veil` command itself, not a caller in its own process
        from veil.pandas_deferred import defer_pandas

        defer_pandas()  # pyarrow would import pandas (0.3 s) for nothing
    words = sys.argv[1:] if argv is None else argv
    args = build_parser(words[0] if words else None).parse_args(argv)
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
