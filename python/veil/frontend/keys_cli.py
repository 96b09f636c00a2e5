"""``veil keygen``, ``veil rotate`` and ``veil status``: the master key and who keeps it.

Registering these imports nothing heavy: the providers' client libraries
(PyKMIP, python-pkcs11) load only when a command uses one.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

from veil.crypto.keys import PASSPHRASE_ENV
from veil.errors import KeyFileError

NEW_PASSPHRASE_ENV = "VEIL_NEW_PASSPHRASE"
PROVIDER_HELP = (
    "who keeps the key: file (the default: the key file itself), "
    "kmip://HOST:PORT?ca=CA&cert=CERT&key=KEY (a KMIP server) or "
    "pkcs11:token=LABEL?module-path=LIB (an HSM); docs/keys.md"
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keygen = subparsers.add_parser(
        "keygen",
        help="create a key file holding a fresh 256-bit master key (mode 0600)",
        description="Create a key file holding a fresh random 256-bit master key, kept in "
        "the file itself or wrapped by a key provider (KMIP server, HSM), in which case the "
        "file holds only the wrapped key. Refuses to overwrite an existing file. The key "
        "itself is never printed.",
    )
    keygen.add_argument("path", help="where to write the key file")
    keygen.add_argument("--provider", default="file", metavar="URI", help=PROVIDER_HELP)
    keygen.add_argument(
        "--passphrase",
        action="store_true",
        help=f"protect a file key with a passphrase (Argon2id); read from {PASSPHRASE_ENV} "
        "or asked for on the terminal",
    )
    keygen.set_defaults(handler=run_keygen)

    rotate = subparsers.add_parser(
        "rotate",
        help="rotate a client directory's key: --rewrap puts it under a new key-encryption key",
        description="--rewrap: wrap the same master key under a new key-encryption key of "
        "its provider, or of another with --provider (for a file key: under a new "
        "passphrase). Instant: no data is touched. The new key file replaces the old "
        "atomically. --rekey (a new master key, every table re-encrypted) is not built yet.",
    )
    rotate.add_argument("client_dir", help="the client directory (or a key file)")
    kind = rotate.add_mutually_exclusive_group(required=True)
    kind.add_argument("--rewrap", action="store_true", help="new key-encryption key, same key")
    kind.add_argument("--rekey", action="store_true", help="new master key (not yet)")
    rotate.add_argument("--provider", metavar="URI", help=PROVIDER_HELP)
    rotate.add_argument(
        "--passphrase",
        action="store_true",
        help=f"wrap a file key under a new passphrase: read from {NEW_PASSPHRASE_ENV} or asked "
        f"for (the current one from {PASSPHRASE_ENV} or asked for)",
    )
    rotate.set_defaults(handler=run_rotate)

    status = subparsers.add_parser(
        "status",
        help="a client directory's server, key and key provider",
        description="Show a client directory's server, its master key's public fingerprint, "
        "which provider and key-encryption key version wrap it, and the tables under it. "
        "Reads the client directory only: no provider or server is asked.",
    )
    status.add_argument("client_dir", help="the client directory")
    status.set_defaults(handler=run_status)


def run_keygen(args: argparse.Namespace) -> int:
    from veil.keys import create_key, key_status

    passphrase = _ask_new_passphrase(PASSPHRASE_ENV) if args.passphrase else None
    key = create_key(args.path, args.provider, passphrase)
    print(f"wrote key file {args.path} (fingerprint {key.fingerprint()})")
    print(f"  wrapped by {key_status(args.path).describe()}")
    print("keep it (and the provider's key) safe: without them the data cannot be decrypted.")
    return 0


def run_rotate(args: argparse.Namespace) -> int:
    from veil.keys import key_status, rewrap_key

    if args.rekey:
        print(
            "veil: error: --rekey (a new master key, every table re-encrypted online) is not "
            "built yet; --rewrap puts the same master key under a new key-encryption key",
            file=sys.stderr,
        )
        return 2
    path = _key_path(args.client_dir)
    before = key_status(path)
    current = None
    if before.wrapped_by.startswith("passphrase") and not os.environ.get(PASSPHRASE_ENV):
        current = getpass.getpass("current passphrase: ")
    new = _ask_new_passphrase(NEW_PASSPHRASE_ENV) if args.passphrase else None
    after = rewrap_key(path, args.provider, passphrase=current, new_passphrase=new)
    print(f"re-wrapped the master key of {args.client_dir} (fingerprint {after.fingerprint})")
    print(f"  was: {before.describe()}")
    print(f"  now: {after.describe()}")
    print(
        "no data was touched. A copy of the old key file still opens with the old "
        "key-encryption key: destroy that key in its provider once nothing needs it."
    )
    return 0


def run_status(args: argparse.Namespace) -> int:
    from veil.keys import key_status
    from veil.session.clientdir import open_client_dir

    client = open_client_dir(args.client_dir)
    status = key_status(client.key_path)
    print(f"client directory  {client.path}")
    print(f"server            {client.server_url()}")
    print(f"master key        fingerprint {status.fingerprint}")
    print(f"wrapped by        {status.describe()}")
    print(f"tables            {_tables_on_key(client.design_path, status.fingerprint)}")
    return 0


def _tables_on_key(design_path: Path, fingerprint: str) -> str:
    if not design_path.exists():
        return "none loaded"
    from veil.design.model import PhysicalDesign

    design = PhysicalDesign.load(design_path)
    names = ", ".join(sorted(design.tables)) or "none"
    if design.key_fingerprint != fingerprint:
        return f"{names}: under another key (fingerprint {design.key_fingerprint})!"
    return f"{names}: all under this master key"


def _key_path(client_dir: str) -> Path:
    """A client directory's key file, or the key file given itself."""
    target = Path(client_dir)
    if target.is_file():
        return target
    from veil.session.clientdir import open_client_dir

    return open_client_dir(target).key_path


def _ask_new_passphrase(env: str) -> str:
    from_env = os.environ.get(env)
    if from_env:
        return from_env
    first = getpass.getpass("new passphrase: ")
    if not first:
        raise KeyFileError("an empty passphrase protects nothing; choose one or drop --passphrase")
    if getpass.getpass("again: ") != first:
        raise KeyFileError("the two passphrases differ; nothing was written")
    return first
