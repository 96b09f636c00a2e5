"""Per-group ASHE chains: server sums of an ``h_add`` field without the summed ids.

An ASHE pad is ``F(i) - F(i - 1)``, so the pads of consecutive ids telescope.
A *chained* ``h_add`` field (schema ``{"attr": "h_add", "chain": "g",
"domain": [lo, hi]}``, Seabed's per-group counters) numbers the documents of
each value of its grouping field ``g`` 1..n in that group's own chain, and
pads each under the chain's own PRF key. An unfiltered ``$group`` by ``g``
then needs, per group, only ``F(n) - F(0)`` to remove the pads: one server
aggregation, no find of ids.

One stored word per value, summed by the server's int64 ``$sum``::

    word = (E << k) + 1,   E = (value - lo + pad(position)) mod 2**M

The low ``k`` bits of a group's summed words count the documents summed
(each adds 1, outside the pad), so the client proves the sum complete: it
equals the chain length ``n`` read from the claims *after* the aggregation
only if the summed positions are exactly 1..n (positions are unique and each
was claimed before its document was written). A mismatch (a deletion, a
value re-written at a new position, a failed insert, a document moved to
another group) sends the query to the fetched path: never a wrong answer.
``M`` and ``k`` come from the declared domain: ``M`` bits hold the sum of up
to ``capacity`` shifted values, ``k`` bits their count, and ``capacity``
words sum below ``2**63`` (FerretDB and MongoDB turn a larger int64 sum into
an inexact double). A chain longer than ``capacity`` is summed in *sub-chains*
of ``capacity`` positions: a value at position ``p`` also stores its sub-chain
``(p − 1) // capacity`` (from the second on), the server groups by the key and
the sub-chain, and each sub-chain's sum is checked and opened as a chain of its
own (its pads telescope over its positions). Collections whose claims were
started before sub-chains (their epoch has no version) sum such chains by the
fetched path, since their words past ``capacity`` carry no sub-chain.

Positions are claimed with the one atomic test-and-set a MongoDB-wire server
gives (FerretDB's conditional updates are not atomic, see
:mod:`veil.documents.oretree`): inserting the claim document
``"<chain>@<n>"`` (positions n+1..n+count) into the field's claims
collection. A writer that loses reads the winner's claim and tries at its
end; a hint document ``"<chain>"`` remembers roughly where the chain ends so
claims and readers start near it. Every write of a chained value claims its
position in its group's chain, inserts and updates alike (an update reads the
document for its group; ``veil.documents.updates``), so each word in a group's
row is one of that chain's positions and the count check above is exact. An
update leaves a hole where the old value was: that group's sums are fetched
from then on.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import bson
import numpy as np
import pymongo.errors
from bson.int64 import Int64
from pymongo.collection import Collection as ServerCollection

from veil.crypto.ashe import Ashe
from veil.crypto.keys import KeyLabel, MasterKey
from veil.documents.chainlayout import ChainLayout
from veil.documents.drift import budget, sum_is_exact
from veil.documents.errors import DocumentsError, FieldTypeError, ServerError
from veil.documents.values import order_key
from veil.errors import MalformedCiphertextError

#: The epoch document of a claims collection: a random salt of every chain's key,
#: drawn once per collection, so a dropped and re-created collection never reuses a pad.
EPOCH = "epoch"
#: The epoch's version from which words past a chain's capacity store their sub-chain.
SUB_CHAINS = 2
_READERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="veil-chains")


class ChainKeys:
    """A chained field's per-chain ASHE keys and the chain number of each group value."""

    def __init__(self, master: MasterKey, where: str, group_spec: Any):
        self._key = master.derive(KeyLabel("documents-chain", where))
        self._group_spec = group_spec
        self._cache: dict[int, Ashe] = {}

    def chain_of(self, epoch: bytes, group: Any) -> int:
        """The 63-bit chain number of a group value (a keyed hash: equal values share it)."""
        digest = hmac.digest(self._key, epoch + self._identity(group), hashlib.sha256)
        return int.from_bytes(digest[:8], "big") >> 1

    def _identity(self, group: Any) -> bytes:
        if group is None:
            return b"n"
        if isinstance(group, list):  # an array groups as a whole, element by element
            parts = [self._identity(element) for element in group]
            return b"a" + b"".join(len(p).to_bytes(4, "big") + p for p in parts)
        if self._group_spec.attr == "index":  # the value the server groups by, one-to-one
            return b"o" + order_key(self._group_spec, group).to_bytes(16, "big", signed=True)
        return b"b" + bson.encode({"g": group})

    def ashe(self, chain: int) -> Ashe:
        found = self._cache.get(chain)
        if found is None:
            key = hmac.digest(self._key, b"chain" + chain.to_bytes(8, "big"), hashlib.sha256)
            found = self._cache[chain] = Ashe(key)
        return found

    def pad(self, chain: int, position: int) -> int:
        return self.ashe(chain).pad(position)

    def span_pads(self, chain: int, first: int, last: int) -> int:
        """The pads of positions first..last together: ``F(last) - F(first - 1)``."""
        return self.ashe(chain).pad_sum(runs=[(first, last)]) if last >= first else 0


