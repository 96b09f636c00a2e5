"""The ``pkcs11:`` key provider: a KEK inside an HSM, reached through PKCS#11.

The URI follows RFC 7512: ``pkcs11:token=LABEL;object=veil-kek?module-path=
/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/path/to/pin``. ``token``
(or ``serial``) says which token, ``object`` the label Veil gives its KEKs
(default ``veil-kek``), ``module-path`` the PKCS#11 library (or
``VEIL_PKCS11_MODULE``). The user PIN is read from the file ``pin-source``
names, else from ``VEIL_PKCS11_PIN``; a ``pin-value`` in the URI is refused,
since the URI is stored in the client directory.

A KEK is an AES-256 key generated inside the token (``CKA_TOKEN``,
``CKA_SENSITIVE``, not ``CKA_EXTRACTABLE``), found again by a random
``CKA_ID`` that the key file records. The data key is sealed and opened
with AES-256-GCM (``CKM_AES_GCM``) inside the token, so the KEK never
leaves it; the envelope is laid out as when Veil seals in memory.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from veil.errors import KeyProviderError, WrongKeyError
from veil.keys.envelope import TAG_BYTES, Envelope
from veil.keys.providers import unreachable

PIN_ENV = "VEIL_PKCS11_PIN"
MODULE_ENV = "VEIL_PKCS11_MODULE"
DEFAULT_OBJECT = "veil-kek"
PATH_ATTRIBUTES = ("token", "serial", "object")
QUERY_ATTRIBUTES = ("module-path", "pin-source")
# python-pkcs11's names of the failures a user can fix, in the user's terms
REASONS = {
    "PinIncorrect": f"the user PIN is wrong (from {PIN_ENV} or pin-source)",
    "PinLocked": "the token's user PIN is locked (too many wrong PINs): its security officer "
    "must reset it",
    "PinExpired": "the token's user PIN has expired: set a new one",
    "NoSuchToken": "no token with that label or serial is present (softhsm2-util --show-slots "
    "or the HSM's tools list them)",
    "MultipleTokensReturned": "several tokens match: add serial= to the URI",
    "TokenNotPresent": "the token is not present",
    "DeviceRemoved": "the token was removed",
}


class Pkcs11Provider:
    kind = "pkcs11"

    def __init__(self, path: dict[str, str], query: dict[str, str]):
        self.path, self.query = path, query
        self.object = path.get("object", DEFAULT_OBJECT)
        encoded = ";".join(f"{k}={quote(v, safe='')}" for k, v in sorted(path.items()))
        params = "&".join(f"{k}={quote(v, safe='/:')}" for k, v in sorted(query.items()))
        self.uri = f"pkcs11:{encoded}" + (f"?{params}" if params else "")

    def new_kek(self) -> str:
        key_id = secrets.token_bytes(16)
        with self._session("generate a key-encryption key") as (session, pkcs11):
            session.generate_key(
                pkcs11.KeyType.AES,
                256,
                id=key_id,
                label=self.object,
                store=True,
                template={
                    pkcs11.Attribute.SENSITIVE: True,
                    pkcs11.Attribute.EXTRACTABLE: False,
                },
            )
        return key_id.hex()

    def seal(self, key_id: str, data_key: bytes, aad: bytes) -> Envelope:
        nonce = Envelope.fresh_nonce()
        with self._session(f"seal under key {key_id}") as (session, pkcs11):
            sealed = self._key(session, pkcs11, key_id).encrypt(
                data_key, mechanism=pkcs11.Mechanism.AES_GCM, mechanism_param=_gcm(nonce, aad)
            )
        return Envelope(nonce, bytes(sealed))

    def open(self, key_id: str, envelope: Envelope, aad: bytes) -> bytes:
        with self._session(f"unwrap under key {key_id}") as (session, pkcs11):
            key = self._key(session, pkcs11, key_id)
            try:
                return bytes(
                    key.decrypt(
                        envelope.sealed,
                        mechanism=pkcs11.Mechanism.AES_GCM,
                        mechanism_param=_gcm(envelope.nonce, aad),
                    )
                )
            except pkcs11.PKCS11Error:
                # A token reports a failed GCM tag in its own words (SoftHSM: a
                # general error); the key exists, so the envelope does not belong to it.
                raise WrongKeyError(
                    f"key {key_id} of {self.uri} does not open this wrapped key (another "
                    "key with the same id, or a tampered key file)"
                ) from None

    def _key(self, session: Any, pkcs11: Any, key_id: str) -> Any:
        try:
            return session.get_key(
                object_class=pkcs11.ObjectClass.SECRET_KEY, id=bytes.fromhex(key_id)
            )
        except pkcs11.NoSuchKey:
            raise KeyProviderError(
                f"the token of {self.uri} has no key-encryption key {key_id}: it was deleted "
                "or this is another token; without it the master key cannot be unwrapped"
            ) from None

    @contextmanager
    def _session(self, doing: str) -> Iterator[tuple[Any, Any]]:
        with unreachable(self.uri, doing):
            import pkcs11

            try:
                library = pkcs11.lib(self._module())
                token = library.get_token(
                    token_label=self.path.get("token"), token_serial=_serial(self.path)
                )
                with token.open(user_pin=self._pin(), rw=True) as session:
                    yield session, pkcs11
            except pkcs11.PKCS11Error as exc:
                name = type(exc).__name__
                reason = REASONS.get(name, f"{name} {exc}".rstrip())
                raise KeyProviderError(
                    f"the PKCS#11 token of {self.uri} refused to {doing}: {reason}"
                ) from None
            except RuntimeError as exc:  # the module cannot be loaded
                raise KeyProviderError(
                    f"cannot load the PKCS#11 module of {self.uri} to {doing}: {exc}"
                ) from None

    def _module(self) -> str:
        module = self.query.get("module-path") or os.environ.get(MODULE_ENV)
        if not module:
            raise KeyProviderError(
                f"{self.uri} names no PKCS#11 module: add ?module-path=/path/to/lib.so or "
                f"set {MODULE_ENV}"
            )
        if not Path(module).is_file():
            raise KeyProviderError(f"the PKCS#11 module {module} of {self.uri} does not exist")
        return module

    def _pin(self) -> str:
        source = self.query.get("pin-source")
        if source:
            path = Path(source.removeprefix("file:"))
            try:
                return path.read_text().strip()
            except OSError as exc:
                raise KeyProviderError(
                    f"cannot read the PIN file {path} of {self.uri}: {exc.strerror}"
                ) from None
        pin = os.environ.get(PIN_ENV)
        if not pin:
            raise KeyProviderError(
                f"the token of {self.uri} needs its user PIN: set {PIN_ENV} or add "
                "?pin-source=file:/path/to/pin"
            )
        return pin


def _gcm(nonce: bytes, aad: bytes) -> Any:
    from pkcs11.mechanisms import GCMParams

    return GCMParams(nonce, aad, TAG_BYTES * 8)


def _serial(path: dict[str, str]) -> bytes | None:
    return path["serial"].encode() if "serial" in path else None


def from_uri(uri: str) -> Pkcs11Provider:
    if "pin-value=" in uri:
        raise KeyProviderError(
            "a pkcs11: URI with pin-value would store the PIN in the client directory: "
            f"give pin-source=file:PATH or set {PIN_ENV} instead"
        )
    body = uri.partition(":")[2]
    path_text, _, query_text = body.partition("?")
    path = _attributes(path_text, ";", PATH_ATTRIBUTES, uri)
    query = _attributes(query_text, "&", QUERY_ATTRIBUTES, uri)
    if "token" not in path and "serial" not in path:
        raise KeyProviderError(f"{uri!r} names no token: pkcs11:token=LABEL?module-path=...")
    if "module-path" in query:
        query["module-path"] = str(Path(query["module-path"]).expanduser().absolute())
    if "pin-source" in query:
        pin_file = Path(query["pin-source"].removeprefix("file:")).expanduser().resolve()
        query["pin-source"] = f"file:{pin_file}"
    return Pkcs11Provider(path, query)


def _attributes(text: str, separator: str, allowed: tuple[str, ...], uri: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in filter(None, text.split(separator)):
        name, _, value = part.partition("=")
        if name not in allowed:
            raise KeyProviderError(
                f"{uri!r}: Veil does not use the PKCS#11 URI attribute {name!r} (it takes "
                f"{', '.join(PATH_ATTRIBUTES + QUERY_ATTRIBUTES)})"
            )
        found[name] = unquote(value)
    return found
