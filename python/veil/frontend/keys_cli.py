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
from typing import TYPE_CHECKING

from veil.crypto.keys import PASSPHRASE_ENV
from veil.errors import KeyFileError

if TYPE_CHECKING:
    from veil.keys import KeyStatus

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
        help="rotate a client directory's key: --rewrap (new key-encryption key) or "
        "--rekey (new master key, every table re-encrypted online)",
        description="--rewrap: wrap the same master key under a new key-encryption key of "
        "its provider, or of another with --provider (for a file key: under a new "
        "passphrase). Instant: no data is touched. The new key file replaces the old "
        "atomically. --rekey: a new master key (the next generation, kept as the current "
        "one is), every table re-encrypted under it one at a time while queries and writes "
        "go on, then the old key destroyed. A re-key cut short continues when run again. "
        "KV packs and documents stores are not re-keyed (docs/keys.md#re-key).",
    )
    rotate.add_argument("client_dir", help="the client directory (or, for --rewrap, a key file)")
    kind = rotate.add_mutually_exclusive_group(required=True)
    kind.add_argument("--rewrap", action="store_true", help="new key-encryption key, same key")
    kind.add_argument(
        "--rekey", action="store_true", help="new master key, every table re-encrypted"
    )
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
        return _run_rekey(args)
    path = _key_path(args.client_dir)
    before = key_status(path)
    current = _current_passphrase(before.wrapped_by)
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


def _run_rekey(args: argparse.Namespace) -> int:
    from veil.keys import key_status
    from veil.load.progress import to_stderr
    from veil.load.rekey import rekey
    from veil.session.clientdir import open_client_dir

    if args.provider or args.passphrase:
        print(
            "veil: error: --rekey keeps the key where it is (the same provider's KEK, or the "
            "same passphrase, wraps the new key); change that with --rewrap, before or after",
            file=sys.stderr,
        )
        return 2
    path = open_client_dir(args.client_dir).key_path
    before = key_status(path)
    print(
        f"re-keying {args.client_dir}: a new master key, every table re-encrypted under it "
        "(queries and writes go on; a table's writes wait while it is copied). "
        "KV packs and documents stores opened with this key file are not re-keyed: "
        "docs/keys.md#re-key",
        file=sys.stderr,
    )
    report = rekey(
        args.client_dir,
        to_stderr,
        passphrase=_current_passphrase(before.wrapped_by),
        bars=True,
    )
    print(
        f"re-keyed {args.client_dir}: {len(report.tables)} table(s) re-encrypted in "
        f"{report.seconds:.1f} s; every table is under generation {report.generation} "
        f"(fingerprint {report.new})"
    )
    print(
        f"the old key (fingerprint {report.old}) is gone from the key file; copies of the "
        "old key file (backups) still open the old data's copies: destroy them too"
    )
    return 0


def _current_passphrase(wrapped_by: str) -> str | None:
    if wrapped_by.startswith("passphrase") and not os.environ.get(PASSPHRASE_ENV):
        return getpass.getpass("current passphrase: ")
    return None


def run_status(args: argparse.Namespace) -> int:
    from veil.keys import key_status
    from veil.session.clientdir import open_client_dir

    client = open_client_dir(args.client_dir)
    status = key_status(client.key_path)
    print(f"client directory  {client.path}")
    print(f"server            {client.server_url()}")
    print(f"master key        fingerprint {status.fingerprint} (generation {status.generation})")
    print(f"wrapped by        {status.describe()}")
    if status.next_fingerprint:
        print(
            f"re-key            under way to generation {status.generation + 1} (fingerprint "
            f"{status.next_fingerprint}); `veil rotate {args.client_dir} --rekey` finishes it"
        )
    for number, line in enumerate(_tables_by_key(client.design_path, status)):
        print(f"{'tables' if number == 0 else '':<18}{line}")
    from veil.load.pending import orphans

    if left := len(orphans(client)):
        print(
            f"interrupted       {left} load(s) killed part-way left server tables; the next "
            "load, DDL statement or redesign drops them"
        )
    return 0


def _tables_by_key(design_path: Path, status: KeyStatus) -> list[str]:
    """One line per key generation: the tables under it."""
    if not design_path.exists():
        return ["none loaded"]
    from veil.design.model import PhysicalDesign
    from veil.keys.generations import table_keys

    design = PhysicalDesign.load(design_path)
    if not design.tables:
        return ["none"]
    generations = {status.fingerprint: status.generation}
    if status.next_fingerprint:
        generations[status.next_fingerprint] = status.generation + 1
    under: dict[str, list[str]] = {}
    for name, table in sorted(design.tables.items()):
        for fingerprint in table_keys(table, design.key_fingerprint):
            under.setdefault(fingerprint, []).append(name)
    if list(under) == [status.fingerprint] and not status.next_fingerprint:
        listed = ", ".join(under[status.fingerprint])
        return [f"{listed}: all under this master key (generation {status.generation})"]
    lines = []
    for fingerprint, names in sorted(under.items(), key=lambda i: generations.get(i[0], 0)):
        generation = generations.get(fingerprint)
        where = (
            f"generation {generation}"
            if generation is not None
            else f"another key (fingerprint {fingerprint}), not in the key file!"
        )
        lines.append(f"{where}: {', '.join(names)}")
    return lines


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
