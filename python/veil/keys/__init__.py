"""Key providers and envelope encryption of the master key (docs/keys.md).

The master key (``veil.crypto.keys.MasterKey``) is a *data key*: every
working key is derived from it, so it never changes while data is encrypted
under it. Where it is kept is the *provider*'s business:

- ``file``: in the key file itself, plain or under a passphrase (key files
  of version 1, as Veil always wrote them);
- ``kmip://...`` or ``pkcs11:...``: wrapped under a key-encryption key (KEK)
  that a KMIP server or an HSM holds; the key file (version 2) holds only the
  wrapped key and the KEK's reference (``veil.keys.envelope``).

``load_key`` opens either kind; ``create_key`` makes a new one;
``rewrap_key`` puts the same data key under a new KEK or another provider
(re-wrap rotation: no data is touched); ``key_status`` says what wraps a key
without asking the provider.

Re-key rotation (a new data key, every table re-encrypted: ``veil.load.rekey``)
counts keys in *generations*: a key file's ``"generation"`` (1 when absent).
While a re-key runs, the key file also holds the next generation's key under
``"next"``, a key document of the same kind (the same passphrase or the same
provider's KEK wraps it), so that every session can open both
(``load_keys``, ``veil.keys.ring``); ``begin_rekey`` adds it and
``finish_rekey`` makes it the only key, which destroys the old one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from veil.crypto.keys import (
    KEY_FILE_VERSION,
    PASSPHRASE_ENV,
    MasterKey,
    key_document,
    key_from_document,
    read_key_document,
    write_key_file,
)
from veil.errors import KeyFileError, KeyProviderError, WrongKeyError
from veil.keys.envelope import (
    WrappedKeyFile,
    associated_data,
    refuse_existing,
    rotation_lock,
    write_atomically,
)
from veil.keys.providers import FILE, describe, kind_of, provider_for, provider_of, reference
from veil.keys.ring import KeyRing, holds

NEXT = "next"  # the key file's field holding a re-key's new key

PLAIN = "nothing (plain key file)"

__all__ = [
    "KeyStatus",
    "begin_rekey",
    "create_key",
    "finish_rekey",
    "kept_by",
    "key_status",
    "load_key",
    "load_keys",
    "rewrap_key",
]


@dataclass(frozen=True)
class KeyStatus:
    """What wraps a key file's master key (nothing secret)."""

    provider: str  # file | kmip | pkcs11
    wrapped_by: str  # "passphrase (Argon2id)", "nothing (plain key file)", a provider's URI and key
    kek_version: int
    fingerprint: str
    generation: int = 1
    # a re-key under way: the new key's fingerprint ("" when none runs)
    next_fingerprint: str = ""

    def describe(self) -> str:
        if self.wrapped_by == PLAIN:
            return f"{self.provider}: {self.wrapped_by}"
        return f"{self.provider}: {self.wrapped_by}, key-encryption key version {self.kek_version}"


def load_key(path: str | os.PathLike[str], passphrase: str | None = None) -> MasterKey:
    """The master key of the key file at ``path``, unwrapped by its provider if it has one.

    A provider that cannot be reached raises ``KeyProviderError`` before
    anything else is opened.
    """
    target = Path(path)
    return _open(read_key_document(target), target, passphrase)


def load_keys(
    path: str | os.PathLike[str],
    base: str | None = None,
    passphrase: str | None = None,
) -> MasterKey:
    """The key file's key, or, while a re-key runs, a ring of its two generations.

    ``base`` is the fingerprint the ring derives unmarked scopes from (the
    design's ``key_fingerprint``; default: the older key). Sessions open
    their client directory's key this way (``veil.keys.ring``).
    """
    target = Path(path)
    document = read_key_document(target)
    key = _open(document, target, passphrase)
    following = document.get(NEXT)
    if not isinstance(following, dict):
        return key
    new = _open(following, target, passphrase)
    return KeyRing(new if base == new.fingerprint() else key, [key, new])


