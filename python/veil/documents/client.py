"""``connect``: a database of encrypted collections on any MongoDB-wire server.

Collection names reach the server as keyed hashes (``c`` + 16 hex digits);
the database name is the server's and stays in the clear. Each database keeps
one catalog document (``veil_documents`` collection) with the key's public
fingerprint, so opening it with another key fails up front instead of
finding every collection empty.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

import pymongo
import pymongo.errors
from pymongo.uri_parser import parse_uri

from veil.crypto.keys import KeyLabel, MasterKey
from veil.documents.collection import Collection
from veil.documents.errors import DocumentsError, ServerRefusedError
from veil.documents.schema import Schema, load_schema
from veil.documents.server import CATALOG, server_errors
from veil.documents.versions import MODES
from veil.errors import WrongKeyError
from veil.keys import load_key

DEFAULT_DATABASE = "veil"
DEFAULT_TIMEOUT_MS = 5000


def connect(
    url: str,
    key_file: str | os.PathLike[str] | MasterKey,
    schema: dict[str, Any] | str | os.PathLike[str] | None = None,
    *,
    database: str | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    client_options: dict[str, Any] | None = None,
    sums: str = "auto",
    writes: str = "auto",
) -> Database:
    """Open the database named in ``url`` (or ``database``, default ``veil``).

    ``schema`` maps collection names to their schemas (dicts or JSON files),
    or is a JSON file holding that map; a collection without one seals every
    field ``static``. ``client_options`` go to ``pymongo.MongoClient``.

    ``sums`` chooses how a grouped ``$sum``/``$avg`` of ``h_add`` fields runs:
    ``"server"`` (the server adds the ciphertexts and returns the ids whose pads
    the client removes: in the same aggregation where its ``$group`` has
    ``$push``, else by a second query) or ``"fetch"`` (one query returns keys
    and ciphertexts; the client adds them). ``"auto"`` (the default) asks the
    server: ``"fetch"`` on FerretDB, whose ``$group`` computes one accumulator
    per query (1.24: the server path measured 5-8x plain pymongo, fetching 2-4x;
    bench/RESULTS.md), or when it cannot tell; ``"server"`` elsewhere.

    ``writes`` chooses how a write of an existing document excludes concurrent
    writers of it (veil.documents.versions): ``"conditional"`` (one update
    conditioned on the version read: right where the server applies each
    single-document update atomically, as MongoDB does) or ``"claimed"`` (the
    version is first claimed by a unique insert: right on any server, one claim
    and one release more per document written). ``"auto"`` (the default) asks
    the server: ``"claimed"`` on FerretDB (1.24 applies an update as a read and a
    later write, so concurrent updates of one document lose changes) or when it
    cannot tell, ``"conditional"`` elsewhere.
    """
    if sums not in ("auto", "server", "fetch"):
        raise DocumentsError(f'sums is "auto", "server" or "fetch", not {sums!r}')
    if writes not in ("auto", *MODES):
        raise DocumentsError(f'writes is "auto", "claimed" or "conditional", not {writes!r}')
    master = key_file if isinstance(key_file, MasterKey) else load_key(key_file)
    schemas = _schemas(schema)
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
        url,
        serverSelectionTimeoutMS=timeout_ms,
        connectTimeoutMS=timeout_ms,
        tz_aware=False,
        **(client_options or {}),
    )
    name = database or parse_uri(url).get("database") or DEFAULT_DATABASE
    try:
        opened = Database(client, name, master, schemas)
        info = _build_info(client)
        ferretdb = info is None or "ferretdbVersion" in info
        opened.sums = ("fetch" if ferretdb else "server") if sums == "auto" else sums
        opened.writes = ("claimed" if ferretdb else "conditional") if writes == "auto" else writes
        return opened
    except BaseException:
        client.close()  # a wrong key or an unreachable server leaves no client behind
        raise


def _build_info(client: pymongo.MongoClient[dict[str, Any]]) -> dict[str, Any] | None:
    """The server's ``buildInfo`` (FerretDB names its version there); None if refused:
    the choices made from it then take the ones right on any server."""
    try:
        return dict(client.admin.command("buildInfo"))
    except pymongo.errors.PyMongoError:
        return None


def _schemas(schema: dict[str, Any] | str | os.PathLike[str] | None) -> dict[str, Schema]:
    if schema is None:
        return {}
    if isinstance(schema, (str, os.PathLike)):
        schema = json.loads(Path(schema).read_text())
    assert isinstance(schema, dict)
    return {name: load_schema(value) for name, value in schema.items()}


class Database:
    """A database of encrypted collections: ``db.movies`` or ``db["movies"]``."""

    def __init__(
        self,
        client: pymongo.MongoClient[dict[str, Any]],
        name: str,
        master: MasterKey,
        schemas: dict[str, Schema],
    ):
        self.client = client
        self.name = name
        self.master = master
        self.server_database = client[name]
        self._schemas = schemas
        self.sums = "server"
        self.writes = "claimed"
        self._pushes: bool | None = None
        self._collections: dict[str, Collection] = {}
        self._name_key = master.derive(KeyLabel("documents-collection", name))
        self._check_key()

    def _check_key(self) -> None:
        fingerprint = self.master.fingerprint()
        catalog = self.server_database[CATALOG]
        with server_errors(f"opening database {self.name!r}"):
            found = catalog.find_one({"_id": "key"})
            if found is None:
                with contextlib.suppress(pymongo.errors.DuplicateKeyError):
                    # another client opening the new database at once may insert it first
                    catalog.insert_one({"_id": "key", "fingerprint": fingerprint})
                found = catalog.find_one({"_id": "key"})
        if found is not None and found.get("fingerprint") != fingerprint:
            raise WrongKeyError(
                f"database {self.name!r} was encrypted with key {found.get('fingerprint')}, "
                f"not with this key file's {fingerprint}"
            )

    def groups_push(self, collection: pymongo.collection.Collection[Any]) -> bool:
        """Whether the server's ``$group`` computes several accumulators and ``$push``
        (MongoDB does; FerretDB 1.24 computes the first alone and has no ``$push``), so
        a grouped sum's ids come back in its one aggregation. Asked once, of a
        collection with a document: an empty one cannot tell and is asked next time."""
        if self._pushes is None:
            group = {"_id": None, "n": {"$sum": 1}, "p": {"$push": 1}}
            try:
                with server_errors("asking the server what its $group computes"):
                    rows = list(collection.aggregate([{"$limit": 1}, {"$group": group}]))
            except ServerRefusedError:
                rows = [{}]  # an unknown accumulator
            if not rows:
                return False
            self._pushes = rows == [{"_id": None, "n": 1, "p": [1]}]
        return self._pushes

    def opaque_collection_name(self, name: str) -> str:
        return "c" + hmac.digest(self._name_key, name.encode(), "sha256")[:8].hex()

    def get_collection(self, name: str, schema: Any = None) -> Collection:
        """The collection ``name``; ``schema`` sets (or replaces) its schema in this client."""
        if schema is not None:
            self._schemas[name] = load_schema(schema)
            self._collections.pop(name, None)
        if name not in self._collections:
            self._collections[name] = Collection(
                self, name, self._schemas.get(name, load_schema(None))
            )
        return self._collections[name]

    def __getitem__(self, name: str) -> Collection:
        return self.get_collection(name)

    def __getattr__(self, name: str) -> Collection:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.get_collection(name)

    def drop_collection(self, name: str) -> None:
        self.get_collection(name).drop()

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
