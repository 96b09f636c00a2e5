"""Cursors over encrypted collections: a find's plan, run when iteration starts.

A cursor collects pymongo's settings (``sort``, ``skip``, ``limit``) and, when
iterated, plans the find once (veil.documents.findplan) and runs it: the server's
part as one server query, decrypted a batch at a time; then the client's part.
Where the plan leaves nothing to sort, skip or limit on the client, documents are
handed out as their batch is decrypted. ``explain()`` shows both parts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from veil.documents.errors import DocumentsError
from veil.documents.findplan import ClientFinish, FindPlan, plan_find
from veil.documents.match import matches, project, sort_documents
from veil.documents.query import normalise_sort
from veil.documents.reads import Reads, batches


class Cursor:
    """A lazy find, shaped like pymongo's Cursor (``sort``, ``skip``, ``limit``, iteration)."""

    def __init__(
        self,
        reads: Reads,
        query: dict[str, Any] | None = None,
        projection: dict[str, Any] | list[str] | None = None,
        *,
        sort: Any = None,
        skip: int = 0,
        limit: int = 0,
    ) -> None:
        self._reads = reads
        self._query = dict(query or {})
        if isinstance(projection, list):
            projection = dict.fromkeys(projection, 1)
        self._projection = projection
        self._sort = tuple(normalise_sort(sort))
        self._skip = skip
        self._limit = limit
        self._started = False

    def sort(self, key: Any, direction: int | None = None) -> Cursor:
        self._check_not_started()
        self._sort = tuple(normalise_sort(key, direction))
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

    def plan(self) -> FindPlan:
        """The find as it runs now (settings changed later make a new plan)."""
        collection = self._reads.server.name
        return plan_find(
            self._reads.codec, collection, self._query, self._projection, self._sort,
            self._skip, self._limit,
        )  # fmt: skip

    def explain(self) -> dict[str, Any]:
        """The server's query (opaque names, ciphertexts) and what the client finishes."""
        return self.plan().explain()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._started = True
        plan = self.plan()
        server, client = plan.server, plan.client
        documents = self._reads.find(
            server.filter, server.sort, server.skip, server.limit, server.projection
        )
        if client.streams:
            for batch in batches(documents):
                yield from self._finish(batch, client)
            return
        decoded = [d for batch in batches(documents) for d in self._filter(batch, client)]
        if client.sort:
            sort_documents(decoded, client.sort)
        end = client.skip + client.limit if client.limit else None
        for document in decoded[client.skip : end]:
            yield project(document, client.projection)

    def _filter(self, stored: list[dict[str, Any]], client: ClientFinish) -> list[Any]:
        decoded = self._reads.codec.decode_many(stored)
        if client.filter is None:
            return decoded
        return [d for d in decoded if matches(d, client.filter)]

    def _finish(self, stored: list[dict[str, Any]], client: ClientFinish) -> list[Any]:
        return [project(d, client.projection) for d in self._filter(stored, client)]

    def to_list(self) -> list[dict[str, Any]]:
        return list(self)
