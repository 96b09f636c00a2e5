"""Reads of one collection's stored documents, for every operation that needs them.

A find, a count, an update that reads before it writes and an aggregation all read
through :class:`Reads`: the server's part under its exact or conservative filter
(veil.documents.query), decrypted a batch at a time, the plaintext filter re-checked
where the server's was not exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import bson
import bson.errors
from pymongo.collection import Collection as ServerCollection

from veil.documents.codec import DocumentCodec
from veil.documents.errors import ServerError
from veil.documents.fields import FieldCipher
from veil.documents.match import matches
from veil.documents.query import translate_filter
from veil.documents.server import FETCH_BATCH, server_errors

#: Stored documents decoded together: one native call per field and batch.
BATCH = 1000


class Reads:
    """The server collection of one encrypted collection, read through its codec."""

    def __init__(self, codec: DocumentCodec, server: ServerCollection[Any]):
        self.codec = codec
        self.server = server
        self._nested: dict[str, bool] = {}  # holds_nested_forms, per stored name

    def find(
        self, query: Mapping[str, Any], sort: Sequence[tuple[str, int]] | None, skip: int,
        limit: int, projection: Mapping[str, Any] | None = None,
    ) -> Iterator[dict[str, Any]]:  # fmt: skip
        """Stored documents as the server streams them."""
        server_sort = list(sort) if sort else None
        with server_errors("find", self.codec):
            cursor = self.server.find(
                query, projection, sort=server_sort, skip=skip, limit=limit, batch_size=FETCH_BATCH
            )
            yield from cursor

    def matching(self, query: dict[str, Any], many: bool) -> Iterator[tuple[Any, Any]]:
        """(stored, decrypted) pairs of the matching documents, in the server's order."""
        server_filter = translate_filter(self.codec, query)
        # One document wanted: with an exact server filter the server stops at the first
        # match (FerretDB scans for all but a string _id, so a limit halves a random
        # document's read), otherwise batches are decoded as they come up to the first
        # match. Many: all are read before the caller writes any (its writes must not
        # move documents under an open cursor).
        limit = 1 if server_filter.exact and not many else 0
        stored_documents = self.find(server_filter.document(), None, 0, limit)
        for batch in [list(stored_documents)] if many else batches(stored_documents):
            decoded = self.codec.decode_many(batch)
            for stored, document in zip(batch, decoded, strict=True):
                if matches(document, query):
                    yield stored, document
                    if not many:
                        return

    def exact_filter(self, query: dict[str, Any], many: bool) -> dict[str, Any]:
        """A server filter selecting exactly the matching documents (by _id if need be)."""
        server_filter = translate_filter(self.codec, query)
        if server_filter.exact:
            return server_filter.document()
        ids = [document["_id"] for _, document in self.matching(query, many)]
        return {"_id": {"$in": ids}}

    def reread(self, id_: Any, query: dict[str, Any]) -> tuple[Any, Any] | None:
        """Document ``id_`` read again, (stored, decrypted), if it still matches ``query``."""
        stored = list(self.find({"_id": id_}, None, 0, 1))
        if not stored:
            return None
        document = self.codec.decode_many(stored)[0]
        return (stored[0], document) if matches(document, query) else None

    def count(self, query: dict[str, Any]) -> int:
        """Matching documents: counted by the server when its filter is exact."""
        server_filter = translate_filter(self.codec, query)
        if server_filter.exact:
            with server_errors("count_documents", self.codec):
                return int(self.server.count_documents(server_filter.document()))
        return sum(1 for _ in self.matching(query, many=True))

    def find_projected(self, query: Mapping[str, Any], projection: dict[str, Any]) -> list[Any]:
        with server_errors("find", self.codec):
            return list(self.server.find(query, projection, batch_size=FETCH_BATCH))

    def find_raw(self, query: Mapping[str, Any], projection: dict[str, Any]) -> list[bytes]:
        """The matches as the server's raw BSON batches (each a run of documents)."""
        with server_errors("find", self.codec):
            found = self.server.find_raw_batches(query, projection, batch_size=FETCH_BATCH)
            return list(cast(Iterable[bytes], found))  # the driver's type says documents

    def decode_raw(self, raw: list[bytes]) -> list[Any]:
        """:meth:`find_raw`'s batches as documents, as :meth:`find_projected` gives them."""
        options = self.server.codec_options
        try:
            return [d for batch in raw for d in bson.decode_all(batch, options)]
        except bson.errors.BSONError as exc:
            raise ServerError(f"find: the server's reply is not valid BSON ({exc})") from None

    def aggregate(self, pipeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows of a server pipeline (over stored names and ciphertexts)."""
        with server_errors("aggregate", self.codec):
            return list(self.server.aggregate(pipeline))

    def holds_nested_forms(self, cipher: FieldCipher) -> bool:
        """Whether an ASHE ``h_add`` field holds values of the earlier nested forms, asked
        of the server once per client: no version of Veil writes them any more, so a
        field without them now never has them."""
        if cipher.name not in self._nested:
            with server_errors("looking for earlier h_add forms", self.codec):
                found = self.server.find_one({cipher.name: {"$type": "object"}}, {"_id": 1})
            self._nested[cipher.name] = found is not None
        return self._nested[cipher.name]


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
