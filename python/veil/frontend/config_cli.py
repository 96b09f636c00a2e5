"""``veil config``: show or change a client directory's settings (its server, for now).

A client directory names its server by URL (``server.json``). Moving the
server (a DuckDB file copied to another path or machine, a PostgreSQL
database restored elsewhere) means pointing the directory at the new place;
the new server is checked to hold this design's tables first, so a typo
cannot leave a directory that fails on its next query.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = subparsers.add_parser(
        "config",
        help="show or change a client directory's settings (its server URL)",
        description="Without options: print the client directory's settings. --server URL "
        "points it at a server that was moved (a DuckDB file copied elsewhere, a PostgreSQL "
        "database restored on another host), after checking that the server holds this "
        "directory's tables.",
    )
    config.add_argument("client_dir")
    config.add_argument("--server", metavar="URL", help="the server's new URL")
    config.add_argument(
        "--no-check",
        action="store_true",
        help="do not open the new server to check it holds this directory's tables",
    )
    config.set_defaults(handler=run_config)


def run_config(args: argparse.Namespace) -> int:
    from veil.frontend.config import move_server
    from veil.session.clientdir import open_client_dir

    client = open_client_dir(args.client_dir)
    if args.server is None:
        print(f"server: {client.server_url()}")
        print(f"key file: {client.key_path}")
        return 0
    before = client.server_url()
    after = move_server(client, args.server, check=not args.no_check)
    print(f"veil: {args.client_dir} now uses server {after} (was {before})")
    return 0
