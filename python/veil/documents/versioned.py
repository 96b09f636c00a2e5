"""Writes of existing documents, each applied only at the version it read.

Every write of a stored document names the version it read and sets a new one
(veil.documents.versions); a document another writer changed first is read again
and the change re-applied. :meth:`VersionedWrites.write_each` is that loop for
updates, replacements and deletes alike, given what to write to each target and how
to read one (or all left over) again. With claimed writes, several documents are
written in bulk first: one insert of their claims and one bulk of conditional
writes instead of three commands a document.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import pymongo
import pymongo.errors
from pymongo.collection import Collection as ServerCollection
from pymongo.results import UpdateResult

from veil.documents.codec import DocumentCodec
from veil.documents.errors import ServerError, ServerRefusedError
from veil.documents.match import MISSING
from veil.documents.server import DatabaseContext, server_errors
from veil.documents.versions import (
    LEASE,
    WRITE_PATIENCE,
    Claims,
    Watch,
    claim_key,
    new_version,
)

#: Attempts of one document's write that the server refused, before raising its refusal.
REFUSED_RETRIES = 8
#: Documents whose claimed writes go to the server together (``_write_bulk``): few
#: enough that the last is applied well within the lease of their claims.
BULK_WRITES = 100
#: Statements of one bulk update command: FerretDB 1.24 never answers one of 100 or more
#: (measured: 99 statements take 0.3 s).
BULK_STATEMENTS = 50
#: Rounds of bulk writes of the documents other writers changed first, before the rest
#: is written one document at a time.
BULK_ROUNDS = 3
#: A write of one document that deletes it (:meth:`VersionedWrites.write_each`).
DELETE = object()

#: A document to write: (stored document, its ``_id`` and version at least; the
#: decrypted document, or None where the write needs no plaintext).
Target = tuple[Any, Any]


class VersionedWrites:
    """The conditional writes of one collection's documents (its versions' claims too)."""

    def __init__(
        self, codec: DocumentCodec, server: ServerCollection[Any], claims: Claims,
        database: DatabaseContext,
    ) -> None:  # fmt: skip
        self.codec = codec
        self.server = server
        self.claims = claims
        self.database = database

    def write_each(
        self,
        targets: Iterable[Target],
        write: Callable[[Target], Any],
        reread: Callable[[Target], Target | None],
        reread_all: Callable[[list[Target]], list[Target]] | None = None,
    ) -> UpdateResult:
        """Each target's ``write(target)`` (an update document, a replacement, or
        ``DELETE``) applied to its stored document (``target[0]``, its ``_id`` and
        version at least) only while that document is at the version read, with a new
        version; a target another writer changed first is ``reread`` (None: deleted or
        no longer matching, left alone as the server would leave it) and written again
        (veil.documents.versions). With claims, several targets are written in bulk
        first, those left over read again together (``reread_all``, which drops the
        ones no longer matching) and written in bulk again, a few rounds."""
        matched = modified = 0
        rest = list(targets)
        for round_ in range(BULK_ROUNDS):
            if self.database.writes != "claimed" or len(rest) < 2:
                break
            if round_:
                if reread_all is None:
                    break
                rest = reread_all(rest)
            chunks = [rest[at : at + BULK_WRITES] for at in range(0, len(rest), BULK_WRITES)]
            rest = []
            for chunk in chunks:
                done, changed, again = self._write_bulk(chunk, write)
                matched, modified = matched + done, modified + changed
                rest.extend(again)
        for target in rest:
            written = self._write_one(target, write, reread)
            if written is not None:
                matched += 1
                modified += written
        return UpdateResult({"n": matched, "nModified": modified, "ok": 1.0}, acknowledged=True)

    def _write_bulk(
        self, targets: list[Target], write: Callable[[Target], Any]
    ) -> tuple[int, int, list[Target]]:
        """Claimed writes of several documents in a few commands rather than three per
        document: one insert of every claim, one unordered bulk of the conditional writes,
        one background release. Each document's claims are the right to supersede the
        version read (``|v|0``, as :meth:`_write_one` claims it) and the right to supersede
        the new version this write sets (``|new|0``: nobody else can know it before the
        write, so this writer gets it): no other claimed writer changes the document
        before this one has read back what it wrote, so a document found at another
        version than the new one was not written. Returns (documents matched, modified,
        targets left to :meth:`_write_one`: claim lost or version moved on, not written)."""
        name = self.codec.version
        # the changes are made on copies: a target left to _write_one is changed there
        changes = [write((target[0], copy.deepcopy(target[1]))) for target in targets]
        shared = all(c is changes[0] for c in changes) and not is_replacement(changes[0])
        plans: list[_Planned] = []
        new = new_version()
        for target, change in zip(targets, changes, strict=True):
            id_, version = target[0]["_id"], target[0].get(name)
            new = new if shared else new_version()
            keys = (claim_key(id_, version, 0), claim_key(id_, new, 0))
            plans.append(_Planned(target, id_, version, new, change, keys))
        claimed = time.monotonic()
        with server_errors("claiming documents' versions", self.codec):
            held = self.claims.claim_many([key for plan in plans for key in plan.keys])
        won = [plan for plan in plans if held.issuperset(plan.keys)]
        if time.monotonic() - claimed > LEASE / 4:  # too late to trust the claims
            won = []
        rest = [plan.target for plan in plans if not any(plan is w for w in won)]
        if not won:
            self.claims.release_now(held)
            return 0, 0, rest
        counts = self._write_shared(won) if shared else self._write_ops(won)
        deleting = won[0].change is DELETE
        done: int | None = counts.get("nRemoved" if deleting else "nMatched")
        changed = done if deleting else counts.get("nModified")
        if done == len(won):  # all written; the others go on one at a time
            (self.claims.release_now if rest else self.claims.release)(held)
            return done, changed or 0, rest
        with server_errors("update", self.codec):
            found = {
                claim_key(stored["_id"], None, 0): stored.get(name)
                for stored in self.server.find({"_id": {"$in": [p.id for p in won]}}, {name: 1})
            }
        if time.monotonic() - claimed > LEASE:
            self.claims.release(held)
            raise ServerError(
                f"the server took longer than the claims' lease to apply and show {len(won)} "
                "writes: whether each was applied is unknown; read the documents again"
            )
        written = 0
        for plan in won:
            now = found.get(claim_key(plan.id, None, 0), MISSING)
            if now is not MISSING and now != plan.new:
                rest.append(plan.target)  # still there, not written: claims kept others off
            elif now is not MISSING:
                written += 1
        self.claims.release_now(held)
        if done is None:  # what reads back as written was (a deleted document: unknown)
            done = changed = 0 if deleting else written
        return done, changed or 0, rest

    def _write_shared(self, won: list[_Planned]) -> dict[str, Any]:
        """One change (an update document or ``DELETE``) to several documents, each at the
        version read, with one new version for them all: one command, so one scan of the
        collection where FerretDB 1.24 pushes no filter down (only ``{_id: ObjectId or
        string}``, which a version condition is not). Its counts; empty if refused."""
        name, change = self.codec.version, won[0].change
        condition = {"$or": [_version_condition(p.id, name, p.version) for p in won]}
        try:
            with server_errors("update", self.codec):
                if change is DELETE:
                    return {"nRemoved": self.server.delete_many(condition).deleted_count}
                result = self.server.update_many(condition, versioned(change, name, won[0].new))
        except ServerRefusedError:
            return {}  # checked by the caller, document by document
        return {"nMatched": result.matched_count, "nModified": result.modified_count}

    def _write_ops(self, won: list[_Planned]) -> dict[str, Any]:
        """A change of its own to each document, at the version read, with a new version:
        unordered bulks of under 100 statements (FerretDB 1.24 never answers an update
        command of 100 statements or more). Their counts; None where refused as a whole."""
        name = self.codec.version
        ops = [_conditional_op(p.id, name, p.version, p.new, p.change) for p in won]
        totals: dict[str, Any] = {"nMatched": 0, "nModified": 0, "nRemoved": 0}
        for at in range(0, len(ops), BULK_STATEMENTS):
            try:
                with server_errors("update", self.codec):
                    counts = self.server.bulk_write(ops[at : at + BULK_STATEMENTS], ordered=False)
                    details = dict(counts.bulk_api_result)
            except pymongo.errors.BulkWriteError as exc:
                details = dict(exc.details)
            except ServerRefusedError:
                details = {}  # refused as a whole: checked by the caller
            for key in totals:
                found = details.get(key)
                totals[key] = None if found is None or totals[key] is None else totals[key] + found
        return totals

    def _write_one(
        self,
        target: Target,
        write: Callable[[Target], Any],
        reread: Callable[[Target], Target | None],
    ) -> int | None:
        """Documents modified (0 or 1) by one target's write; None if it no longer matched.
        The change is made before claiming (so the claim is held for the write alone, and
        a writer that the change makes wait, as a test's interleaving does, does not wait
        for this one's claim), once per version read (a version is one content)."""
        watch = Watch()
        current: Target | None = target
        made: tuple[Any, Any] | None = None  # (version, change made from it)
        while current is not None:
            stored = current[0]
            version = stored.get(self.codec.version)
            watch.reset(version)
            if made is None or made[0] != version:
                made = (version, write(current))
            held: list[str] = []
            if self.database.writes == "claimed":
                key = claim_key(stored["_id"], version, watch.generation)
                if not self._claim_version(key):
                    fresh = reread(current)
                    same = fresh is not None and fresh[0].get(self.codec.version) == version
                    if same and not watch.lost():
                        raise ServerError(_kept_changing(stored["_id"]))
                    current = fresh
                    continue
                held = [claim_key(stored["_id"], version, g) for g in range(watch.generation + 1)]
            claimed = time.monotonic()
            try:
                written = self._write_version(stored, version, made[1], claimed, watch)
            finally:
                if held:
                    self.claims.release(held)
            if written is not None:
                return written
            current = reread(current)
        return None

    def _claim_version(self, key: str) -> bool:
        """Whether this writer won ``key``; a refused claim is tried again a few times."""
        for attempt in range(REFUSED_RETRIES):
            try:
                with server_errors("claiming a document's version", self.codec):
                    return self.claims.claim(key)
            except ServerRefusedError:
                if attempt == REFUSED_RETRIES - 1:
                    raise
                time.sleep(0.005 * 2**attempt * (0.5 + random.random()))
        raise AssertionError("unreachable")

    def _write_version(
        self, stored: dict[str, Any], version: Any, change: Any, claimed: float, watch: Watch
    ) -> int | None:
        """Apply ``change`` to ``stored``'s document if it is still at ``version``: the
        documents modified (0 or 1), or None if it has moved on (or is gone). A refusal
        is checked by reading the version back (the new version: it was applied) and,
        while the document is unchanged, tried again after a backoff."""
        condition = {
            "_id": stored["_id"],
            self.codec.version: {"$exists": False} if version is None else version,
        }
        new = new_version()
        for attempt in range(REFUSED_RETRIES):
            if self.database.writes == "claimed" and time.monotonic() - claimed > LEASE / 4:
                return None  # too late to trust the claim: give it up and read again
            try:
                with server_errors("update", self.codec):
                    if change is DELETE:
                        return self.server.delete_one(condition).deleted_count or None
                    if is_replacement(change):
                        replacement = dict(change, **{self.codec.version: new})
                        result = self.server.replace_one(condition, replacement)
                    else:
                        update = versioned(change, self.codec.version, new)
                        result = self.server.update_one(condition, update)
                return result.modified_count if result.matched_count else None
            except ServerRefusedError:
                with server_errors("update", self.codec):
                    now = self.server.find_one({"_id": stored["_id"]}, {self.codec.version: 1})
                if now is not None and now.get(self.codec.version) == new:
                    return 1
                if now is None or now.get(self.codec.version) != version:
                    return None
                if attempt == REFUSED_RETRIES - 1 or not watch.backoff():
                    raise
        raise AssertionError("unreachable")


class _Planned(NamedTuple):
    """One document's write in :meth:`VersionedWrites._write_bulk`."""

    target: Target
    id: Any
    version: Any
    new: Any
    change: Any
    keys: tuple[str, str]


def _version_condition(id_: Any, name: str, version: Any) -> dict[str, Any]:
    """A filter matching document ``id_`` while its version ``name`` is ``version``."""
    return {"_id": id_, name: {"$exists": False} if version is None else version}


def _conditional_op(id_: Any, name: str, version: Any, new: Any, change: Any) -> Any:
    """The bulk-write operation applying ``change`` (an update document, a replacement or
    ``DELETE``) to document ``id_`` only while its version ``name`` is ``version``,
    setting the version ``new``."""
    condition = _version_condition(id_, name, version)
    if change is DELETE:
        return pymongo.DeleteOne(condition)
    if is_replacement(change):
        return pymongo.ReplaceOne(condition, dict(change, **{name: new}))
    return pymongo.UpdateOne(condition, versioned(change, name, new))


def is_replacement(change: Any) -> bool:
    """Whether a write is a whole stored document rather than update operators."""
    return isinstance(change, dict) and not any(str(k).startswith("$") for k in change)


def versioned(update: dict[str, Any], name: str, version: Any) -> dict[str, Any]:
    """``update`` also setting the document's version ``name`` to ``version``."""
    return dict(update, **{"$set": {**update.get("$set", {}), name: version}})


def _kept_changing(document_id: Any) -> str:
    return (
        f"document {document_id!r} kept changing under other writers for "
        f"{int(WRITE_PATIENCE)} s of attempts to update it; retry later"
    )
