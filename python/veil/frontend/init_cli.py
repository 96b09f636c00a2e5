"""``veil init`` (``veil.frontend.init``)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from veil.frontend.keys_cli import PROVIDER_HELP

    init = subparsers.add_parser(
        "init",
        help="make an empty encrypted database that applications CREATE TABLE into",
        description="Make a new client directory for SERVER with a key (new, --key, or "
        "kept by --key-provider) and no tables yet: connect with veil.connect, or run "
        "`veil serve CLIENT_DIR` and use psql, an ORM or pgbench, and CREATE TABLE. "
        "Losing the key loses the data: keep it safe and apart from the server.",
    )
    init.add_argument("client_dir", help="the new client directory")
    init.add_argument(
        "--server", required=True, help="duckdb:///path/server.duckdb or postgresql://..."
    )
    init.add_argument("--key", help="a key file from `veil keygen` (default: a new key)")
    init.add_argument("--key-provider", metavar="URI", help=PROVIDER_HELP)
    init.set_defaults(handler=run_init)


def run_init(args: argparse.Namespace) -> int:
    from veil.frontend.init import init

    client = init(args.client_dir, args.server, key_file=args.key, key_provider=args.key_provider)
    print(f"veil: {args.client_dir} is an empty encrypted database on {client.server_url()}")
    print(
        f"veil: its key is {client.key_path}: keep it safe and apart from the server "
        "(losing it loses the data)"
    )
    print(f"veil: next: veil serve {args.client_dir}, then psql and CREATE TABLE")
    return 0
