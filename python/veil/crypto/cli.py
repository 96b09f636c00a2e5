"""``veil keygen``: create a client's key file."""

from __future__ import annotations

import argparse
import getpass
import os

from veil.crypto.keys import PASSPHRASE_ENV, write_key_file
from veil.errors import KeyFileError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "keygen",
        help="create a key file holding a fresh 256-bit master key (mode 0600)",
        description="Create a key file holding a fresh random 256-bit master key. "
        "Refuses to overwrite an existing file. The key itself is never printed.",
    )
    parser.add_argument("path", help="where to write the key file")
    parser.add_argument(
        "--passphrase",
        action="store_true",
        help=f"protect the key with a passphrase (Argon2id); read from {PASSPHRASE_ENV} "
        "or asked for on the terminal",
    )
    parser.set_defaults(handler=run_keygen)


def run_keygen(args: argparse.Namespace) -> int:
    passphrase = _ask_passphrase() if args.passphrase else None
    key = write_key_file(args.path, passphrase)
    print(f"wrote key file {args.path} (fingerprint {key.fingerprint()}); keep it safe:")
    print("without it the data cannot be decrypted.")
    return 0


def _ask_passphrase() -> str:
    from_env = os.environ.get(PASSPHRASE_ENV)
    if from_env:
        return from_env
    first = getpass.getpass("passphrase: ")
    if not first:
        raise KeyFileError("an empty passphrase protects nothing; choose one or drop --passphrase")
    if getpass.getpass("again: ") != first:
        raise KeyFileError("the two passphrases differ; nothing was written")
    return first
