"""The ``veil`` command line."""

from __future__ import annotations

import argparse
import sys

from veil.errors import VeilError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="veil", description="Veil: an encrypted database system.")
    parser.add_subparsers(dest="command", required=True)
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except VeilError as exc:
        print(f"veil: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
