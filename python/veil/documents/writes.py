"""Writes that need no plaintext of the stored documents: inserts, replacements,
deletes, and changes the server applies blind.

Documents are validated and encrypted whole before anything is written, so a bad
document leaves the collection unchanged. A change of existing documents is one
server command where the server's single-document writes are atomic, or where it
is a delete by ``_id`` alone (which no write changes); else each matching
document's version is claimed and the document written only at that version
(veil.documents.versioned).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pymongo.errors
from pymongo.collection import Collection as ServerCollection
from pymongo.results import DeleteResult, InsertManyResult, InsertOneResult, UpdateResult

from veil.documents.codec import DocumentCodec
from veil.documents.errors import DocumentsError, PartialWriteError
from veil.documents.positions import Positions
from veil.documents.query import conjunction, pins_one
from veil.documents.reads import Reads
from veil.documents.server import FETCH_BATCH, DatabaseContext, server_errors
from veil.documents.versioned import (
    DELETE,
    Target,
    VersionedWrites,
    is_replacement,
    versioned,
)
from veil.documents.versions import new_version


class Writes:
    """Inserts, replacements, deletes and blind changes of one collection."""

    def __init__(
        self, reads: Reads, positions: Positions, versioned: VersionedWrites,
        database: DatabaseContext,
    ) -> None:  # fmt: skip
        self.codec: DocumentCodec = reads.codec
        self.server: ServerCollection[Any] = reads.server
        self.reads = reads
        self.positions = positions
        self.versioned = versioned
        self.database = database

    def insert_one(self, document: dict[str, Any]) -> InsertOneResult:
        stored = self.codec.encode_many([document], self.positions.claim)
        with server_errors("insert_one", self.codec):
            self.server.insert_one(stored[0])
        return InsertOneResult(document["_id"], acknowledged=True)

    def insert_many(self, documents: Iterable[dict[str, Any]]) -> InsertManyResult:
        """Insert in order; all documents are encrypted before the first is written."""
        documents = list(documents)
        stored = self.codec.encode_many(documents, self.positions.claim)
        ids = [d["_id"] for d in documents]
        if not stored:
            raise DocumentsError("insert_many needs at least one document")
        try:
            with server_errors("insert_many", self.codec):
                self.server.insert_many(stored, ordered=True)
        except pymongo.errors.BulkWriteError as exc:
            written = ids[: exc.details.get("nInserted", 0)]
            raise PartialWriteError(
                f"insert_many stopped after {len(written)} of {len(ids)} documents: "
                f"{exc.details.get('writeErrors', [{}])[0].get('errmsg', exc)}",
                written,
            ) from None
        return InsertManyResult(ids, acknowledged=True)

    def replace_one(self, query: dict[str, Any], replacement: dict[str, Any]) -> UpdateResult:
        if "_id" in replacement:
            raise DocumentsError("a replacement document cannot change _id; leave it out")
        document = dict(replacement, _id=None)
        stored = self.codec.encode_many([document], self.positions.claim)[0]
        stored.pop("_id")
        stored.pop(self.codec.version)  # each write draws its own
        return self.blind(self.reads.exact_filter(query, many=False), stored, many=False)

    def delete(self, query: dict[str, Any], many: bool) -> DeleteResult:
        """One server command where it deletes exactly what matched when it is applied: on a
        server whose single-document writes are atomic, or by ``_id`` alone (which no
        write changes); else each matching document's version is claimed and the document
        deleted only at that version, so a document changed meanwhile so that it no
        longer matches is not deleted."""
        server_filter = self.reads.exact_filter(query, many)
        what = "delete_many" if many else "delete_one"
        if self.database.writes == "conditional" or pins_one(query):
            with server_errors(what, self.codec):
                if many:
                    return self.server.delete_many(server_filter)
                return self.server.delete_one(server_filter)
        deleted = self._each_version(server_filter, DELETE, many).matched_count
        return DeleteResult({"n": deleted, "ok": 1.0}, acknowledged=True)

    def blind(self, server_filter: dict[str, Any], change: Any, many: bool) -> UpdateResult:
        """A change the server makes without the client reading the documents (an update
        document, or a replacement with ``many`` False), each document given a new
        version: one command where the server's single-document updates are atomic,
        else each matching document's version claimed and written."""
        if self.database.writes != "conditional":
            return self._each_version(server_filter, change, many)
        with server_errors("update", self.codec):
            if is_replacement(change):
                return self.server.replace_one(
                    server_filter, dict(change, **{self.codec.version: new_version()})
                )
            update = versioned(change, self.codec.version, new_version())
            if many:
                return self.server.update_many(server_filter, update)
            return self.server.update_one(server_filter, update)

    def _each_version(self, server_filter: dict[str, Any], change: Any, many: bool) -> UpdateResult:
        """``change`` written to each document ``server_filter`` matches (the first, unless
        ``many``) at the version read; a document changed meanwhile is read again by
        ``_id`` under the same filter, and left alone once it no longer matches it."""

        def reread(target: Target) -> Target | None:
            fresh = self._versions_of(conjunction([server_filter, {"_id": target[0]["_id"]}]))
            return fresh[0] if fresh else None

        targets = self._versions_of(server_filter, many)
        reread_all = self._reread_versions(server_filter)
        return self.versioned.write_each(targets, lambda _: change, reread, reread_all)

    def _reread_versions(
        self, server_filter: dict[str, Any]
    ) -> Callable[[list[Target]], list[Target]]:
        """Targets read again together: those still matching ``server_filter``, with
        their versions now (one find)."""

        def reread_all(targets: list[Target]) -> list[Target]:
            ids = {"_id": {"$in": [target[0]["_id"] for target in targets]}}
            return self._versions_of(conjunction([server_filter, ids]), many=True)

        return reread_all

    def _versions_of(self, server_filter: dict[str, Any], many: bool = False) -> list[Target]:
        """(stored ``_id`` and version, None) of the documents ``server_filter`` matches
        (the first, unless ``many``)."""
        with server_errors("update", self.codec):
            found = self.server.find(
                server_filter, {self.codec.version: 1}, limit=0 if many else 1,
                batch_size=FETCH_BATCH,
            )  # fmt: skip
            return [(stored, None) for stored in found]
