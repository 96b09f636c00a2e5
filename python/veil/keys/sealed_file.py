"""A client-directory file sealed under the master key, for what a later process reuses.

``derivations.sealed`` (Paillier primes) and ``plans.sealed`` (split plans)
keep key-derived material between processes; both are sealed the same way:

- **Envelope**: a version byte, a 12-byte nonce, then AES-256-GCM of the body
  under a key HKDF derives from the master key for the file's purpose
  (``label``), with the file's ``aad`` and the master key's fingerprint as
  associated data.
- **Written whole**: a temporary file of mode 0600 in the same directory,
  renamed over the old one, so a reader sees one whole version; a directory
  that cannot be written costs only the work again.
- **Read as absent** when it is missing, has another version byte, or fails
  its tag (tampered, or sealed under another master key: written before a
  re-key). The caller checks what the body says.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from veil.crypto.keys import KeyLabel, MasterKey

NONCE_BYTES = 12


class SealedFile:
    """``path``, sealed under ``master``'s key for ``label``."""

    def __init__(self, path: Path, master: MasterKey, label: KeyLabel, aad: bytes, version: int):
        self.path = path
        self.version = version
        self._master = master
        self._label = label
        self._aad = aad

    def read(self) -> bytes | None:
        """The body, or None if there is none this key opens."""
        try:
            sealed = self.path.read_bytes()
        except OSError:
            return None
        if len(sealed) <= 1 + NONCE_BYTES or sealed[0] != self.version:
            return None
        nonce, body = sealed[1 : 1 + NONCE_BYTES], sealed[1 + NONCE_BYTES :]
        try:
            return self._aead().decrypt(nonce, body, self._associated())
        except InvalidTag:
            return None  # tampered, or sealed under another (an earlier) master key

    def write(self, body: bytes) -> None:
        """Seal ``body`` and replace the file with it (nothing if the directory refuses)."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = (
            bytes([self.version]) + nonce + self._aead().encrypt(nonce, body, self._associated())
        )
        with contextlib.suppress(OSError):
            fd, staging = tempfile.mkstemp(
                dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
            )
            try:
                os.fchmod(fd, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(sealed)
                os.replace(staging, self.path)
            except OSError:
                Path(staging).unlink(missing_ok=True)

    def fingerprint(self) -> str:
        return self._master.fingerprint()

    def _aead(self) -> AESGCM:
        return AESGCM(self._master.derive(self._label, 32))

    def _associated(self) -> bytes:
        return self._aad + self.fingerprint().encode()
