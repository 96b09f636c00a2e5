"""An encrypted collection, shaped like pymongo's Collection.

Every method translates its plaintext paths and values into the stored
fields' opaque names and ciphertexts, sends one command (two for an update
the server cannot do blind), and decrypts what comes back. Documents are
validated and encrypted whole before anything is written: a bad document
leaves the collection unchanged.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import random
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import bson
import bson.errors
import pymongo
import pymongo.errors
from bson.int64 import Int64
from pymongo.results import DeleteResult, InsertManyResult, InsertOneResult, UpdateResult

from veil.documents.chains import ChainClaims, Slot
from veil.documents.codec import DocumentCodec
from veil.documents.cursor import Cursor, batches
from veil.documents.drift import DRIFT_CHAIN, increment
from veil.documents.errors import (
    DocumentsError,
    FieldTypeError,
    PartialWriteError,
    ServerError,
    ServerRefusedError,
    UnsupportedQueryError,
)
from veil.documents.fields import FieldCipher
from veil.documents.match import MISSING, get_path, matches
from veil.documents.oretree import OreTree
from veil.documents.paillier import FOLD_AT, PENDING
from veil.documents.query import conjunction, normalise_sort, translate_filter
from veil.documents.schema import Schema
from veil.documents.update import KEEP, Assign, Revealed, plan_update
from veil.documents.versions import (
    LEASE,
    WRITE_PATIENCE,
    Claims,
    Watch,
    claim_key,
    new_version,
)

if TYPE_CHECKING:
    from veil.documents.client import Database


#: The database's catalog collection (the key's fingerprint, Paillier public keys).
CATALOG = "veil_documents"
#: Documents per server reply: few round trips for large results, within 16 MiB replies.
FETCH_BATCH = 20_000
#: Attempts of one document's write that the server refused, before raising its refusal.
REFUSED_RETRIES = 8
#: Documents whose claimed writes go to the server together (:meth:`Collection._write_bulk`):
#: few enough that the last is applied well within the lease of their claims.
BULK_WRITES = 100
#: Statements of one bulk update command: FerretDB 1.24 never answers one of 100 or more
#: (measured: 99 statements take 0.3 s).
BULK_STATEMENTS = 50
#: Rounds of bulk writes of the documents other writers changed first, before the rest
#: is written one document at a time.
BULK_ROUNDS = 3
#: A write of one document that deletes it (:meth:`Collection._write_each`).
DELETE = object()
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@contextlib.contextmanager
def server_errors(what: str, codec: DocumentCodec | None = None) -> Iterator[None]:
    """The one place where the driver's errors become Veil's; with ``codec``, a refusal
    names the user's fields where the server named their opaque stored names."""
    try:
        yield
    except pymongo.errors.ConnectionFailure as exc:
        raise ServerError(f"{what}: the server did not answer ({exc})") from None
    except pymongo.errors.BulkWriteError:
        raise
    except pymongo.errors.PyMongoError as exc:
        message = codec.in_user_terms(str(exc)) if codec is not None else str(exc)
        raise ServerRefusedError(f"{what}: the server refused it: {message}") from None