def _open(document: dict[str, object], target: Path, passphrase: str | None) -> MasterKey:
    """The key of one key document (a file's, or its re-key's next key)."""
    if document.get("version") == KEY_FILE_VERSION:
        key = key_from_document(document, target, passphrase)
    else:
        wrapped = WrappedKeyFile.from_document(document, target)
        provider = provider_of(wrapped.provider)
        secret = provider.open(wrapped.provider["key_id"], wrapped.envelope, wrapped.aad())
        key = MasterKey(secret)
        if key.fingerprint() != wrapped.fingerprint:
            raise WrongKeyError(
                f"{target}: the key {describe(wrapped.provider)} unwrapped is not the key this "
                "file was made for"
            )
    if document.get("fingerprint") not in (None, key.fingerprint()):
        raise WrongKeyError(f"{target}: a key in it does not match its fingerprint")
    return key


def create_key(
    path: str | os.PathLike[str], provider: str = FILE, passphrase: str | None = None
) -> MasterKey:
    """A fresh master key in a new key file at ``path``, kept by ``provider``.

    With a KMIP or PKCS#11 provider a new KEK is made there and the file gets
    only the wrapped key. Refuses to overwrite a file.
    """
    target = Path(path)
    if kind_of(provider) == FILE:
        return write_key_file(target, passphrase)
    if passphrase is not None:
        raise KeyProviderError(
            "a passphrase protects file keys only; a provider's KEK wraps this key"
        )
    refuse_existing(target)  # before a KEK is made for nothing
    key = MasterKey.generate()
    write_atomically(target, _wrap(key, provider, kek_version=1).document(), replace=False)
    return key


def rewrap_key(
    path: str | os.PathLike[str],
    provider: str | None = None,
    *,
    passphrase: str | None = None,
    new_passphrase: str | None = None,
) -> KeyStatus:
    """Wrap the same master key under a new KEK: re-wrap rotation, no data touched.

    ``provider`` (default: the one wrapping it now) makes the new KEK; for
    ``file`` the new KEK is ``new_passphrase`` stretched under a fresh salt.
    A provider's new envelope is opened once before it is written, and the
    written file once more; it replaces the old atomically, so a process
    killed meanwhile leaves the old file or the new one.
    """
    target = Path(path)
    read_key_document(target)  # a missing or unreadable file says so before any lock
    with rotation_lock(target):
        return _rewrap(target, provider, passphrase, new_passphrase)


def _rewrap(
    target: Path, provider: str | None, passphrase: str | None, new_passphrase: str | None
) -> KeyStatus:
    key = load_key(target, passphrase)
    before = key_status(target)
    if before.next_fingerprint:
        raise KeyFileError(
            f"{target} is in the middle of a re-key; finish it first (`veil rotate --rekey` "
            "again), then re-wrap"
        )
    target_provider = provider or (FILE if before.provider == FILE else _uri_of(target))
    version = before.kek_version + 1
    if kind_of(target_provider) == FILE:
        if new_passphrase is None:
            raise KeyFileError(
                "re-wrapping a file key needs a new passphrase (a plain key file has no "
                "key-encryption key to change); or give --provider kmip://... or pkcs11:..."
            )
        document = {**key_document(key, new_passphrase), "kek_version": version}
    else:
        if new_passphrase is not None:
            raise KeyProviderError("a new passphrase protects file keys only")
        document = _wrap(key, target_provider, kek_version=version).document()
    document["generation"] = before.generation
    write_atomically(target, document, replace=True)
    if load_key(target, new_passphrase).fingerprint() != key.fingerprint():
        raise WrongKeyError(f"{target}: the re-wrapped key does not open to the same key")
    return key_status(target)


def key_status(path: str | os.PathLike[str]) -> KeyStatus:
    """What wraps the key at ``path``, read from the file alone (no provider is asked)."""
    target = Path(path)
    document = read_key_document(target)
    fingerprint = str(document.get("fingerprint", ""))
    version = _integer(document, "kek_version")
    following = document.get(NEXT)
    after = str(following.get("fingerprint", "")) if isinstance(following, dict) else ""
    generation = _integer(document, "generation")
    if document.get("version") == KEY_FILE_VERSION:
        wrapped_by = "passphrase (Argon2id)" if document.get("kdf") else PLAIN
        return KeyStatus(FILE, wrapped_by, version, fingerprint, generation, after)
    wrapped = WrappedKeyFile.from_document(document, target)
    kind = wrapped.provider["kind"]
    return KeyStatus(kind, describe(wrapped.provider), version, fingerprint, generation, after)


