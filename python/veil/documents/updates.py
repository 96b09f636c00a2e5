"""Updates (``update_one``, ``update_many``): each by the cheapest way that is exact.

``plan_update`` (veil.documents.updateplan) splits an update document into what the
server applies blind and *client ops*. With no client ops the server applies the
update (veil.documents.writes). Otherwise, in order of preference:

* ``$inc`` of chained fields that reveal increments: one blind server ``$inc`` of
  their words once each increment's drift is claimed (veil.documents.drift);
* ``$inc`` of Paillier ``h_add`` fields: pushed as a pending ciphertext onto the one
  document an ``_id`` pins, else the stored ciphertexts multiplied by the increment's
  (the public key's addition) and written back at the version read, never decrypted;
* anything else: read, decrypt, change, re-encrypt and write back at the version read
  (veil.documents.versioned), re-applied to a document another writer changed first.

Every refusal (``$inc`` of a null, a sum past int64 or past a chained field's domain)
is raised before anything is written, as MongoDB refuses it.
"""

from __future__ import annotations

from typing import Any, cast

from bson.int64 import Int64
from pymongo.collection import Collection as ServerCollection
from pymongo.results import UpdateResult

from veil.documents.codec import DocumentCodec
from veil.documents.drift import increment
from veil.documents.errors import FieldTypeError
from veil.documents.fields import FieldCipher
from veil.documents.match import MISSING, get_path
from veil.documents.paillier import FOLD_AT, PENDING
from veil.documents.positions import Positions
from veil.documents.query import conjunction, pins_one
from veil.documents.reads import Reads
from veil.documents.server import server_errors
from veil.documents.updateplan import KEEP, Assign, Revealed, plan_update
from veil.documents.versioned import Target, VersionedWrites
from veil.documents.writes import Writes

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Per Paillier field's stored name: its cipher and the increment's encryption.
Deltas = dict[str, tuple[FieldCipher, bytes]]


