"""Cursors over encrypted collections: the server's part of a find, then the client's.

A find runs as one server query. When the server's filter and sort are exact
(see :mod:`veil.documents.query`), skip and limit go to the server too and
documents are decrypted a batch at a time as they arrive. Otherwise the
server returns every document that could match, and the client re-checks the
filter, sorts, skips and limits. ``explain()`` shows both parts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from veil.documents.errors import DocumentsError
from veil.documents.match import matches, project, sort_documents
from veil.documents.query import normalise_sort, translate_filter, translate_sort

if TYPE_CHECKING:
    from veil.documents.codec import DocumentCodec
    from veil.documents.collection import Collection

BATCH = 1000


class Cursor:
    """A lazy find, shaped like pymongo's Cursor (``sort``, ``skip``, ``limit``, iteration)."""

    def __init__(
        self,
        collection: Collection,
        query: dict[str, Any] | None = None,
        projection: dict[str, Any] | list[str] | None = None,
        *,
        sort: Any = None,
        skip: int = 0,
        limit: int = 0,
    ) -> None:
        self._collection = collection
        self._query = dict(query or {})
        if isinstance(projection, list):
            projection = dict.fromkeys(projection, 1)
        self._projection = projection
        self._sort = normalise_sort(sort)
        self._skip = skip
        self._limit = limit
        self._started = False

    def sort(self, key: Any, direction: int | None = None) -> Cursor:
        self._check_not_started()
        self._sort = normalise_sort(key, direction)
        return self

    def skip(self, count: int) -> Cursor:
        self._check_not_started()
        self._skip = count
        return self

    def limit(self, count: int) -> Cursor:
        self._check_not_started()
        self._limit = count
        return self

    def _check_not_started(self) -> None:
        if self._started:
            raise DocumentsError("a cursor cannot be changed once iteration has started")

    def _plan(self) -> dict[str, Any]:
        codec = self._collection.codec
        server_filter = translate_filter(codec, self._query)
        server_sort = translate_sort(codec, self._sort)
        window = server_filter.exact and server_sort.exact
        client_sort = None if server_sort.exact or not self._sort else self._sort
        fields = None
        if server_filter.exact:  # the client re-checks an inexact filter on whole documents
            fields = server_projection(codec, _with_sort_keys(self._projection, client_sort))
        return {
            "server": {
                "collection": self._collection.server_name,
                "filter": server_filter.document(),
                "sort": server_sort.keys or None,
                "skip": self._skip if window else 0,
                "limit": self._limit if window else 0,
                "projection": fields,
            },
            "client": {
                "filter": None if server_filter.exact else self._query,
                "sort": client_sort,
                "skip": 0 if window else self._skip,
                "limit": 0 if window else self._limit,
                "projection": self._projection,
            },
        }

    def explain(self) -> dict[str, Any]:
        """The server's query (opaque names, ciphertexts) and what the client finishes."""
        return self._plan()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._started = True
        plan = self._plan()
        server, client = plan["server"], plan["client"]
        documents = self._collection._find_stored(
            server["filter"], server["sort"], server["skip"], server["limit"], server["projection"]
        )
        if client["sort"] is None and not client["skip"] and not client["limit"]:
            for batch in batches(documents):
                yield from self._finish(batch, client)
            return
        decoded = [d for batch in batches(documents) for d in self._filter(batch, client)]
        if client["sort"]:
            sort_documents(decoded, client["sort"])
        end = client["skip"] + client["limit"] if client["limit"] else None
        for document in decoded[client["skip"] : end]:
            yield project(document, client["projection"])

    def _filter(self, stored: list[dict[str, Any]], client: dict[str, Any]) -> list[Any]:
        decoded = self._collection.codec.decode_many(stored)
        if client["filter"] is None:
            return decoded
        return [d for d in decoded if matches(d, client["filter"])]

    def _finish(self, stored: list[dict[str, Any]], client: dict[str, Any]) -> list[Any]:
        return [project(d, client["projection"]) for d in self._filter(stored, client)]

    def to_list(self) -> list[dict[str, Any]]:
        return list(self)


def _with_sort_keys(
    projection: dict[str, Any] | None, sort: list[tuple[str, int]] | None
) -> dict[str, Any] | None:
    """The projection the server answers when the client sorts: the sort keys (and
    ``_id``, a sort key too) are fetched even when the caller's projection leaves them
    out, and the client projects them away after sorting."""
    if not projection or not sort or not _inclusion(projection):
        return projection  # none, or an exclusion: whole documents are fetched
    return {**projection, "_id": 1, **{path: 1 for path, _ in sort}}


def server_projection(codec: DocumentCodec, projection: dict[str, Any] | None) -> Any:
    """The stored fields an inclusion projection needs (None: fetch whole documents).

    Each projected path's stored field is fetched whole (a sealed subdocument is one
    field); the client then projects the decrypted document exactly.
    """
    if not projection or not _inclusion(projection):
        return None
    if any("." in path for path in projection):
        return None  # whether the parent exists needs its other fields: fetch all
    fields: dict[str, Any] = {"_id": bool(projection.get("_id", True))}
    for path in projection:
        if path == "_id":
            continue
        spec = codec.schema.spec(path)
        if spec is None:
            if codec.schema.has_children(path):
                return None  # a subdocument of several stored fields: fetch all
            fields[codec.extra.name] = 1
        elif spec.attr == "do_nothing":
            fields[path] = 1
        else:
            fields.update(dict.fromkeys(codec.ciphers[spec.path].stored_names, 1))
    return fields


def _inclusion(projection: dict[str, Any]) -> bool:
    """Whether ``projection`` names the fields to keep (``_id`` aside)."""
    return all(bool(v) for k, v in projection.items() if k != "_id")


def batches(documents: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Stored documents in lists of ``BATCH``, decoded a list at a time (one native call
    per field), as the server streams them."""
    batch: list[dict[str, Any]] = []
    for document in documents:
        batch.append(document)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch
