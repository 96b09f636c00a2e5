"""The ``kmip://`` key provider: a KEK kept by a KMIP 1.x server (PyKMIP as the client).

``kmip://HOST:PORT?ca=CA.pem&cert=CLIENT.pem&key=CLIENT.key`` names the
server and the TLS files that authenticate both sides (mutual TLS, as KMIP
servers require); ``username=NAME`` adds KMIP credentials, whose password is
read from ``VEIL_KMIP_PASSWORD`` and never stored; ``version=1.0`` (to 1.4)
speaks an older protocol version to a server that knows no later one (the
default is PyKMIP's, 1.2). Relative paths are made
absolute when the key is made, so the client directory works from anywhere.

A KEK is an AES-256 symmetric key made with KMIP's Create (named
``veil-kek``) and activated. To open the master key Veil asks for the KEK
with Get, which every KMIP version has (Encrypt/Decrypt came only with KMIP
1.2), and opens the envelope (AES-256-GCM) in memory; the KEK is never
written anywhere. Each operation opens its own TLS connection and closes it.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from veil.errors import KeyProviderError
from veil.keys.envelope import Envelope, open_locally, seal_locally
from veil.keys.providers import unreachable

PASSWORD_ENV = "VEIL_KMIP_PASSWORD"
DEFAULT_PORT = 5696
TLS_FILES = ("ca", "cert", "key")
TIMEOUT_SECONDS = 10.0
KEK_NAME = "veil-kek"
VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4")
# KMIP's result reasons a user can act on, in the user's terms
REASONS = {
    "ITEM_NOT_FOUND": "the server has no such key (destroyed, or this is another server); "
    "without it the master key cannot be unwrapped",
    "PERMISSION_DENIED": "this client certificate (or user) may not use that key",
    "OBJECT_ARCHIVED": "the key is archived: recover it on the server first",
    "AUTHENTICATION_NOT_SUCCESSFUL": "the server did not accept the client's credentials",
    "OPERATION_NOT_SUPPORTED": "the server does not support this operation",
}


class KmipProvider:
    kind = "kmip"

    def __init__(
        self,
        host: str,
        port: int,
        files: dict[str, str],
        username: str | None,
        version: str | None = None,
    ):
        self.host, self.port, self.files, self.username = host, port, files, username
        self.version = version
        query = dict(sorted(files.items()))
        if username:
            query["username"] = username
        if version:
            query["version"] = version
        self.uri = f"kmip://{host}:{port}" + (f"?{urlencode(query, safe='/')}" if query else "")

    def new_kek(self) -> str:
        with self._client("create a key-encryption key") as client:
            enums = _kmip_enums()
            uid = client.create(enums.CryptographicAlgorithm.AES, 256, name=KEK_NAME)
            client.activate(uid)
            return str(uid)

    def seal(self, key_id: str, data_key: bytes, aad: bytes) -> Envelope:
        return seal_locally(self._kek(key_id), data_key, aad)

    def open(self, key_id: str, envelope: Envelope, aad: bytes) -> bytes:
        return open_locally(self._kek(key_id), envelope, aad, f"{key_id} of {self.uri}")

    def _kek(self, key_id: str) -> bytes:
        with self._client(f"get key-encryption key {key_id}") as client:
            managed = client.get(key_id)
        value = getattr(managed, "value", None)
        if not isinstance(value, bytes) or len(value) != 32:
            raise KeyProviderError(
                f"key {key_id} of {self.uri} is not an AES-256 key; it cannot be Veil's "
                "key-encryption key"
            )
        return value

    @contextmanager
    def _client(self, doing: str) -> Iterator[Any]:
        """An open PyKMIP client; its failures become KeyProviderErrors."""
        with _quiet(), unreachable(self.uri, doing):
            from kmip.pie.client import ProxyKmipClient
            from kmip.pie.exceptions import KmipOperationFailure

            client = ProxyKmipClient(
                hostname=self.host,
                port=self.port,
                cert=self.files.get("cert"),
                key=self.files.get("key"),
                ca=self.files.get("ca"),
                username=self.username,
                password=os.environ.get(PASSWORD_ENV) if self.username else None,
                config_file=os.devnull,  # no /etc/pykmip settings: only what the URI says
                kmip_version=_kmip_enums().KMIPVersion(float(self.version))
                if self.version
                else None,
            )
            client.proxy.timeout = TIMEOUT_SECONDS
            client.open()
            try:
                yield client
            except KmipOperationFailure as exc:
                reason = REASONS.get(exc.reason.name, f"{exc.reason.name}: {exc.message}")
                raise KeyProviderError(
                    f"the KMIP server {self.uri} refused to {doing}: {reason}"
                ) from None
            finally:
                client.close()


# One KMIP operation at a time in a process: _quiet changes process-wide state
# (a logger's level, the warning filters), which threads opening sessions at
# once (veil serve) would otherwise restore in the wrong order.
_KMIP_LOCK = threading.Lock()


@contextmanager
def _quiet() -> Iterator[None]:
    """PyKMIP logs connection errors itself (Veil reports them) and warns of its own
    deprecated calls (ssl.PROTOCOL_TLS, SQLAlchemy 1.x names): neither is the user's."""
    logger = logging.getLogger("kmip")
    with _KMIP_LOCK:
        level = logger.level
        logger.setLevel(logging.CRITICAL)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", PendingDeprecationWarning)
                yield
        finally:
            logger.setLevel(level)


def _kmip_enums() -> Any:
    from kmip.core import enums

    return enums


def from_uri(uri: str) -> KmipProvider:
    parts = urlsplit(uri)
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise KeyProviderError(f"{uri!r} has a bad port") from None
    if not parts.hostname:
        raise KeyProviderError(f"{uri!r} names no host: kmip://HOST:PORT?ca=...&cert=...&key=...")
    query = dict(parse_qsl(parts.query))
    unknown = set(query) - {*TLS_FILES, "username", "version"}
    if unknown:
        raise KeyProviderError(
            f"{uri!r}: unknown parameter(s) {', '.join(sorted(unknown))}; a kmip:// URI takes "
            "ca, cert, key, username and version (the password comes from "
            f"{PASSWORD_ENV}, never the URI)"
        )
    version = query.get("version")
    if version is not None and version not in VERSIONS:
        raise KeyProviderError(f"{uri!r}: version is one of {', '.join(VERSIONS)}")
    files = {
        name: str(Path(query[name]).expanduser().resolve()) for name in TLS_FILES if name in query
    }
    return KmipProvider(parts.hostname, port, files, query.get("username"), version)
