"""The master key, its key file, and the derivation of every working key.

A key file holds one random 256-bit master key and nothing else secret. Every
key a scheme uses is derived from it with HKDF-SHA256 under a label naming the
key's purpose (scheme, table, column or key group, version), so a client
directory needs to protect exactly one file, and two purposes never share a key.

The file is JSON so that an operator can see what it is without a tool; the key
inside is base64, optionally wrapped with AES-256-GCM under a key stretched
from a passphrase by Argon2id (memory-hard, so guessing passphrases offline is
expensive). The file is written with mode 0600 and never overwritten (``veil
rotate --rewrap`` replaces it whole, atomically, with the same key inside).

A key file of version 2 holds the master key wrapped by a key provider (a
KMIP server, an HSM): ``veil.keys`` reads and writes those, and reads
version 1 through this module.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.argon2 import Argon2id
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from veil.errors import KeyFileError, WrongKeyError

MASTER_KEY_BYTES = 32
KEY_FILE_FORMAT = "veil-keyfile"
KEY_FILE_VERSION = 1
# Version 2: the key wrapped by a key provider (veil.keys.envelope).
KEY_FILE_VERSIONS = (1, 2)
PASSPHRASE_ENV = "VEIL_PASSPHRASE"

# Argon2id parameters: RFC 9106's second recommended option (64 MiB, 3 passes).
ARGON2_MEMORY_KIB = 64 * 1024
ARGON2_ITERATIONS = 3
ARGON2_LANES = 4
T = TypeVar("T")


@dataclass(frozen=True)
class KeyLabel:
    """The purpose a working key is derived for.

    ``scope`` names what the key protects: a table and column, a key group
    shared by joined columns, or a key-value table. ``version`` lets a key be
    rotated without changing anything else about its purpose.
    """

    scheme: str
    scope: str
    version: int = 1

    def info(self) -> bytes:
        # Length-prefix each part so that no two labels share an encoding.
        parts = [b"veil", self.scheme.encode(), self.scope.encode(), str(self.version).encode()]
        return b"".join(len(p).to_bytes(2, "big") + p for p in parts)


class MasterKey:
    """The client's master key; derives working keys and never shows itself."""

    __slots__ = ("_cache", "_secret")

    def __init__(self, secret: bytes):
        if len(secret) != MASTER_KEY_BYTES:
            raise KeyFileError(f"a master key is {MASTER_KEY_BYTES} bytes, got {len(secret)}")
        self._secret = bytes(secret)
        self._cache: dict[tuple[KeyLabel, int], bytes] = {}

    @classmethod
    def generate(cls) -> MasterKey:
        return cls(secrets.token_bytes(MASTER_KEY_BYTES))

    def derive(self, label: KeyLabel, length: int = 32) -> bytes:
        """Return the working key for ``label`` (HKDF-SHA256, cached)."""
        cached = self._cache.get((label, length))
        if cached is None:
            hkdf = HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=label.info())
            cached = hkdf.derive(self._secret)
            self._cache[(label, length)] = cached
        return cached

    def sealed_by(self, seal: Callable[[bytes], T]) -> T:
        """``seal(secret)``: hand the key to a function that wraps it (a key provider).

        The one way the secret leaves this object, so that a wrapped copy can
        be made without the plain key ever being returned as a value.
        """
        return seal(self._secret)

    def fingerprint(self) -> str:
        """A public identifier of this key, stored beside data it encrypted.

        It lets Veil say "wrong key" up front instead of decrypting garbage
        with schemes that cannot authenticate (FF1, OPE, Paillier).
        """
        return self.derive(KeyLabel("fingerprint", "master"), 16).hex()

    def __repr__(self) -> str:
        return f"MasterKey(fingerprint={self.fingerprint()})"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a MasterKey is not picklable: keys never leave the client process")


def write_key_file(path: str | os.PathLike[str], passphrase: str | None = None) -> MasterKey:
    """Create a new key file at ``path`` with a fresh master key.

    Refuses to overwrite an existing file: losing a key loses the data.
    """
    key = MasterKey.generate()
    document = key_document(key, passphrase)
    target = Path(path)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise KeyFileError(
            f"{target} already exists; Veil never overwrites a key file "
            "(move it away first if you really mean to replace it)"
        ) from None
    except OSError as exc:
        raise KeyFileError(f"cannot create key file {target}: {exc.strerror}") from None
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle, indent=2)
        handle.write("\n")
    os.chmod(target, 0o600)  # umask cannot widen it, but be explicit
    return key