class Collection:
    """One collection: its schema, its codec and the server collection under an opaque name."""

    def __init__(self, database: Database, name: str, schema: Schema):
        self.database = database
        self.name = name
        self.schema = schema
        self.codec = DocumentCodec(database.master, f"{database.name}/{name}", schema)
        self.server_name = database.opaque_collection_name(name)
        self._server = database.server_database[self.server_name]
        self._trees: list[Any] = []  # side collections, dropped with this one
        self._chains: dict[str, ChainClaims] = {}
        self._nested: dict[str, bool] = {}  # holds_nested_forms, per stored name
        self._claims = Claims(database.server_database[self.server_name + "w"])
        self._trees.append(self._claims.collection)
        for cipher in self.codec.ciphers.values():
            if cipher.ore is not None:  # each ore field's B+-tree: nodes and claims
                base = f"{self.server_name}{cipher.name}"
                nodes, claims = (database.server_database[base + s] for s in ("n", "c"))
                cipher.ore.tree = OreTree(nodes, claims)
                self._trees += [nodes, claims]
            if cipher.chained is not None:  # each chained field's position claims
                claims = database.server_database[f"{self.server_name}{cipher.name}k"]
                self._chains[cipher.name] = ChainClaims(claims)
                self._trees.append(claims)
            if cipher.paillier is not None:
                with server_errors("recording a Paillier public key", self.codec):
                    catalog = database.server_database[CATALOG]
                    cipher.paillier.record_public_key(catalog, self.server_name, cipher.name)

    # -- writes ----------------------------------------------------------------

    def insert_one(self, document: dict[str, Any]) -> InsertOneResult:
        stored = self.codec.encode_many([document], self._claim)
        with server_errors("insert_one", self.codec):
            self._server.insert_one(stored[0])
        return InsertOneResult(document["_id"], acknowledged=True)

    def insert_many(self, documents: Iterable[dict[str, Any]]) -> InsertManyResult:
        """Insert in order; all documents are encrypted before the first is written."""
        documents = list(documents)
        stored = self.codec.encode_many(documents, self._claim)
        ids = [d["_id"] for d in documents]
        if not stored:
            raise DocumentsError("insert_many needs at least one document")
        try:
            with server_errors("insert_many", self.codec):
                self._server.insert_many(stored, ordered=True)
        except pymongo.errors.BulkWriteError as exc:
            written = ids[: exc.details.get("nInserted", 0)]
            raise PartialWriteError(
                f"insert_many stopped after {len(written)} of {len(ids)} documents: "
                f"{exc.details.get('writeErrors', [{}])[0].get('errmsg', exc)}",
                written,
            ) from None
        return InsertManyResult(ids, acknowledged=True)

    def _claim(self, cipher: FieldCipher, groups: list[Any]) -> list[Slot]:
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

    def chains_known_longer(self, cipher: FieldCipher) -> bool:
        """Whether a chain of this field is known to need sub-chains (a claim or a length
        read by this client went past its capacity) and its words store them."""
        assert cipher.chained is not None
        capacity = cipher.chained.layout.capacity
        return self.chains_split(cipher) and self._chains[cipher.name].known_longer(capacity)

    def chains_summed_longer(self, cipher: FieldCipher) -> None:
        """Note that a sum found a run of this field's positions past a chain's capacity:
        this client groups its sums by sub-chain from now on."""
        self._chains[cipher.name].summed_longer = True

    def chains_split(self, cipher: FieldCipher) -> bool:
        """Whether this field's words past a chain's capacity store their sub-chain."""
        claims = self._chains[cipher.name]
        claims.epoch()
        return claims.sub_chains

    def _chains_of(self, cipher: FieldCipher, groups: list[Any]) -> tuple[ChainClaims, list[int]]:
        """A chained field's claims and the chain number of each group value."""
        assert cipher.chained is not None
        claims = self._chains[cipher.name]
        epoch = claims.epoch()
        return claims, [cipher.chained.keys.chain_of(epoch, group) for group in groups]

    def holds_nested_forms(self, cipher: FieldCipher) -> bool:
        """Whether an ASHE ``h_add`` field holds values of the earlier nested forms, asked
        of the server once per client: no version of Veil writes them any more, so a
        field without them now never has them."""
        if cipher.name not in self._nested:
            with server_errors("looking for earlier h_add forms", self.codec):
                found = self._server.find_one({cipher.name: {"$type": "object"}}, {"_id": 1})
            self._nested[cipher.name] = found is not None
        return self._nested[cipher.name]

    def chain_numbers(self, cipher: FieldCipher, groups: list[Any]) -> tuple[list[int], int]:
        """The chain number of each group value of a chained field (a keyed hash: no
        read) and the field's drift counter, read now."""
        with server_errors("reading the drift counter", self.codec):
            claims, chains = self._chains_of(cipher, groups)
            return chains, claims.lengths([DRIFT_CHAIN])[DRIFT_CHAIN]

    def chain_lengths(
        self, cipher: FieldCipher, groups: list[Any]
    ) -> tuple[list[tuple[int, int]], int]:
        """(chain, claimed length) of each group value of a chained field, and the field's
        drift counter, read now in one parallel wave."""
        with server_errors("reading chain lengths", self.codec):
            claims, chains = self._chains_of(cipher, groups)
            lengths = claims.lengths([*chains, DRIFT_CHAIN])
        return [(c, lengths[c]) for c in chains], lengths.get(DRIFT_CHAIN, 0)

    def update_one(self, query: dict[str, Any], update: dict[str, Any]) -> UpdateResult:
        return self._update(query, update, many=False)

    def update_many(self, query: dict[str, Any], update: dict[str, Any]) -> UpdateResult:
        return self._update(query, update, many=True)

    def _update(self, query: dict[str, Any], update: dict[str, Any], many: bool) -> UpdateResult:
        server_update, client_ops = plan_update(self.codec, update)
        if any(isinstance(op, Revealed) for op in client_ops.values()):
            if not many and all(isinstance(op, Revealed) for op in client_ops.values()):
                result = self._update_revealed(query, client_ops, server_update)
                if result is not None:
                    return result
            client_ops = {p: getattr(op, "delta", op) for p, op in client_ops.items()}
        ciphers = [self.codec.cipher(p) for p in client_ops]
        if client_ops and all(c is not None and c.paillier is not None for c in ciphers):
            deltas = self._paillier_deltas(client_ops)  # encrypted once, pushed or folded
            if not many and _pins_one(query):
                pushed = self._push_paillier(query, deltas, server_update)
                if pushed is not None:
                    return pushed
            return self._update_paillier(query, deltas, server_update, many)
        if client_ops:
            return self._update_on_client(query, client_ops, server_update, many)
        return self._blind(self._exact_filter(query, many), server_update, many)

    def _blind(self, server_filter: dict[str, Any], change: Any, many: bool) -> UpdateResult:
        """A change the server makes without the client reading the documents (an update
        document, or a replacement with ``many`` False), each document given a new
        version: one command where the server's single-document updates are atomic,
        else each matching document's version claimed and written (:meth:`_write_each`)."""
        if self.database.writes == "conditional":
            with server_errors("update", self.codec):
                if _is_replacement(change):
                    return self._server.replace_one(
                        server_filter, dict(change, **{self.codec.version: new_version()})
                    )
                versioned = _versioned(change, self.codec.version, new_version())
                if many:
                    return self._server.update_many(server_filter, versioned)
                return self._server.update_one(server_filter, versioned)
        targets = self._versions_of(server_filter, many)

        def reread(target: tuple[Any, Any]) -> tuple[Any, Any] | None:
            fresh = self._versions_of(conjunction([server_filter, {"_id": target[0]["_id"]}]))
            return fresh[0] if fresh else None

        return self._write_each(
            targets, lambda _: change, reread, self._reread_versions(server_filter)
        )

    def _reread_versions(
        self, server_filter: dict[str, Any]
    ) -> Callable[[list[tuple[Any, Any]]], list[tuple[Any, Any]]]:
        """Targets read again together: those still matching ``server_filter``, with
        their versions now (one find)."""

        def reread_all(targets: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
            ids = {"_id": {"$in": [target[0]["_id"] for target in targets]}}
            return self._versions_of(conjunction([server_filter, ids]), many=True)

        return reread_all

    def _versions_of(self, server_filter: dict[str, Any], many: bool = False) -> list[Any]:
        """(stored ``_id`` and version, None) of the documents ``server_filter`` matches
        (the first, unless ``many``)."""
        with server_errors("update", self.codec):
            found = self._server.find(
                server_filter, {self.codec.version: 1}, limit=0 if many else 1,
                batch_size=FETCH_BATCH,
            )  # fmt: skip
            return [(stored, None) for stored in found]

    def _update_revealed(
        self, query: dict[str, Any], increments: dict[str, Revealed], server_update: dict[str, Any]
    ) -> UpdateResult | None:
        """``$inc`` of chained fields that reveal increments: each claims its ``|delta|``
        on its field's drift counter, then one blind server update adds ``delta << k`` to
        the word (veil.documents.drift). None, with nothing written, when a drift budget is
        spent or no matching document holds a value to add to: the caller then reads and
        rewrites (``update_many`` always does: its drift is the count it matches)."""
        added = dict(server_update.get("$inc", {}))
        guards: list[dict[str, Any]] = []
        for path, op in increments.items():
            cipher = self.codec.ciphers[path]
            assert cipher.chained is not None
            budget, size = cipher.chained.drift_budget, abs(op.delta)
            if size:
                with server_errors("claiming drift", self.codec):
                    first = self._chains[cipher.name].claim(DRIFT_CHAIN, size)
                if first + size - 1 > budget:
                    return None
            added[cipher.name] = Int64(increment(cipher.chained.layout, op.delta))
            guards.append({cipher.name + "p": {"$exists": True}})  # a chained value, not null
        server_filter = conjunction([self._exact_filter(query, many=False), *guards])
        result = self._blind(server_filter, dict(server_update, **{"$inc": added}), many=False)
        return result if result.matched_count else None

    def _update_on_client(
        self, query: dict[str, Any], client_ops: dict[str, Any], server_update: dict[str, Any],
        many: bool,
    ) -> UpdateResult:  # fmt: skip
        """Read, change, re-encrypt, write back only if the document is unchanged meanwhile;
        a document another writer changed first is read again and the change re-applied."""

        def write(target: tuple[Any, Any]) -> dict[str, Any]:
            return self._client_update(target[1], client_ops, server_update)

        def reread(target: tuple[Any, Any]) -> tuple[Any, Any] | None:
            return self._reread(target[0]["_id"], query)

        targets = list(self._matching(query, many))
        added = {path: op for path, op in client_ops.items() if not isinstance(op, Assign)}
        for _, document in targets:  # refused before anything is written
            for path, delta in added.items():
                self._check_sum(path, _incremented(document, path, delta))
        return self._write_each(targets, write, reread)

    def _check_sum(self, path: str, value: Any) -> None:
        """Refuse an incremented value its field cannot store (a chained field's domain)."""
        cipher = self.codec.cipher(path)
        if cipher is not None and cipher.chained is not None:
            cipher.chained.check([value])

    def _paillier_deltas(self, increments: dict[str, int]) -> dict[str, tuple[Any, bytes]]:
        """Per Paillier field's stored name: its cipher and the increment's encryption."""
        deltas: dict[str, tuple[Any, bytes]] = {}
        for path, delta in increments.items():
            cipher = self.codec.ciphers[path]
            assert cipher.paillier is not None
            deltas[cipher.name] = cipher, cast(bytes, cipher.paillier.encrypt([delta])[0])
        return deltas

    def _push_paillier(
        self, query: dict[str, Any], deltas: dict[str, tuple[Any, bytes]],
        server_update: dict[str, Any],
    ) -> UpdateResult | None:  # fmt: skip
        """``$inc`` of Paillier ``h_add`` fields of the one document ``query`` pins, as one
        server command: each increment's encryption pushed onto the field's pending ones
        (veil.documents.paillier). None, with nothing written, when no document matched
        or it holds ``FOLD_AT`` pending increments: the read-modify-write then folds them."""
        pushed: dict[str, bytes] = {}
        room: list[dict[str, Any]] = []
        for name, (_, delta) in deltas.items():
            pending = name + PENDING
            pushed[pending] = delta
            # a value to add to (a missing one is created, a null one refused, by the
            # read-modify-write), with room for one more pending increment
            room.append({name: {"$ne": None}, f"{pending}.{FOLD_AT - 1}": {"$exists": False}})
        update = dict(server_update)
        update["$push"] = {**server_update.get("$push", {}), **pushed}  # ASHE's $inc ids too
        server_filter = conjunction([self._exact_filter(query, many=False), *room])
        result = self._blind(server_filter, update, many=False)
        return result if result.matched_count else None

    def _update_paillier(
        self, query: dict[str, Any], deltas: dict[str, tuple[Any, bytes]],
        server_update: dict[str, Any], many: bool,
    ) -> UpdateResult:  # fmt: skip
        """``$inc`` of Paillier ``h_add`` fields without decrypting them: the stored
        ciphertext and its pending increments times the increment's encryption (the public
        key's addition), written back with no pending ones only if none of them changed
        meanwhile, else read again and re-added."""
        server_filter = self._exact_filter(query, many)
        read = [*deltas, *(name + PENDING for name in deltas), self.codec.version]
        projection = dict.fromkeys(read, 1)
        with server_errors("update", self.codec):
            targets = list(self._server.find(server_filter, projection, limit=0 if many else 1))
        for target in targets:  # refused before anything is written
            _paillier_addable(target, deltas)

        def write(target: tuple[Any, Any]) -> dict[str, Any]:
            return self._paillier_update(target[0], deltas, server_update)

        def reread(target: tuple[Any, Any]) -> tuple[Any, Any] | None:
            with server_errors("update", self.codec):
                fresh = self._server.find_one(
                    conjunction([server_filter, {"_id": target[0]["_id"]}]), projection
                )
            if fresh is not None:
                _paillier_addable(fresh, deltas)
            return None if fresh is None else (fresh, None)

        return self._write_each([(t, None) for t in targets], write, reread)

    def _write_each(
        self,
        targets: Iterable[tuple[Any, Any]],
        write: Callable[[tuple[Any, Any]], Any],
        reread: Callable[[tuple[Any, Any]], tuple[Any, Any] | None],
        reread_all: Callable[[list[tuple[Any, Any]]], list[tuple[Any, Any]]] | None = None,
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
        self, targets: list[tuple[Any, Any]], write: Callable[[tuple[Any, Any]], Any]
    ) -> tuple[int, int, list[tuple[Any, Any]]]:
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
        shared = all(c is changes[0] for c in changes) and not _is_replacement(changes[0])
        plans: list[_Planned] = []
        new = new_version()
        for target, change in zip(targets, changes, strict=True):
            id_, version = target[0]["_id"], target[0].get(name)
            new = new if shared else new_version()
            keys = (claim_key(id_, version, 0), claim_key(id_, new, 0))
            plans.append(_Planned(target, id_, version, new, change, keys))
        claimed = time.monotonic()
        with server_errors("claiming documents' versions", self.codec):
            held = self._claims.claim_many([key for plan in plans for key in plan.keys])
        won = [plan for plan in plans if held.issuperset(plan.keys)]
        if time.monotonic() - claimed > LEASE / 4:  # too late to trust the claims
            won = []
        rest = [plan.target for plan in plans if not any(plan is w for w in won)]
        if not won:
            self._claims.release_now(held)
            return 0, 0, rest
        counts = self._write_shared(won) if shared else self._write_ops(won)
        deleting = won[0].change is DELETE
        done: int | None = counts.get("nRemoved" if deleting else "nMatched")
        changed = done if deleting else counts.get("nModified")
        if done == len(won):  # all written; the others go on one at a time
            (self._claims.release_now if rest else self._claims.release)(held)
            return done, changed or 0, rest
        with server_errors("update", self.codec):
            found = {
                claim_key(stored["_id"], None, 0): stored.get(name)
                for stored in self._server.find({"_id": {"$in": [p.id for p in won]}}, {name: 1})
            }
        if time.monotonic() - claimed > LEASE:
            self._claims.release(held)
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
        self._claims.release_now(held)
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
                    return {"nRemoved": self._server.delete_many(condition).deleted_count}
                result = self._server.update_many(condition, _versioned(change, name, won[0].new))
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
                    counts = self._server.bulk_write(ops[at : at + BULK_STATEMENTS], ordered=False)
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
        target: tuple[Any, Any],
        write: Callable[[tuple[Any, Any]], Any],
        reread: Callable[[tuple[Any, Any]], tuple[Any, Any] | None],
    ) -> int | None:
        """Documents modified (0 or 1) by one target's write; None if it no longer matched.
        The change is made before claiming (so the claim is held for the write alone, and
        a writer that the change makes wait, as a test's interleaving does, does not wait
        for this one's claim), once per version read (a version is one content)."""
        watch = Watch()
        current: tuple[Any, Any] | None = target
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
                    self._claims.release(held)
            if written is not None:
                return written
            current = reread(current)
        return None

    def _claim_version(self, key: str) -> bool:
        """Whether this writer won ``key``; a refused claim is tried again a few times."""
        for attempt in range(REFUSED_RETRIES):
            try:
                with server_errors("claiming a document's version", self.codec):
                    return self._claims.claim(key)
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
                        return self._server.delete_one(condition).deleted_count or None
                    if _is_replacement(change):
                        replacement = dict(change, **{self.codec.version: new})
                        result = self._server.replace_one(condition, replacement)
                    else:
                        versioned = _versioned(change, self.codec.version, new)
                        result = self._server.update_one(condition, versioned)
                return result.modified_count if result.matched_count else None
            except ServerRefusedError:
                with server_errors("update", self.codec):
                    now = self._server.find_one({"_id": stored["_id"]}, {self.codec.version: 1})
                if now is not None and now.get(self.codec.version) == new:
                    return 1
                if now is None or now.get(self.codec.version) != version:
                    return None
                if attempt == REFUSED_RETRIES - 1 or not watch.backoff():
                    raise
        raise AssertionError("unreachable")

    def _paillier_update(
        self, stored: dict[str, Any], deltas: dict[str, tuple[Any, bytes]],
        server_update: dict[str, Any],
    ) -> dict[str, Any]:  # fmt: skip
        """The server update adding each increment to ``stored``'s value, its pending
        increments folded in (a missing value counts as 0; the caller refused a null one,
        as MongoDB's ``$inc`` and :meth:`_client_update` do)."""
        changed: dict[str, Any] = {}
        dropped: dict[str, Any] = dict(server_update.get("$unset", {}))
        for cipher, delta in deltas.values():
            old = cipher.gathered(stored)
            missing = old is None or old is MISSING
            changed[cipher.name] = delta if missing else cipher.paillier.add(old, delta)
            if cipher.name + PENDING in stored:
                dropped[cipher.name + PENDING] = ""
        update = dict(server_update, **{"$set": {**server_update.get("$set", {}), **changed}})
        if dropped:
            update["$unset"] = dropped
        return update

    def _client_update(
        self, document: dict[str, Any], client_ops: dict[str, Any], server_update: dict[str, Any]
    ) -> dict[str, Any]:
        for path, op in client_ops.items():
            if isinstance(op, Assign):
                _assign(document, path, op.value)
                continue
            _set(document, path, _incremented(document, path, op))
        changed: dict[str, Any] = dict(server_update.get("$set", {}))
        dropped: dict[str, Any] = dict(server_update.get("$unset", {}))
        for path in client_ops:
            fields, names = self._encode_changed(document, path)
            changed.update(fields)
            dropped.update(dict.fromkeys(names, ""))
        update = dict(server_update, **{"$set": changed})
        if dropped:
            update["$unset"] = {n: "" for n in dropped if n not in changed}
        return {op: fields for op, fields in update.items() if fields}

    def _encode_changed(
        self, document: dict[str, Any], path: str
    ) -> tuple[dict[str, Any], list[str]]:
        """($set fields, $unset names) writing ``path``'s value in ``document``; a chained
        value takes a new position claimed in its group's chain."""
        value = get_path(document, path)
        cipher = self.codec.cipher(path)
        if value is MISSING:
            return {}, list(cipher.stored_names) if cipher else [path]
        if cipher is None or cipher.chained is None or value is None:
            return self.codec.encode_value(path, value)
        group = get_path(document, cipher.spec.chain)
        position = self._claim(cipher, [None if group is MISSING else group])
        return cipher.set_fields(cipher.chained.encrypt([value], position)[0])

    def _reread(self, id_: Any, query: dict[str, Any]) -> tuple[Any, Any] | None:
        stored = list(self._find_stored({"_id": id_}, None, 0, 1))
        if not stored:
            return None
        document = self.codec.decode_many(stored)[0]
        return (stored[0], document) if matches(document, query) else None

    def replace_one(self, query: dict[str, Any], replacement: dict[str, Any]) -> UpdateResult:
        if "_id" in replacement:
            raise DocumentsError("a replacement document cannot change _id; leave it out")
        document = dict(replacement, _id=None)
        stored = self.codec.encode_many([document], self._claim)[0]
        stored.pop("_id")
        stored.pop(self.codec.version)  # each write draws its own
        return self._blind(self._exact_filter(query, many=False), stored, many=False)

    def delete_one(self, query: dict[str, Any]) -> DeleteResult:
        return self._delete(query, many=False)

    def delete_many(self, query: dict[str, Any]) -> DeleteResult:
        return self._delete(query, many=True)

    def _delete(self, query: dict[str, Any], many: bool) -> DeleteResult:
        """One server command where it deletes exactly what matched when it is applied: on a
        server whose single-document writes are atomic, or by ``_id`` alone (which no
        write changes); else each matching document's version is claimed and the document
        deleted only at that version, so a document changed meanwhile so that it no
        longer matches is not deleted."""
        server_filter = self._exact_filter(query, many)
        what = "delete_many" if many else "delete_one"
        if self.database.writes == "conditional" or _pins_one(query):
            with server_errors(what, self.codec):
                if many:
                    return self._server.delete_many(server_filter)
                return self._server.delete_one(server_filter)
        targets = self._versions_of(server_filter, many)

        def reread(target: tuple[Any, Any]) -> tuple[Any, Any] | None:
            fresh = self._versions_of(conjunction([server_filter, {"_id": target[0]["_id"]}]))
            return fresh[0] if fresh else None

        reread_all = self._reread_versions(server_filter)
        deleted = self._write_each(targets, lambda _: DELETE, reread, reread_all).matched_count
        return DeleteResult({"n": deleted, "ok": 1.0}, acknowledged=True)

    def _exact_filter(self, query: dict[str, Any], many: bool) -> dict[str, Any]:
        """A server filter selecting exactly the matching documents (by _id if need be)."""
        server_filter = translate_filter(self.codec, query)
        if server_filter.exact:
            return server_filter.document()
        ids = [document["_id"] for _, document in self._matching(query, many)]
        return {"_id": {"$in": ids}}

    def _matching(self, query: dict[str, Any], many: bool) -> Iterator[tuple[Any, Any]]:
        """(stored, decrypted) pairs of the matching documents, in the server's order."""
        server_filter = translate_filter(self.codec, query)
        # One document wanted: with an exact server filter the server stops at the first
        # match (FerretDB scans for all but a string _id, so a limit halves a random
        # document's read), otherwise batches are decoded as they come up to the first
        # match. Many: all are read before the caller writes any (its writes must not
        # move documents under an open cursor).
        limit = 1 if server_filter.exact and not many else 0
        stored_documents = self._find_stored(server_filter.document(), None, 0, limit)
        for batch in [list(stored_documents)] if many else batches(stored_documents):
            decoded = self.codec.decode_many(batch)
            for stored, document in zip(batch, decoded, strict=True):
                if matches(document, query):
                    yield stored, document
                    if not many:
                        return

    # -- reads -----------------------------------------------------------------

    def find(
        self, filter: dict[str, Any] | None = None, projection: Any = None, **kwargs: Any
    ) -> Cursor:
        return Cursor(self, filter, projection, **kwargs)

    def find_one(self, filter: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        for document in self.find(filter, *args, **kwargs).limit(1):
            return document
        return None

    def count_documents(self, filter: dict[str, Any]) -> int:
        server_filter = translate_filter(self.codec, filter)
        if server_filter.exact:
            with server_errors("count_documents", self.codec):
                return int(self._server.count_documents(server_filter.document()))
        return sum(1 for _ in self._matching(filter, many=True))

    def aggregate(self, pipeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from veil.documents.aggregate import run_pipeline

        return run_pipeline(self, pipeline)

    def create_index(self, keys: Any, unique: bool = False) -> str:
        """A server index on the stored form of each key (``index`` and ``do_nothing`` fields)."""
        server_keys: list[tuple[str, Any]] = []
        for path, direction in normalise_sort(keys):
            spec = self.schema.spec(path)
            if path == "_id" or (spec is not None and spec.attr == "do_nothing"):
                server_keys.append((path, direction))
            elif spec is not None and spec.attr == "index" and spec.path == path:
                cipher = self.codec.ciphers[path]
                string_key = unique and spec.type == "string"
                server_keys.append(
                    (f"{cipher.name}.e" if string_key else cipher.order_path, direction)
                )
            else:
                attr = "static (not in the schema)" if spec is None else spec.attr
                raise UnsupportedQueryError(path, "create_index", attr, "index")
        with server_errors("create_index", self.codec):
            return str(self._server.create_index(server_keys, unique=unique))

    def drop(self) -> None:
        with server_errors("drop", self.codec):
            self._server.drop()
            for tree_collection in self._trees:
                tree_collection.drop()
        for name, claims in self._chains.items():  # a new epoch, no cached chain ends
            self._chains[name] = ChainClaims(claims.collection)

    def _find_stored(
        self, query: dict[str, Any], sort: list[tuple[str, int]] | None, skip: int, limit: int,
        projection: dict[str, Any] | None = None,
    ) -> Iterator[dict[str, Any]]:  # fmt: skip
        with server_errors("find", self.codec):
            cursor = self._server.find(
                query, projection, sort=sort, skip=skip, limit=limit, batch_size=FETCH_BATCH
            )
            yield from cursor

    def find_projected(self, query: dict[str, Any], projection: dict[str, Any]) -> list[Any]:
        with server_errors("find", self.codec):
            return list(self._server.find(query, projection, batch_size=FETCH_BATCH))

    def find_raw(self, query: dict[str, Any], projection: dict[str, Any]) -> list[bytes]:
        """The matches as the server's raw BSON batches (each a run of documents)."""
        with server_errors("find", self.codec):
            found = self._server.find_raw_batches(query, projection, batch_size=FETCH_BATCH)
            return list(cast(Iterable[bytes], found))  # the driver's type says documents

    def decode_raw(self, batches: list[bytes]) -> list[Any]:
        """:meth:`find_raw`'s batches as documents, as :meth:`find_projected` gives them."""
        options = self._server.codec_options
        try:
            return [d for batch in batches for d in bson.decode_all(batch, options)]
        except bson.errors.BSONError as exc:
            raise ServerError(f"find: the server's reply is not valid BSON ({exc})") from None

    @property
    def server_collection(self) -> pymongo.collection.Collection[Any]:
        """The server's collection under its opaque name (the driver's own object)."""
        return self._server

    def server_aggregate(self, pipeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
        with server_errors("aggregate", self.codec):
            return list(self._server.aggregate(pipeline))

    def __repr__(self) -> str:
        return f"Collection({self.database.name!r}, {self.name!r})"


def _incremented(document: dict[str, Any], path: str, delta: Any) -> Any:
    """The value at ``path`` of a decrypted document after ``$inc`` by ``delta``: a missing
    value counts as 0; a null or non-numeric one, and an integer sum past int64, are
    refused, as MongoDB refuses them."""
    value = get_path(document, path)
    id_ = document.get("_id")
    if value is MISSING:
        value = 0
    elif value is None:
        raise _null_increment(path, id_)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldTypeError(
            f"field {path!r} of document {id_!r} holds {type(value).__name__} {value!r}: "
            "$inc adds only to a number"
        )
    total = value + delta
    if isinstance(total, int) and not INT64_MIN <= total <= INT64_MAX:
        raise FieldTypeError(
            f"$inc by {delta!r} takes field {path!r} of document {id_!r} past a 64-bit "
            f"integer ({value!r} + {delta!r}); MongoDB refuses it too"
        )
    return total


def _paillier_addable(stored: dict[str, Any], deltas: dict[str, tuple[Any, bytes]]) -> None:
    """Refuse ``$inc`` of a stored Paillier value that is null, as MongoDB refuses it."""
    for name, (cipher, _) in deltas.items():
        if name in stored and stored[name] is None:
            raise _null_increment(cipher.spec.path, stored["_id"])


def _null_increment(path: str, id_: Any) -> FieldTypeError:
    return FieldTypeError(
        f"field {path!r} of document {id_!r} is null: $inc adds to a number or creates a "
        "missing field, and refuses null as MongoDB does; $set a number there first"
    )


def _assign(document: dict[str, Any], path: str, value: Any) -> None:
    """Apply an :class:`Assign` op to a plaintext document."""
    if value is KEEP:
        return
    if value is not MISSING:
        _set(document, path, value)
        return
    *outer, last = path.split(".")
    for key in outer:
        inner = document.get(key)
        if not isinstance(inner, dict):
            return
        document = inner
    document.pop(last, None)


def _set(document: dict[str, Any], path: str, value: Any) -> None:
    *outer, last = path.split(".")
    for key in outer:
        document = document.setdefault(key, {})
    document[last] = value


def _pins_one(query: dict[str, Any]) -> bool:
    """Whether ``query`` is an ``_id`` equality: it matches one document at most."""
    if set(query) != {"_id"}:
        return False
    value = query["_id"]
    return not (isinstance(value, dict) and any(str(k).startswith("$") for k in value))


class _Planned(NamedTuple):
    """One document's write in :meth:`Collection._write_bulk`."""

    target: tuple[Any, Any]
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
    if _is_replacement(change):
        return pymongo.ReplaceOne(condition, dict(change, **{name: new}))
    return pymongo.UpdateOne(condition, _versioned(change, name, new))


def _is_replacement(change: Any) -> bool:
    """Whether a write is a whole stored document rather than update operators."""
    return isinstance(change, dict) and not any(str(k).startswith("$") for k in change)


def _versioned(update: dict[str, Any], name: str, version: Any) -> dict[str, Any]:
    """``update`` also setting the document's version ``name`` to ``version``."""
    return dict(update, **{"$set": {**update.get("$set", {}), name: version}})


def _kept_changing(document_id: Any) -> str:
    return (
        f"document {document_id!r} kept changing under other writers for "
        f"{int(WRITE_PATIENCE)} s of attempts to update it; retry later"
    )
