"""The wrapped master key: its binary envelope and the key file that holds it.

A master key kept by a key provider is a *data key* sealed under a
*key-encryption key* (KEK) that the provider holds. The client directory's
``key.json`` then holds only the sealed bytes and a reference to the KEK,
never the data key itself:

```
{"format": "veil-keyfile", "version": 2,
 "fingerprint": "<the data key's public fingerprint>",
 "provider": {"kind": "kmip", "uri": "kmip://host:5696?ca=...", "key_id": "17"},
 "kek_version": 3,
 "wrapped": "<base64 envelope>"}
```

The envelope begins with a format byte (``0x01``) and an algorithm byte, so
its layout can change without ambiguity:

```
0x01 | 0x01 (AES-256-GCM) | nonce (12 bytes) | sealed data key + tag (48 bytes)
```

The associated data binds the envelope to its format and to the KEK's
reference, so an envelope moved beside another KEK's reference fails to
open instead of being unwrapped under the wrong one. Key files of version 1
(``veil.crypto.keys``: a plain or passphrase-wrapped key) keep opening as
before.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from veil.crypto.keys import KEY_FILE_FORMAT, MASTER_KEY_BYTES
from veil.errors import KeyFileError, WrongKeyError

WRAPPED_KEY_FILE_VERSION = 2
ENVELOPE_VERSION = 0x01
AES_256_GCM = 0x01
NONCE_BYTES = 12
TAG_BYTES = 16


@dataclass(frozen=True)
class Envelope:
    """A data key sealed under a KEK: nonce and ciphertext (with its tag)."""

    nonce: bytes
    sealed: bytes
    algorithm: int = AES_256_GCM

    def to_bytes(self) -> bytes:
        return bytes([ENVELOPE_VERSION, self.algorithm]) + self.nonce + self.sealed

    @classmethod
    def from_bytes(cls, raw: bytes, where: object) -> Envelope:
        if len(raw) < 2 or raw[0] != ENVELOPE_VERSION:
            version = raw[0] if raw else None
            raise KeyFileError(
                f"{where} holds a wrapped key of envelope version {version}; this Veil "
                f"reads version {ENVELOPE_VERSION}"
            )
        if raw[1] != AES_256_GCM or len(raw) != 2 + NONCE_BYTES + MASTER_KEY_BYTES + TAG_BYTES:
            raise KeyFileError(f"{where} holds a corrupt wrapped key (unknown algorithm or size)")
        return cls(raw[2 : 2 + NONCE_BYTES], raw[2 + NONCE_BYTES :])

    @staticmethod
    def fresh_nonce() -> bytes:
        return secrets.token_bytes(NONCE_BYTES)


def seal_locally(kek: bytes, data_key: bytes, aad: bytes) -> Envelope:
    """Seal in this process under a KEK the provider lent (KMIP's Get)."""
    nonce = Envelope.fresh_nonce()
    return Envelope(nonce, AESGCM(kek).encrypt(nonce, data_key, aad))


def open_locally(kek: bytes, envelope: Envelope, aad: bytes, where: object) -> bytes:
    try:
        return AESGCM(kek).decrypt(envelope.nonce, envelope.sealed, aad)
    except InvalidTag:
        raise WrongKeyError(
            f"the key-encryption key {where} does not open this wrapped key (another key "
            "under the same name, or a tampered key file)"
        ) from None


@dataclass(frozen=True)
class WrappedKeyFile:
    """A version-2 key file: the provider's reference and the envelope, no key."""

    provider: Mapping[str, str]
    fingerprint: str
    envelope: Envelope
    kek_version: int = 1

    def aad(self) -> bytes:
        return associated_data(self.provider)

    def document(self) -> dict[str, object]:
        return {
            "format": KEY_FILE_FORMAT,
            "version": WRAPPED_KEY_FILE_VERSION,
            "fingerprint": self.fingerprint,
            "provider": dict(self.provider),
            "kek_version": self.kek_version,
            "wrapped": base64.b64encode(self.envelope.to_bytes()).decode(),
        }

    @classmethod
    def from_document(cls, document: Mapping[str, object], where: Path) -> WrappedKeyFile:
        provider = document.get("provider")
        wrapped = document.get("wrapped")
        fingerprint = document.get("fingerprint")
        kek_version = document.get("kek_version", 1)
        if (
            not isinstance(provider, dict)
            or not all(isinstance(v, str) for v in provider.values())
            or not isinstance(provider.get("kind"), str)
            or not isinstance(wrapped, str)
            or not isinstance(fingerprint, str)
            or not isinstance(kek_version, int)
        ):
            raise KeyFileError(f"{where} is a malformed wrapped-key file")
        try:
            raw = base64.b64decode(wrapped, validate=True)
        except ValueError:
            raise KeyFileError(f"{where} holds a corrupt wrapped key (bad base64)") from None
        return cls(provider, fingerprint, Envelope.from_bytes(raw, where), kek_version)


def associated_data(provider: Mapping[str, str]) -> bytes:
    """The envelope's AAD: the format and the KEK's reference, canonically encoded."""
    reference = json.dumps(dict(provider), sort_keys=True, separators=(",", ":"))
    return f"{KEY_FILE_FORMAT}/{WRAPPED_KEY_FILE_VERSION}/".encode() + reference.encode()


def write_atomically(target: Path, document: Mapping[str, object], *, replace: bool) -> None:
    """Write ``document`` at ``target``: a temporary file, fsync, rename, fsync the folder.

    A process killed at any point leaves either the old file or the new one,
    complete, at ``target``. Without ``replace`` an existing file is refused
    (Veil never overwrites a key file except by a rotation).
    """
    try:
        _write_atomically(target, document, replace=replace)
    except OSError as exc:
        raise KeyFileError(
            f"cannot write key file {target}: {exc.strerror or exc}; the old key file, if "
            "any, is unchanged"
        ) from None


def _write_atomically(target: Path, document: Mapping[str, object], *, replace: bool) -> None:
    staging = target.with_name(f".{target.name}.new")
    staging.unlink(missing_ok=True)  # a rotation killed before its rename left it
    text = json.dumps(dict(document), indent=2) + "\n"
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    if replace:
        os.replace(staging, target)
    else:
        try:
            os.link(staging, target)  # fails, atomically, where the target exists
        except FileExistsError:
            refuse_existing(target)
        finally:
            staging.unlink(missing_ok=True)
    _fsync_directory(target.parent)


def refuse_existing(target: Path) -> None:
    if target.exists():
        raise KeyFileError(
            f"{target} already exists; Veil never overwrites a key file "
            "(move it away first if you really mean to replace it)"
        )


@contextmanager
def rotation_lock(target: Path) -> Iterator[None]:
    """Exclusive among processes rotating the key file at ``target`` (readers need none:
    the file is only ever replaced whole)."""
    fd = os.open(target.with_name(f".{target.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