def load_key_file(path: str | os.PathLike[str], passphrase: str | None = None) -> MasterKey:
    """Read the master key from ``path``.

    A passphrase-protected file takes ``passphrase`` or, failing that, the
    ``VEIL_PASSPHRASE`` environment variable.
    """
    target = Path(path)
    document = read_key_document(target)
    if document.get("version") != KEY_FILE_VERSION:
        raise KeyFileError(
            f"{target} holds a key wrapped by a key provider; open it with "
            "veil.keys.load_key (docs/keys.md)"
        )
    return key_from_document(document, target, passphrase)


def key_from_document(
    document: dict[str, object], target: Path, passphrase: str | None = None
) -> MasterKey:
    """The key of a version-1 key document (a key file's, or the next key of a re-key
    that a key file holds beside it: ``veil.keys``)."""
    key_b64 = document.get("key")
    if not isinstance(key_b64, str):
        raise KeyFileError(f"{target} has no key; it is not a Veil key file")
    raw = _b64decode(key_b64, target)
    kdf = document.get("kdf")
    if kdf is None:
        return MasterKey(raw)
    if passphrase is None:
        passphrase = os.environ.get(PASSPHRASE_ENV)
    if passphrase is None:
        raise KeyFileError(
            f"{target} is protected by a passphrase; pass it or set {PASSPHRASE_ENV}"
        )
    return MasterKey(_unwrap(raw, kdf, passphrase, target))


def key_document(key: MasterKey, passphrase: str | None) -> dict[str, object]:
    """The version-1 key file of ``key``: plain, or wrapped under ``passphrase``."""
    document: dict[str, object] = {
        "format": KEY_FILE_FORMAT,
        "version": KEY_FILE_VERSION,
        "fingerprint": key.fingerprint(),
        "kdf": None,
    }
    secret = key._secret
    if passphrase is None:
        document["key"] = base64.b64encode(secret).decode()
        return document
    salt = secrets.token_bytes(16)
    kdf = {
        "name": "argon2id",
        "salt": base64.b64encode(salt).decode(),
        "memory_kib": ARGON2_MEMORY_KIB,
        "iterations": ARGON2_ITERATIONS,
        "lanes": ARGON2_LANES,
    }
    nonce = secrets.token_bytes(12)
    wrapped = AESGCM(_stretch(passphrase, kdf)).encrypt(nonce, secret, KEY_FILE_FORMAT.encode())
    document["kdf"] = kdf
    document["key"] = base64.b64encode(nonce + wrapped).decode()
    return document


def _stretch(passphrase: str, kdf: dict[str, object]) -> bytes:
    salt = base64.b64decode(str(kdf["salt"]))
    return Argon2id(
        salt=salt,
        length=32,
        iterations=int(str(kdf["iterations"])),
        lanes=int(str(kdf["lanes"])),
        memory_cost=int(str(kdf["memory_kib"])),
    ).derive(passphrase.encode())


def _unwrap(raw: bytes, kdf: object, passphrase: str, target: Path) -> bytes:
    if not isinstance(kdf, dict) or kdf.get("name") != "argon2id":
        raise KeyFileError(f"{target} uses an unknown key-derivation function")
    try:
        return AESGCM(_stretch(passphrase, kdf)).decrypt(
            raw[:12], raw[12:], KEY_FILE_FORMAT.encode()
        )
    except InvalidTag:
        raise WrongKeyError(f"wrong passphrase for key file {target}") from None


def read_key_document(target: Path) -> dict[str, object]:
    """A key file's JSON, after checking its mode, format and version (1 or 2)."""
    try:
        mode = target.stat().st_mode
        text = target.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise KeyFileError(
            f"key file {target} does not exist; create one with `veil keygen`"
        ) from None
    except OSError as exc:
        raise KeyFileError(f"cannot read key file {target}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"key file {target} is readable by others (mode {stat.S_IMODE(mode):o}); "
            f"run `chmod 600 {target}`"
        )
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        raise KeyFileError(f"{target} is not a Veil key file (not JSON)") from None
    if not isinstance(document, dict) or document.get("format") != KEY_FILE_FORMAT:
        raise KeyFileError(f"{target} is not a Veil key file")
    if document.get("version") not in KEY_FILE_VERSIONS:
        raise KeyFileError(
            f"{target} has key-file version {document.get('version')}; "
            f"this Veil reads versions {', '.join(map(str, KEY_FILE_VERSIONS))}"
        )
    return document


def _b64decode(text: str, target: Path) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise KeyFileError(f"{target} holds a corrupt key (bad base64)") from None
