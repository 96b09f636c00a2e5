"""The MongoDB-wire server as a collection's modules meet it: its errors, its catalog,
and what a collection uses of its database.

Every driver call of the collection modules runs inside :func:`server_errors`, the
one place where pymongo's errors become Veil's. :class:`DatabaseContext` is a
Protocol rather than ``veil.documents.client.Database`` itself, so that the modules
a ``Database`` builds its collections from never import the module that builds them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import pymongo.errors
from pymongo.collection import Collection as ServerCollection
from pymongo.database import Database as ServerDatabase

from veil.crypto.keys import MasterKey
from veil.documents.errors import ServerError, ServerRefusedError

#: The database's catalog collection (the key's fingerprint, Paillier public keys).
CATALOG = "veil_documents"
#: Documents per server reply: few round trips for large results, within 16 MiB replies.
FETCH_BATCH = 20_000


class UserTerms(Protocol):
    """What turns a server's message back into the user's field paths (the codec)."""

    def in_user_terms(self, text: str) -> str: ...


class DatabaseContext(Protocol):
    """What a collection uses of its database: read when used, so a change of ``sums``
    or ``writes`` after the collection was opened takes effect at its next operation."""

    @property
    def name(self) -> str: ...

    @property
    def master(self) -> MasterKey: ...

    @property
    def server_database(self) -> ServerDatabase[Any]: ...

    @property
    def sums(self) -> str: ...

    @property
    def writes(self) -> str: ...

    def opaque_collection_name(self, name: str) -> str: ...

    def groups_push(self, collection: ServerCollection[Any]) -> bool: ...


@contextlib.contextmanager
def server_errors(what: str, codec: UserTerms | None = None) -> Iterator[None]:
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
