"""One collection's chained ``h_add`` fields: their position claims in the server.

A chained value is written at a position claimed in its group's chain, and a grouped
sum is checked against the chains' lengths read after it (veil.documents.chains).
Each chained field keeps its claims in a server collection of its own;
:class:`Positions` holds them for one collection, so that writes claim and
aggregations read lengths and drift counters through one object.
"""

from __future__ import annotations

import collections
from typing import Any

from pymongo.collection import Collection as ServerCollection
from pymongo.database import Database as ServerDatabase

from veil.documents.chains import ChainClaims, Slot
from veil.documents.codec import DocumentCodec
from veil.documents.drift import DRIFT_CHAIN
from veil.documents.fields import FieldCipher
from veil.documents.server import server_errors


class Positions:
    """The position claims of each chained field of one collection, by stored name."""

    def __init__(self, codec: DocumentCodec, database: ServerDatabase[Any], server_name: str):
        self.codec = codec
        self._chains = {
            cipher.name: ChainClaims(database[f"{server_name}{cipher.name}k"])
            for cipher in codec.ciphers.values()
            if cipher.chained is not None
        }

    @property
    def collections(self) -> list[ServerCollection[Any]]:
        """The claims collections, dropped with the collection."""
        return [claims.collection for claims in self._chains.values()]

    def of(self, cipher: FieldCipher) -> ChainClaims:
        return self._chains[cipher.name]

    def restart(self) -> None:
        """Forget every cached epoch and chain end: the collection was dropped, and its
        next values start new chains under a new epoch."""
        for name, claims in self._chains.items():
            self._chains[name] = ChainClaims(claims.collection)

    def claim(self, cipher: FieldCipher, groups: list[Any]) -> list[Slot]:
        """Slots for a batch's values of a chained field: one claim per chain."""
        assert cipher.chained is not None
        with server_errors("claiming chain positions", self.codec):
            claims, chains = self._chains_of(cipher, groups)
            first = {c: claims.claim(c, n) for c, n in collections.Counter(chains).items()}
        sub = cipher.chained.layout.sub_chain if claims.sub_chains else lambda _: 0
        out = []
        for chain in chains:
            out.append((chain, first[chain], sub(first[chain])))
            first[chain] += 1
        return out

    def claim_drift(self, cipher: FieldCipher, size: int) -> int:
        """Claim ``size`` units of a field's drift counter (veil.documents.drift); the
        first one claimed."""
        with server_errors("claiming drift", self.codec):
            return self._chains[cipher.name].claim(DRIFT_CHAIN, size)

    def known_longer(self, cipher: FieldCipher) -> bool:
        """Whether a chain of this field is known to need sub-chains (a claim or a length
        read by this client went past its capacity) and its words store them."""
        assert cipher.chained is not None
        capacity = cipher.chained.layout.capacity
        return self.split(cipher) and self._chains[cipher.name].known_longer(capacity)

    def summed_longer(self, cipher: FieldCipher) -> None:
        """Note that a sum found a run of this field's positions past a chain's capacity:
        this client groups its sums by sub-chain from now on."""
        self._chains[cipher.name].summed_longer = True

    def split(self, cipher: FieldCipher) -> bool:
        """Whether this field's words past a chain's capacity store their sub-chain."""
        claims = self._chains[cipher.name]
        claims.epoch()
        return claims.sub_chains

    def numbers(self, cipher: FieldCipher, groups: list[Any]) -> tuple[list[int], int]:
        """The chain number of each group value of a chained field (a keyed hash: no
        read) and the field's drift counter, read now."""
        with server_errors("reading the drift counter", self.codec):
            claims, chains = self._chains_of(cipher, groups)
            return chains, claims.lengths([DRIFT_CHAIN])[DRIFT_CHAIN]

    def lengths(self, cipher: FieldCipher, groups: list[Any]) -> tuple[list[tuple[int, int]], int]:
        """(chain, claimed length) of each group value of a chained field, and the field's
        drift counter, read now in one parallel wave."""
        with server_errors("reading chain lengths", self.codec):
            claims, chains = self._chains_of(cipher, groups)
            lengths = claims.lengths([*chains, DRIFT_CHAIN])
        return [(c, lengths[c]) for c in chains], lengths.get(DRIFT_CHAIN, 0)

    def _chains_of(self, cipher: FieldCipher, groups: list[Any]) -> tuple[ChainClaims, list[int]]:
        """A chained field's claims and the chain number of each group value."""
        assert cipher.chained is not None
        claims = self._chains[cipher.name]
        epoch = claims.epoch()
        return claims, [cipher.chained.keys.chain_of(epoch, group) for group in groups]
