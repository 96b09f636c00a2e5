"""Key providers: who holds the key-encryption key (KEK) a master key is wrapped under.

A provider is named by a URI: ``kmip://host:port?...`` (a KMIP 1.x server,
``veil.keys.kmip``) or ``pkcs11:token=...`` (an HSM through PKCS#11,
``veil.keys.pkcs11``). ``file`` (the key file itself, optionally under a
passphrase) is no provider object: its key files are version 1
(``veil.crypto.keys``). Each provider module imports its client library only
when it is used, so ``veil --help`` and plain key files never load them.

A provider's reference, stored in the key file beside the wrapped key, is
``{"kind", "uri", "key_id"}``: the URI holds no secret (a PIN or password
comes from the environment or a file it names), so the client directory
never holds what unwraps the key.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

from veil.errors import KeyProviderError
from veil.keys.envelope import Envelope

FILE = "file"
KINDS = {"kmip": "veil.keys.kmip", "pkcs11": "veil.keys.pkcs11"}


class KeyProvider(Protocol):
    """A KEK holder: makes KEKs and seals or opens a data key under one."""

    kind: str
    uri: str  # canonical, secret-free: what the key file stores

    def new_kek(self) -> str:
        """Create a fresh KEK; returns its id within the provider."""
        ...

    def seal(self, key_id: str, data_key: bytes, aad: bytes) -> Envelope: ...

    def open(self, key_id: str, envelope: Envelope, aad: bytes) -> bytes: ...


def kind_of(uri: str) -> str:
    """``kmip://h:p`` -> ``kmip``; ``pkcs11:token=x`` -> ``pkcs11``; ``file`` -> ``file``."""
    if uri == FILE or uri.startswith(f"{FILE}:"):
        return FILE
    scheme = uri.partition(":")[0].lower()
    if scheme not in KINDS or ":" not in uri:
        raise KeyProviderError(
            f"unknown key provider {uri!r}: give `file`, `kmip://HOST:PORT?ca=...&cert=...&key=...` "
            "or `pkcs11:token=LABEL?module-path=...`"
        )
    return scheme


def provider_for(uri: str) -> KeyProvider:
    """The provider a URI names (its client library is imported here)."""
    kind = kind_of(uri)
    if kind == FILE:
        raise KeyProviderError("the file provider keeps the key in the key file itself")
    module = importlib.import_module(KINDS[kind])
    provider: KeyProvider = module.from_uri(uri)
    return provider


def reference(provider: KeyProvider, key_id: str) -> dict[str, str]:
    return {"kind": provider.kind, "uri": provider.uri, "key_id": key_id}


def provider_of(ref: Mapping[str, str]) -> KeyProvider:
    """The provider a stored reference names."""
    provider = provider_for(ref["uri"])
    if provider.kind != ref["kind"]:
        raise KeyProviderError(f"the key file names provider {ref['kind']} for {ref['uri']}")
    return provider


def describe(ref: Mapping[str, str]) -> str:
    return f"{ref['uri']} (key {ref['key_id']})"


@contextmanager
def unreachable(uri: str, doing: str) -> Iterator[None]:
    """Turn a provider's connection failure into one error in the user's terms."""
    try:
        yield
    except KeyProviderError:
        raise
    except OSError as exc:  # refused, timed out, TLS failed, module missing
        reason = exc.strerror or str(exc) or type(exc).__name__
        if exc.filename:  # a certificate, key or module file
            reason = f"{reason}: {exc.filename}"
        raise KeyProviderError(
            f"cannot reach the key provider {uri} to {doing} ({reason}); the master key is "
            "wrapped by it, so nothing was opened: start the provider, or check its "
            "address, certificates or PIN"
        ) from None
