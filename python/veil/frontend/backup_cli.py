"""``veil backup`` and ``veil restore`` (``veil.frontend.backup``)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backup = subparsers.add_parser(
        "backup",
        help="copy a client directory and its server into a new backup directory",
        description="Write a consistent copy of CLIENT_DIR and its server (a DuckDB file, "
        "or pg_dump of the design's tables on PostgreSQL) into the new directory DEST. "
        "The key file is left out unless --include-key: keep the key apart from the backup; "
        "without the key nothing in the backup can be read.",
    )
    backup.add_argument("client_dir")
    backup.add_argument("dest", help="a new directory for the backup")
    backup.add_argument(
        "--include-key",
        action="store_true",
        help="copy the key file into the backup too (then guard the backup like the key)",
    )
    backup.set_defaults(handler=run_backup)
    restore = subparsers.add_parser(
        "restore",
        help="bring a backup back as a new client directory and server",
        description="Restore the backup SOURCE (from `veil backup`) as the new client "
        "directory CLIENT_DIR, its server at --server (a new DuckDB file, or an empty "
        "PostgreSQL schema of the backed-up schema's name).",
    )
    restore.add_argument("source", help="the backup directory")
    restore.add_argument("client_dir", help="the new client directory")
    restore.add_argument("--server", required=True, metavar="URL", help="where the server goes")
    restore.add_argument(
        "--key", metavar="FILE", help="the key file (needed unless the backup includes it)"
    )
    restore.set_defaults(handler=run_restore)


def _say(message: str) -> None:
    print(f"veil: {message}", file=sys.stderr)


def run_backup(args: argparse.Namespace) -> int:
    from veil.frontend.backup import backup

    manifest = backup(args.client_dir, args.dest, include_key=args.include_key, progress=_say)
    tables = manifest["tables"]
    assert isinstance(tables, list)
    count = f"{len(tables)} table" + ("" if len(tables) == 1 else "s")
    print(f"veil: backed up {count} of {args.client_dir} into {args.dest}")
    if not args.include_key:
        print(
            f"veil: the backup holds no key: keep {args.client_dir}/key.json (or your key "
            "provider's key) safe and apart; `veil restore` needs it, and without it the "
            "backup cannot be read"
        )
    return 0


def run_restore(args: argparse.Namespace) -> int:
    from veil.frontend.backup import restore

    restore(args.source, args.client_dir, args.server, key_file=args.key, progress=_say)
    print(f"veil: restored {args.source} as {args.client_dir} (server {args.server})")
    return 0
