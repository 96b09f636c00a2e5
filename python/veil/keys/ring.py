"""Two key generations at once: the key ring a client directory opens during a re-key.

A re-key (``veil rotate --rekey``, ``veil.load.rekey``) moves every table
from the master key it was encrypted under to a new one, table by table,
while sessions keep running. Between its first table and its last, some
tables are under the old key and some under the new, so a session needs
both, and must know which derives each working key.

The design says so, in the key scopes themselves: a re-encrypted table's
scopes carry a *marker* naming the new key's public fingerprint
(``orders.o_orderkey`` becomes ``orders.o_orderkey<RS>key:<fingerprint>``,
RS being the ASCII record separator, which no scope Veil makes contains).
Every working key of a table is derived from one of its scopes (a column's,
its ASHE sums', its Paillier group's, with the row-bound and onion-layer
decorations around it), so a :class:`KeyRing` derives a label whose scope
holds a marker from the key that marker names, with the marker taken out of
the label, and any other label from the *base* key, the one the design's
``key_fingerprint`` names. The working keys of a scope under the new key
are thus exactly those an unmarked scope gets once the new key is the base:
the re-key ends by taking the markers out of the design and making the new
key the base, which changes no ciphertext.

Because the scope is in the design file, which is replaced whole and
atomically with each table's swap, which key opens a table is always
decided by the same file that names its server tables. Two columns of one
key group in tables of different generations have different scopes, so the
planner never compares their ciphertexts on the server during a re-key
(it joins them on the client); once both are re-keyed they compare again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from veil.crypto.keys import KeyLabel, MasterKey
from veil.errors import KeyFileError

MARK = "\x1ekey:"
_MARKED = re.compile(re.escape(MARK) + "([0-9a-f]{32})")


def marked(scope: str, fingerprint: str) -> str:
    """``scope`` derived from the key of ``fingerprint`` (any other marker taken off)."""
    return unmarked(scope) + MARK + fingerprint


def unmarked(scope: str) -> str:
    return _MARKED.sub("", scope)


def marker_of(scope: str) -> str | None:
    """The fingerprint a scope's marker names, if it has one."""
    found = _MARKED.search(scope)
    return found.group(1) if found is not None else None


class KeyRing(MasterKey):
    """A base master key and the other generations' keys, chosen per label by its scope.

    It is a ``MasterKey`` to everything that derives keys (sessions, the
    loader, the ciphers), so none of them needs to know a re-key is running.
    Its fingerprint, and what ``sealed_by`` hands out, are the base key's.
    """

    __slots__ = ("_base", "_keys")

    def __init__(self, base: MasterKey, keys: Iterable[MasterKey]):
        base.sealed_by(lambda secret: MasterKey.__init__(self, secret))
        self._base = base
        self._keys = {key.fingerprint(): key for key in [base, *keys]}

    def derive(self, label: KeyLabel, length: int = 32) -> bytes:
        fingerprint = marker_of(label.scope)
        if fingerprint is None:
            return self._base.derive(label, length)
        key = self._keys.get(fingerprint)
        if key is None:
            raise KeyFileError(
                f"this client directory's design names tables under key {fingerprint}, which "
                "its key file does not hold (a re-key's key file was replaced by an older copy?)"
            )
        return key.derive(KeyLabel(label.scheme, unmarked(label.scope), label.version), length)

    def fingerprint(self) -> str:
        return self._base.fingerprint()

    def holds(self, fingerprint: str) -> bool:
        return fingerprint in self._keys

    def __repr__(self) -> str:
        return f"KeyRing(base={self.fingerprint()}, keys={sorted(self._keys)})"


def holds(master: MasterKey, fingerprint: str) -> bool:
    """Can ``master`` (a key or a ring) derive the keys of ``fingerprint``?"""
    if isinstance(master, KeyRing):
        return master.holds(fingerprint)
    return master.fingerprint() == fingerprint