#: Where a chained value is written: (chain, position, sub-chain); sub-chain 0 is not stored.
Slot = tuple[int, int, int]


class ChainedField:
    """A chained ``h_add`` field's stored forms: ``{"w": word, "c": chain, "p": position}``
    and ``"s": sub-chain`` from the second sub-chain on, kept flat at the field's name,
    name + ``c``, name + ``p`` and name + ``s``."""

    PARTS = ("c", "p", "s")

    def __init__(self, master: MasterKey, where: str, spec: Any, group_spec: Any):
        assert spec.domain is not None
        self.path = spec.path
        self.layout = ChainLayout.for_domain(spec.path, *spec.domain)
        self.keys = ChainKeys(master, where, group_spec)
        #: The drift any one value may carry: a value's decoding window (veil.documents.drift).
        #: Every chained field decodes in it and reads its drift counter, revealing or not,
        #: so a schema that stops revealing still reads values written while it did.
        self.drift_budget = budget(self.layout)

    def encrypt(self, values: list[Any], slots: list[Slot] | None = None) -> list[Any]:
        """Forms of ``values`` at ``slots`` of their non-null values, claimed in the
        server: a value never written at a claimed position could sit in a group's row
        uncounted by its chain, so there is no unclaimed form."""
        present = self.check(values)
        if present and slots is None:
            raise DocumentsError(f"field {self.path!r}: a chained value needs a claimed position")
        words = iter(self._words(present, slots or []))
        at = iter(slots or [])
        out: list[Any] = []
        for value in values:
            if value is None:
                out.append(None)
                continue
            chain, position, sub = next(at)
            form = {"w": Int64(next(words)), "c": Int64(chain), "p": Int64(position)}
            if sub:
                form["s"] = Int64(sub)
            out.append(form)
        return out

    def _words(self, present: list[int], positions: list[Slot]) -> list[int]:
        """``layout.word`` of each value at its position, one native call per chain: the
        shifted value's ASHE ciphertext mod ``2**64``, reduced mod ``2**M`` (which
        divides it), is ``(value - lo + pad) mod 2**M``."""
        layout = self.layout
        chains = np.array([c for c, _, _ in positions], dtype=np.int64)
        at = np.array([p for _, p, _ in positions], dtype=np.int64)
        shifted = np.array([v - layout.lo for v in present], dtype=np.int64)  # < 2**63
        words = np.empty(len(present), dtype=np.uint64)
        for chain in np.unique(chains):
            mine = np.flatnonzero(chains == chain)
            sealed = self.keys.ashe(int(chain)).encrypt(at[mine], shifted[mine])
            words[mine] = sealed.view(np.uint64) & np.uint64((1 << layout.sum_bits) - 1)
        return ((words << np.uint64(layout.count_bits)) + np.uint64(1)).tolist()

    def check(self, values: list[Any]) -> list[int]:
        """The non-null values, each an integer in the domain (else a clear error)."""
        present = [v for v in values if v is not None]
        for value in present:
            if isinstance(value, bool) or not isinstance(value, int):
                raise FieldTypeError(
                    f"field {self.path!r} is h_add: it takes integers, "
                    f"got {type(value).__name__} {value!r}"
                )
            self.layout.check(self.path, value)
        return present

    def value(self, form: dict[str, Any]) -> int:
        word, chain, position = int(form["w"]), int(form["c"]), int(form["p"])
        if self.layout.count(word) != 1:
            raise MalformedCiphertextError(f"field {self.path!r}: malformed chained h_add word")
        return self.layout.open(word, self.keys.pad(chain, position), 1, self.drift_budget)

    def group_sum(
        self, total: Any, chain: int, first: int, last: int, drift: int = 0
    ) -> int | None:
        """The plaintext sum of a group's (or sub-chain's) server ``$sum`` of words, or
        None unless the sum covers exactly positions first..last of ``chain`` and, with
        ``drift`` (the field's drift counter, read after the aggregation), is provably
        exact (then the caller fetches)."""
        if isinstance(total, bool) or not isinstance(total, int) or (total < 0 and not drift):
            return None  # an int64 overflow comes back as a double
        length = last - first + 1
        drift = min(drift, self.drift_budget)  # increments past the budget were not sent
        if drift and not sum_is_exact(self.layout, length, drift):
            return None
        if length <= 0:  # no value claimed: an empty sum, unless values moved in
            return 0 if total == 0 else None
        count = self.layout.count(total)
        if count != length or length > self.layout.capacity:
            return None
        return self.layout.open(total, self.keys.span_pads(chain, first, last), count, drift)

    def chain_sum(self, totals: Any, chain: int, length: int, drift: int = 0) -> int | None:
        """A group's plaintext sum from its server sums: one total for the whole chain,
        or ``{sub-chain: total}`` when the server grouped by sub-chain too; None unless
        every sub-chain of positions 1..length is there, complete and exact."""
        if not isinstance(totals, dict):
            return self.group_sum(totals, chain, 1, length, drift)
        capacity = self.layout.capacity
        subs = -(-length // capacity)
        if set(totals) - set(range(subs)):
            return None  # a sub-chain past the chain's end: values moved in
        out = 0
        for sub in range(subs):
            first, last = sub * capacity + 1, min(length, (sub + 1) * capacity)
            opened = self.group_sum(totals.get(sub, 0), chain, first, last, drift)
            if opened is None:
                return None
            out += opened
        return out

    def stored_fields(self, name: str, form: dict[str, Any]) -> dict[str, Any]:
        return {name: form["w"]} | {name + part: form[part] for part in self.PARTS if part in form}

    def gathered(self, name: str, stored: dict[str, Any]) -> Any:
        word = stored[name]
        if word is None:
            return None
        form = {"w": word, "c": stored.get(name + "c"), "p": stored.get(name + "p")}
        if name + "s" in stored:
            form["s"] = stored[name + "s"]
        return form


class ChainClaims:
    """A chained field's position claims in the server (one collection per field)."""

    def __init__(self, claims: ServerCollection[Any]):
        self.collection = self._claims = claims
        self._epoch: bytes | None = None
        #: Whether words past a chain's capacity store their sub-chain (see the module).
        self.sub_chains = False
        #: The end of each chain's last claim this client saw: a claim boundary, where
        #: claims and readers start instead of reading the hint (one command less).
        self._ends: dict[int, int] = {}
        #: Whether a sum this client ran found a run of positions past a chain's capacity.
        self.summed_longer = False

    def epoch(self) -> bytes:
        if self._epoch is None:
            with contextlib.suppress(pymongo.errors.DuplicateKeyError):  # drawn already
                self._claims.insert_one({"_id": EPOCH, "e": os.urandom(16), "v": SUB_CHAINS})
            found = self._claims.find_one({"_id": EPOCH})
            if found is None:
                raise ServerError("the chains' epoch document vanished; retry")
            self.sub_chains = int(found.get("v", 1)) >= SUB_CHAINS
            self._epoch = bytes(found["e"])
        return self._epoch

    def known_longer(self, capacity: int) -> bool:
        """Whether a chain this client saw (not the drift counter) is past ``capacity``."""
        if self.summed_longer:
            return True
        return any(end > capacity for chain, end in self._ends.items() if chain >= 0)

    def claim(self, chain: int, count: int) -> int:
        """Claim ``count`` positions at the end of ``chain``; the first one claimed."""
        end = self._start(chain)
        while True:
            try:
                self._claims.insert_one({"_id": f"{chain}@{end}", "k": count})
                break
            except pymongo.errors.DuplicateKeyError:
                taken = self._claims.find_one({"_id": f"{chain}@{end}"})
                end += int(taken["k"]) if taken else 0
        self._raise_hint(chain, end + count)
        self._ends[chain] = max(self._ends.get(chain, 0), end + count)
        return end + 1

    def lengths(self, chains: Iterable[int]) -> dict[int, int]:
        """Each chain's claimed length, read after the aggregation it checks."""
        chains = list(chains)
        return dict(zip(chains, _READERS.map(self._length, chains), strict=True))

    def _length(self, chain: int) -> int:
        """Walk the claims from a known boundary to the first position not claimed (claims
        are contiguous: each is inserted at the end of the one before)."""
        end, steps = self._start(chain), 0
        while (taken := self._claims.find_one({"_id": f"{chain}@{end}"})) is not None:
            end, steps = end + int(taken["k"]), steps + 1
            if steps == 2:  # others wrote since: jump to the hint
                end = max(end, self._hint(chain))
        self._ends[chain] = max(self._ends.get(chain, 0), end)
        return end

    def _start(self, chain: int) -> int:
        known = self._ends.get(chain)
        return self._hint(chain) if known is None else known

    def _hint(self, chain: int) -> int:
        found = self._claims.find_one({"_id": str(chain)})
        return int(found["n"]) if found else 0

    def _raise_hint(self, chain: int, end: int) -> None:
        """Move the hint forward (a lost race may leave it behind: readers walk on)."""
        with contextlib.suppress(pymongo.errors.DuplicateKeyError):  # another's is further
            self._claims.update_one(
                {"_id": str(chain), "n": {"$lt": end}}, {"$set": {"n": end}}, upsert=True
            )
