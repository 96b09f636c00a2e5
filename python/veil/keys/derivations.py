"""Derivations too slow to repeat in every process, kept in the client directory, sealed.

Most working keys are one HKDF call (microseconds), but a Paillier key needs
two 1024-bit primes found from its seed: 0.06-1 s each key, which every new
process paid again on its first query over a HOM column. ``derivations.sealed``
keeps what such derivations found, so that a later process reads instead of
searching:

- **What it holds**: for each Paillier key derived, its two primes and its
  DJN base ``h_s = h^n mod n^2``, under the SHA-256 of the key's seed (the
  seed itself is not stored). That is the
  private key itself, so the file is sealed: AES-256-GCM under a key HKDF
  derives from the master key (``KeyLabel("derivations", "client-dir")``),
  the master key's fingerprint as associated data. Never in the clear, mode
  0600, written whole (temporary file, rename).
- **Envelope** (``veil.keys.sealed_file``): a version byte (``1``), a 12-byte nonce, the ciphertext of a
  JSON document (the fingerprint and the entries).
- **When it is ignored**: a file that does not open (another version byte,
  a failed tag: tampered, or sealed under another master key, i.e. written
  before a re-key), whose fingerprint is not the key's, or whose primes are
  not primes of the expected size, is read as empty and replaced on the next
  write. A re-key (``veil rotate --rekey``) changes the master key, so it
  invalidates the file by itself; re-wrapping the master key under a new KEK
  leaves the master key, and so the file, as they were.

A lost or unwritable file costs only the search again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import gmpy2

from veil.crypto.keys import KeyLabel, MasterKey
from veil.keys.sealed_file import SealedFile

FILE_NAME = "derivations.sealed"
VERSION = 1
_AAD = b"veil derivations.sealed v1 "


class SealedDerivations:
    """One client directory's ``derivations.sealed``, opened with its master key."""

    def __init__(self, client_dir: str | os.PathLike[str], master: MasterKey):
        self.path = Path(client_dir) / FILE_NAME
        label = KeyLabel("derivations", "client-dir")
        self._file = SealedFile(self.path, master, label, _AAD, VERSION)
        self._entries: dict[str, object] | None = None  # read on first use

    # -- Paillier keys (veil.crypto.paillier.KeyStore) ---------------------

    def paillier_key(self, seed: bytes, bits: int) -> tuple[int, int, int] | None:
        found = self._read().get(_entry(seed, bits))
        if not isinstance(found, list) or len(found) != 3:
            return None
        p, q, h_s = (int(text, 16) for text in found)
        return (p, q, h_s) if _is_key_of(p, q, h_s, bits) else None

    def remember_paillier_key(self, seed: bytes, bits: int, p: int, q: int, h_s: int) -> None:
        entries = {**self._read(fresh=True), _entry(seed, bits): [f"{p:x}", f"{q:x}", f"{h_s:x}"]}
        self._entries = entries
        self._write(entries)

    # -- the file ----------------------------------------------------------

    def _read(self, *, fresh: bool = False) -> dict[str, object]:
        """The entries on disk (another process may have added some); {} if unusable."""
        if self._entries is None or fresh:
            self._entries = self._opened()
        return self._entries

    def _opened(self) -> dict[str, object]:
        body = self._file.read()
        if body is None:
            return {}
        try:
            document = json.loads(body)
        except ValueError:
            return {}
        if (
            not isinstance(document, dict)
            or document.get("fingerprint") != self._file.fingerprint()
        ):
            return {}
        entries = document.get("paillier_keys")
        return entries if isinstance(entries, dict) else {}

    def _write(self, entries: dict[str, object]) -> None:
        document = {"fingerprint": self._file.fingerprint(), "paillier_keys": entries}
        self._file.write(json.dumps(document).encode())


def _entry(seed: bytes, bits: int) -> str:
    """An entry's name: the seed's hash, never the seed."""
    return f"{bits}:{hashlib.sha256(b'veil paillier seed ' + seed).hexdigest()}"


def _is_key_of(p: int, q: int, h_s: int, bits: int) -> bool:
    """A cheap check that an entry has the shape a derivation of ``bits`` gives."""
    half = bits // 2
    return (
        p.bit_length() == half
        and q.bit_length() == half
        and p != q
        and 0 < h_s < (p * q) ** 2
        and bool(gmpy2.is_bpsw_prp(p))
        and bool(gmpy2.is_bpsw_prp(q))
    )
