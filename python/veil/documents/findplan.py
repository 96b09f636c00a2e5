"""A find's plan: the server's part over stored fields, then what the client finishes.

:func:`plan_find` splits a find (filter, projection, sort, skip, limit over plaintext
paths) in two, as SQL's split planner splits a query. The server gets the filter and
sort that veil.documents.query translates; when both are *exact*, skip and limit go
to the server too and the client only decrypts and projects. Otherwise the server
returns every document that could match and the client re-checks the filter, sorts,
skips and limits. Before -> after, for ``title`` a ``string`` index::

    find({"title": {"$gt": "M"}}).limit(5)
      -> server: {"filter": {"f9c0d1e2f.o": {"$gte": OPE(prefix8("M"))}}, "limit": 0}
         client: {"filter": {"title": {"$gt": "M"}}, "limit": 5}

A plan is immutable: a cursor makes one when it starts and runs it unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from veil.documents.codec import DocumentCodec
from veil.documents.query import translate_filter, translate_sort

#: Sort keys in order: (path, 1 or -1).
Sort = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class ServerFind:
    """The server's find, over opaque names and ciphertexts."""

    collection: str
    filter: Mapping[str, Any]
    sort: Sort | None
    skip: int
    limit: int
    projection: Mapping[str, Any] | None  # None: whole stored documents


@dataclass(frozen=True)
class ClientFinish:
    """What the client does to the decrypted documents, in this order."""

    filter: Mapping[str, Any] | None  # None: the server's filter was exact
    sort: Sort | None
    skip: int
    limit: int
    projection: Mapping[str, Any] | None

    @property
    def streams(self) -> bool:
        """Whether documents can be handed out a batch at a time as they arrive: nothing
        to sort, skip or limit needs them all first."""
        return self.sort is None and not self.skip and not self.limit


@dataclass(frozen=True)
class FindPlan:
    server: ServerFind
    client: ClientFinish

    def explain(self) -> dict[str, Any]:
        """The plan as ``Cursor.explain()`` shows it (sorts as lists, as pymongo's)."""
        return {"server": _shown(asdict(self.server)), "client": _shown(asdict(self.client))}


def plan_find(
    codec: DocumentCodec, collection: str, query: Mapping[str, Any],
    projection: Mapping[str, Any] | None, sort: Sort, skip: int, limit: int,
) -> FindPlan:  # fmt: skip
    """The plan of a find over ``collection`` (the server's opaque name)."""
    server_filter = translate_filter(codec, query)
    server_sort = translate_sort(codec, sort)
    window = server_filter.exact and server_sort.exact  # skip and limit go to the server
    client_sort = None if server_sort.exact or not sort else sort
    fields = None
    if server_filter.exact:  # the client re-checks an inexact filter on whole documents
        fields = server_projection(codec, _with_sort_keys(projection, client_sort))
    server = ServerFind(
        collection=collection,
        filter=server_filter.document(),
        sort=tuple(server_sort.keys) or None,
        skip=skip if window else 0,
        limit=limit if window else 0,
        projection=fields,
    )
    client = ClientFinish(
        filter=None if server_filter.exact else query,
        sort=client_sort,
        skip=0 if window else skip,
        limit=0 if window else limit,
        projection=projection,
    )
    return FindPlan(server, client)


def server_projection(codec: DocumentCodec, projection: Mapping[str, Any] | None) -> Any:
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


def _with_sort_keys(
    projection: Mapping[str, Any] | None, sort: Sort | None
) -> Mapping[str, Any] | None:
    """The projection the server answers when the client sorts: the sort keys (and
    ``_id``, a sort key too) are fetched even when the caller's projection leaves them
    out, and the client projects them away after sorting."""
    if not projection or not sort or not _inclusion(projection):
        return projection  # none, or an exclusion: whole documents are fetched
    return {**projection, "_id": 1, **{path: 1 for path, _ in sort}}


def _inclusion(projection: Mapping[str, Any]) -> bool:
    """Whether ``projection`` names the fields to keep (``_id`` aside)."""
    return all(bool(v) for k, v in projection.items() if k != "_id")


def _shown(part: dict[str, Any]) -> dict[str, Any]:
    """A part of the plan with its sort keys as a list of pairs, as explain gave them."""
    sort = part.get("sort")
    return part | {"sort": None if sort is None else [tuple(key) for key in sort]}
