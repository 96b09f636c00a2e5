"""Document versions: every write of a stored document supersedes the version it read.

Each stored document carries a random 63-bit *version* under an opaque name of
its own, drawn afresh by every write (insert, update, replace). A write that
changes a document names the version it read in its filter
(``{_id, version}``) and sets a new one, so it applies only if nobody wrote
the document since it read it; a writer whose condition failed reads the
document again and re-applies its change.

On a server whose single-document updates are atomic (MongoDB,
mongo-java-server), that conditional update is a compare-and-set and
suffices (``"conditional"`` writes). FerretDB 1.24 is not such a server: its
update finds the matching documents, applies the update in Go, and writes
each whole document back by ``_id`` in a second statement
(``handler/msg_update.go``, ``backends/sqlite/collection.go``), so two
writers that both read version ``v`` both write, and the later one erases the
earlier one's change, conditional or not. There (``"claimed"`` writes), the
right to supersede ``v`` is claimed first by inserting ``"<id>|<v>|0"`` into
the collection's claims collection: ``_id`` uniqueness, the one atomic
test-and-set FerretDB has, lets exactly one writer have each version; the
others read the document again and wait for the winner's write (backing off
from 1 ms to 50 ms). The winner deletes its claim after its write (in the background): a writer
that read ``v`` before that write and claims ``v`` after the deletion finds
the document at the new version when its conditional update looks, so it
writes nothing. Claims are only the writes in flight.

A writer that dies between its claim and its write would block the document
forever; so a writer that has watched the same claim stand, and the document
stay at ``v``, for ``LEASE`` seconds by its own clock takes the next
*generation* of the claim (``"<id>|<v>|1"``, and so on). A claim's holder
writes only within ``LEASE / 4`` of claiming (else it gives the claim up and
starts again), which leaves a write ``3/4 · LEASE`` to reach the server before
anybody can take over: the one timing assumption of these writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import secrets
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import bson
import pymongo.errors
from bson.int64 import Int64
from pymongo.collection import Collection as ServerCollection

#: Seconds a claim may stand, the document unchanged, before another writer takes over.
LEASE = 10.0
#: Seconds a writer waits for other writers' changes to one document before giving up.
WRITE_PATIENCE = 60.0
_RELEASERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="veil-claims")
#: The write modes: a claim before each write, or the server's atomic conditional update.
MODES = ("claimed", "conditional")


def new_version() -> Int64:
    """A fresh version: random, so no document ever returns to a version it had."""
    return Int64(secrets.randbits(63))


def claim_key(document_id: Any, version: Any, generation: int) -> str:
    """The claims ``_id`` giving the right to supersede ``version`` of ``document_id``."""
    digest = hashlib.sha256(bson.encode({"i": document_id})).hexdigest()[:32]
    return f"{digest}|{'-' if version is None else int(version)}|{generation}"


class Claims:
    """One collection's version claims (a server collection of claim documents)."""

    def __init__(self, collection: ServerCollection[Any]):
        self.collection = collection

    def claim(self, key: str) -> bool:
        """True if this writer now holds ``key``; False if another writer does."""
        try:
            self.collection.insert_one({"_id": key})
        except pymongo.errors.DuplicateKeyError:
            return False
        return True

    def claim_many(self, keys: list[str]) -> set[str]:
        """The ``keys`` this writer now holds, claimed in one command (unordered: each
        insert is a test-and-set of its own). After any refusal the claims are read back
        by their owner mark, so that a key is never taken for held that another writer
        holds, nor one this writer holds forgotten (it would block its document until
        the lease ran out)."""
        owner = Int64(secrets.randbits(63))
        try:
            self.collection.insert_many([{"_id": key, "o": owner} for key in keys], ordered=False)
        except pymongo.errors.PyMongoError:
            found = self.collection.find({"_id": {"$in": keys}, "o": owner}, {"_id": 1})
            return {claim["_id"] for claim in found}
        return set(keys)

    def release_now(self, keys: Iterable[str]) -> None:
        """Delete claims before going on (this writer is about to claim them again)."""
        self._delete(list(keys))

    def release(self, keys: Iterable[str]) -> None:
        """Delete claims whose write is done or given up, in the background (the writer
        does not wait for it) and best effort: a claim of a version the document no
        longer has blocks nobody (its loser reads the new version and moves on), and
        one left for the current version is taken over after ``LEASE``."""
        _RELEASERS.submit(self._delete, list(keys))

    def _delete(self, keys: list[str]) -> None:
        with contextlib.suppress(pymongo.errors.PyMongoError):
            self.collection.delete_many({"_id": {"$in": keys}})


def within_lease(claimed: float) -> bool:
    """May the holder of a claim taken at ``claimed`` (``time.monotonic()``, read before
    the claim was sent) still write? Only within ``LEASE / 4`` of it: a write then has
    ``3/4 · LEASE`` to reach the server before a waiting writer takes the claim over."""
    return time.monotonic() - claimed <= LEASE / 4


class Backoff:
    """Sleeps between the attempts of a write that met another writer's unfinished change.

    The winner of a claim writes a round trip later, and a descheduled one may take
    seconds: retrying at once would spend every attempt in that gap. Sleeps grow from
    1 ms to 50 ms, jittered so that writers do not retry in step, until ``patience``
    seconds (default ``WRITE_PATIENCE``) have passed."""

    def __init__(self, patience: float | None = None) -> None:
        self._deadline = time.monotonic() + (WRITE_PATIENCE if patience is None else patience)
        self._sleep = 0.001

    def backoff(self) -> bool:
        """Sleep before retrying a write the server refused; False once out of patience."""
        if time.monotonic() >= self._deadline:
            return False
        time.sleep(self._sleep * (0.5 + random.random()))
        self._sleep = min(0.05, self._sleep * 2)
        return True


class Lease:
    """One writer's view of a contested version: when it first saw the claim it lost,
    so that it takes the next generation once that claim has stood ``LEASE`` seconds."""

    def __init__(self) -> None:
        self.version: Any = object()
        self.generation = 0
        self._since = 0.0

    def reset(self, version: Any) -> None:
        """A new version to supersede: generation 0, nothing watched yet."""
        if version != self.version:
            self.version, self.generation, self._since = version, 0, 0.0

    def stood(self) -> bool:
        """After losing the current generation's claim with the version unchanged: True,
        moving to the next generation, once that claim has stood ``LEASE`` seconds since
        this writer first lost it (by its own clock)."""
        now = time.monotonic()
        if not self._since:
            self._since = now
        elif now - self._since >= LEASE:
            self.generation, self._since = self.generation + 1, 0.0
            return True
        return False

    def gave_up(self) -> None:
        """This writer held the current generation's claim and gave it up unwritten (past
        :func:`within_lease`): the next generation is its to try at once, as nobody else
        writes under the current one."""
        self.generation, self._since = self.generation + 1, 0.0


class Watch(Lease, Backoff):
    """A document writer's :class:`Lease` on the version it read, and its backoff."""

    def __init__(self) -> None:
        Lease.__init__(self)
        Backoff.__init__(self)

    def lost(self) -> bool:
        """After losing the current generation's claim with the document unchanged:
        sleep (backing off) or move to the next generation; False once out of patience."""
        return self.stood() or self.backoff()