class Updates:
    """``update_one`` and ``update_many`` of one collection."""

    def __init__(self, writes: Writes) -> None:
        self.codec: DocumentCodec = writes.codec
        self.server: ServerCollection[Any] = writes.server
        self.reads: Reads = writes.reads
        self.positions: Positions = writes.positions
        self.versioned: VersionedWrites = writes.versioned
        self.writes = writes

    def update(self, query: dict[str, Any], update: dict[str, Any], many: bool) -> UpdateResult:
        server_update, client_ops = plan_update(self.codec, update)
        if any(isinstance(op, Revealed) for op in client_ops.values()):
            if not many and all(isinstance(op, Revealed) for op in client_ops.values()):
                result = self._revealed(query, client_ops, server_update)
                if result is not None:
                    return result
            client_ops = {p: getattr(op, "delta", op) for p, op in client_ops.items()}
        ciphers = [self.codec.cipher(p) for p in client_ops]
        if client_ops and all(c is not None and c.paillier is not None for c in ciphers):
            deltas = self._paillier_deltas(client_ops)  # encrypted once, pushed or folded
            if not many and pins_one(query):
                pushed = self._push_paillier(query, deltas, server_update)
                if pushed is not None:
                    return pushed
            return self.multiply_paillier(query, deltas, server_update, many)
        if client_ops:
            return self.read_modify_write(query, client_ops, server_update, many)
        return self.writes.blind(self.reads.exact_filter(query, many), server_update, many)

    def _revealed(
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
                first = self.positions.claim_drift(cipher, size)
                if first + size - 1 > budget:
                    return None
            added[cipher.name] = Int64(increment(cipher.chained.layout, op.delta))
            guards.append({cipher.name + "p": {"$exists": True}})  # a chained value, not null
        server_filter = conjunction([self.reads.exact_filter(query, many=False), *guards])
        result = self.writes.blind(
            server_filter, dict(server_update, **{"$inc": added}), many=False
        )
        return result if result.matched_count else None

    def read_modify_write(
        self, query: dict[str, Any], client_ops: dict[str, Any], server_update: dict[str, Any],
        many: bool,
    ) -> UpdateResult:  # fmt: skip
        """Read, change, re-encrypt, write back only if the document is unchanged meanwhile;
        a document another writer changed first is read again and the change re-applied."""

        def write(target: Target) -> dict[str, Any]:
            return self.client_update(target[1], client_ops, server_update)

        def reread(target: Target) -> Target | None:
            return self.reads.reread(target[0]["_id"], query)

        targets = list(self.reads.matching(query, many))
        added = {path: op for path, op in client_ops.items() if not isinstance(op, Assign)}
        for _, document in targets:  # refused before anything is written
            for path, delta in added.items():
                self._check_sum(path, _incremented(document, path, delta))
        return self.versioned.write_each(targets, write, reread)

    def _check_sum(self, path: str, value: Any) -> None:
        """Refuse an incremented value its field cannot store (a chained field's domain)."""
        cipher = self.codec.cipher(path)
        if cipher is not None and cipher.chained is not None:
            cipher.chained.check([value])

    def _paillier_deltas(self, increments: dict[str, int]) -> Deltas:
        """Per Paillier field's stored name: its cipher and the increment's encryption."""
        deltas: Deltas = {}
        for path, delta in increments.items():
            cipher = self.codec.ciphers[path]
            assert cipher.paillier is not None
            deltas[cipher.name] = cipher, cast(bytes, cipher.paillier.encrypt([delta])[0])
        return deltas

    def _push_paillier(
        self, query: dict[str, Any], deltas: Deltas,
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
        server_filter = conjunction([self.reads.exact_filter(query, many=False), *room])
        result = self.writes.blind(server_filter, update, many=False)
        return result if result.matched_count else None

    def multiply_paillier(
        self, query: dict[str, Any], deltas: Deltas,
        server_update: dict[str, Any], many: bool,
    ) -> UpdateResult:  # fmt: skip
        """``$inc`` of Paillier ``h_add`` fields without decrypting them: the stored
        ciphertext and its pending increments times the increment's encryption (the public
        key's addition), written back with no pending ones only if none of them changed
        meanwhile, else read again and re-added."""
        server_filter = self.reads.exact_filter(query, many)
        read = [*deltas, *(name + PENDING for name in deltas), self.codec.version]
        projection = dict.fromkeys(read, 1)
        with server_errors("update", self.codec):
            targets = list(self.server.find(server_filter, projection, limit=0 if many else 1))
        for target in targets:  # refused before anything is written
            _paillier_addable(target, deltas)

        def write(target: Target) -> dict[str, Any]:
            return self.paillier_update(target[0], deltas, server_update)

        def reread(target: Target) -> Target | None:
            with server_errors("update", self.codec):
                fresh = self.server.find_one(
                    conjunction([server_filter, {"_id": target[0]["_id"]}]), projection
                )
            if fresh is not None:
                _paillier_addable(fresh, deltas)
            return None if fresh is None else (fresh, None)

        return self.versioned.write_each([(t, None) for t in targets], write, reread)

    def paillier_update(
        self, stored: dict[str, Any], deltas: Deltas,
        server_update: dict[str, Any],
    ) -> dict[str, Any]:  # fmt: skip
        """The server update adding each increment to ``stored``'s value, its pending
        increments folded in (a missing value counts as 0; the caller refused a null one,
        as MongoDB's ``$inc`` and :meth:`client_update` do)."""
        changed: dict[str, Any] = {}
        dropped: dict[str, Any] = dict(server_update.get("$unset", {}))
        for cipher, delta in deltas.values():
            assert cipher.paillier is not None
            old = cipher.gathered(stored)
            missing = old is None or old is MISSING
            changed[cipher.name] = delta if missing else cipher.paillier.add(old, delta)
            if cipher.name + PENDING in stored:
                dropped[cipher.name + PENDING] = ""
        update = dict(server_update, **{"$set": {**server_update.get("$set", {}), **changed}})
        if dropped:
            update["$unset"] = dropped
        return update

    def client_update(
        self, document: dict[str, Any], client_ops: dict[str, Any], server_update: dict[str, Any]
    ) -> dict[str, Any]:
        """The server update writing ``document`` (decrypted) after ``client_ops``: each
        changed path re-encrypted, beside the update's blind part ``server_update``."""
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
        position = self.positions.claim(cipher, [None if group is MISSING else group])
        return cipher.set_fields(cipher.chained.encrypt([value], position)[0])


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


def _paillier_addable(stored: dict[str, Any], deltas: Deltas) -> None:
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