def _integer(document: dict[str, object], field: str) -> int:
    value = document.get(field, 1)
    return value if isinstance(value, int) else 1


@dataclass(frozen=True)
class Rekey:
    """A re-key's two keys (``begin_rekey``)."""

    old: MasterKey
    new: MasterKey
    generation: int  # the new key's


def begin_rekey(path: str | os.PathLike[str], passphrase: str | None = None) -> Rekey:
    """Add a new master key to the key file beside the current one (or find the one a
    re-key cut short added): the next generation, kept as the current key is.

    A file key's next key is sealed under the same passphrase; a provider's,
    under the same KEK (a re-key changes the data key, not who keeps it). The
    file is replaced atomically and read back before this returns.
    """
    target = Path(path)
    with rotation_lock(target):
        document = read_key_document(target)
        old = _open(document, target, passphrase)
        following = document.get(NEXT)
        generation = _integer(document, "generation") + 1
        if isinstance(following, dict):
            return Rekey(old, _open(following, target, passphrase), generation)
        new = MasterKey.generate()
        if document.get("version") == KEY_FILE_VERSION:
            if document.get("kdf") and passphrase is None:
                passphrase = os.environ.get(PASSPHRASE_ENV)
            sealed = key_document(new, passphrase if document.get("kdf") else None)
        else:
            wrapped = WrappedKeyFile.from_document(document, target)
            sealed = _wrap_under(new, wrapped.provider, wrapped.kek_version).document()
        sealed["generation"] = generation
        sealed["kek_version"] = _integer(document, "kek_version")  # the same KEK still wraps it
        write_atomically(target, {**document, NEXT: sealed}, replace=True)
        ring = load_keys(target, passphrase=passphrase)  # read back: both keys open
        if ring.fingerprint() != old.fingerprint() or not holds(ring, new.fingerprint()):
            raise WrongKeyError(f"{target}: the key file does not open to its two keys")
        return Rekey(old, new, generation)


def finish_rekey(path: str | os.PathLike[str], passphrase: str | None = None) -> KeyStatus:
    """Make a re-key's new key the key file's only key: the old one is destroyed.

    Call it once no table is under the old key (``veil.load.rekey`` checks
    the design first). Atomic: a process killed meanwhile leaves the file
    with both keys, or with the new one alone.
    """
    target = Path(path)
    with rotation_lock(target):
        document = read_key_document(target)
        following = document.get(NEXT)
        if isinstance(following, dict):
            new = _open(following, target, passphrase)
            write_atomically(target, following, replace=True)
            if load_key(target, passphrase).fingerprint() != new.fingerprint():
                raise WrongKeyError(f"{target}: the re-keyed file does not open to the new key")
    return key_status(target)


def kept_by(path: str | os.PathLike[str], provider: str) -> bool:
    """Whether the key at ``path`` is wrapped by ``provider`` (a URI, or ``file``)."""
    status = key_status(path)
    if kind_of(provider) == FILE or status.provider == FILE:
        return kind_of(provider) == status.provider
    return _uri_of(Path(path)) == provider_for(provider).uri


def _wrap(key: MasterKey, provider_uri: str, kek_version: int) -> WrappedKeyFile:
    provider = provider_for(provider_uri)
    return _wrap_under(key, reference(provider, provider.new_kek()), kek_version)


def _wrap_under(key: MasterKey, ref: Mapping[str, str], kek_version: int) -> WrappedKeyFile:
    """``key`` sealed under the KEK ``ref`` names (made anew, or the current one's)."""
    provider = provider_of(ref)
    aad = associated_data(ref)
    envelope = key.sealed_by(lambda secret: provider.seal(ref["key_id"], secret, aad))
    # Open it once before it is written: a provider that seals but cannot open
    # (no right to decrypt with the new KEK) must not be left holding the only copy.
    opened = MasterKey(provider.open(ref["key_id"], envelope, aad))
    if opened.fingerprint() != key.fingerprint():
        raise WrongKeyError(f"{provider.uri} did not give back the key it wrapped")
    return WrappedKeyFile(ref, key.fingerprint(), envelope, kek_version)


def _uri_of(target: Path) -> str:
    wrapped = WrappedKeyFile.from_document(read_key_document(target), target)
    return wrapped.provider["uri"]
