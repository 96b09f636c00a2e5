"""An encrypted collection, shaped like pymongo's Collection: a façade over its operations.

Every method translates its plaintext paths and values into the stored fields'
opaque names and ciphertexts, sends one command (more for an update the server
cannot do blind), and decrypts what comes back. The work is done by one object per
kind of operation, which this class builds and wires together:

* reads (veil.documents.reads, veil.documents.cursor): finds, counts;
* writes (veil.documents.writes): inserts, replacements, deletes;
* updates (veil.documents.updates): ``update_one``, ``update_many``;
* aggregation (veil.documents.aggregate);

sharing the collection's codec, the position claims of its chained fields
(veil.documents.positions) and its writes at a version (veil.documents.versioned).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pymongo.collection import Collection as ServerCollection
from pymongo.results import DeleteResult, InsertManyResult, InsertOneResult, UpdateResult

from veil.documents.aggregate import run_pipeline
from veil.documents.codec import DocumentCodec
from veil.documents.cursor import Cursor
from veil.documents.oretree import OreTree
from veil.documents.positions import Positions
from veil.documents.query import translate_index
from veil.documents.reads import Reads
from veil.documents.schema import Schema
from veil.documents.server import CATALOG, DatabaseContext, server_errors
from veil.documents.updates import Updates
from veil.documents.versioned import VersionedWrites
from veil.documents.versions import Claims
from veil.documents.writes import Writes


class Collection:
    """One collection: its schema, its codec and the server collection under an opaque name."""

    def __init__(self, database: DatabaseContext, name: str, schema: Schema):
        self.database = database
        self.name = name
        self.schema = schema
        self.codec = DocumentCodec(database.master, f"{database.name}/{name}", schema)
        self.server_name = database.opaque_collection_name(name)
        server_database = database.server_database
        self.server_collection: ServerCollection[Any] = server_database[self.server_name]
        self._claims = Claims(server_database[self.server_name + "w"])
        self.reads = Reads(self.codec, self.server_collection)
        self.positions = Positions(self.codec, server_database, self.server_name)
        versioned = VersionedWrites(self.codec, self.server_collection, self._claims, database)
        self.writes = Writes(self.reads, self.positions, versioned, database)
        self.updates = Updates(self.writes)
        # side collections, dropped with this one
        self._sides = [self._claims.collection, *self._ore_trees(), *self.positions.collections]
        self._record_public_keys()

    def _ore_trees(self) -> list[ServerCollection[Any]]:
        """Each ``ore`` field's B+-tree, set on its cipher: its nodes and claims."""
        sides: list[ServerCollection[Any]] = []
        for cipher in self.codec.ciphers.values():
            if cipher.ore is not None:
                base = f"{self.server_name}{cipher.name}"
                nodes, claims = (self.database.server_database[base + s] for s in ("n", "c"))
                cipher.ore.tree = OreTree(nodes, claims)
                sides += [nodes, claims]
        return sides

    def _record_public_keys(self) -> None:
        """Each Paillier field's public key in the catalog, for parties without the key."""
        for cipher in self.codec.ciphers.values():
            if cipher.paillier is not None:
                with server_errors("recording a Paillier public key", self.codec):
                    catalog = self.database.server_database[CATALOG]
                    cipher.paillier.record_public_key(catalog, self.server_name, cipher.name)

    # -- writes ----------------------------------------------------------------

    def insert_one(self, document: dict[str, Any]) -> InsertOneResult:
        return self.writes.insert_one(document)

    def insert_many(self, documents: Iterable[dict[str, Any]]) -> InsertManyResult:
        """Insert in order; all documents are encrypted before the first is written."""
        return self.writes.insert_many(documents)

    def replace_one(self, query: dict[str, Any], replacement: dict[str, Any]) -> UpdateResult:
        return self.writes.replace_one(query, replacement)

    def delete_one(self, query: dict[str, Any]) -> DeleteResult:
        return self.writes.delete(query, many=False)

    def delete_many(self, query: dict[str, Any]) -> DeleteResult:
        return self.writes.delete(query, many=True)

    # -- updates ---------------------------------------------------------------

    def update_one(self, query: dict[str, Any], update: dict[str, Any]) -> UpdateResult:
        return self.updates.update(query, update, many=False)

    def update_many(self, query: dict[str, Any], update: dict[str, Any]) -> UpdateResult:
        return self.updates.update(query, update, many=True)

    # -- reads -----------------------------------------------------------------

    def find(
        self, filter: dict[str, Any] | None = None, projection: Any = None, **kwargs: Any
    ) -> Cursor:
        return Cursor(self.reads, filter, projection, **kwargs)

    def find_one(self, filter: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        for document in self.find(filter, *args, **kwargs).limit(1):
            return document
        return None

    def count_documents(self, filter: dict[str, Any]) -> int:
        return self.reads.count(filter)

    # -- aggregation -----------------------------------------------------------

    def aggregate(self, pipeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return run_pipeline(self.reads, self.positions, self.database, pipeline)

    # -- the collection itself -------------------------------------------------

    def create_index(self, keys: Any, unique: bool = False) -> str:
        """A server index on the stored form of each key (``index`` and ``do_nothing`` fields)."""
        server_keys = translate_index(self.codec, keys, unique)
        with server_errors("create_index", self.codec):
            return str(self.server_collection.create_index(server_keys, unique=unique))

    def drop(self) -> None:
        with server_errors("drop", self.codec):
            self.server_collection.drop()
            for side in self._sides:
                side.drop()
        self.positions.restart()  # a new epoch, no cached chain ends

    def __repr__(self) -> str:
        return f"Collection({self.database.name!r}, {self.name!r})"
