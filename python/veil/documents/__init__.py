"""Encrypted documents over a MongoDB-wire server (the Secure Mongo framework).

``veil.documents.connect(url, key_file, schema={...})`` returns a
:class:`Database` whose collections are shaped like pymongo's. Each field is
encrypted on the client according to its attribute (``static``, ``index``,
``h_add``, ``do_nothing``); see ``docs/documents.md``.
"""

from veil.documents.client import Database, connect
from veil.documents.collection import Collection
from veil.documents.cursor import Cursor
from veil.documents.errors import (
    DocumentsError,
    FieldTypeError,
    PartialWriteError,
    SchemaError,
    ServerError,
    UnsupportedQueryError,
)
from veil.documents.schema import Schema, load_schema

__all__ = [
    "Collection",
    "Cursor",
    "Database",
    "DocumentsError",
    "FieldTypeError",
    "PartialWriteError",
    "Schema",
    "SchemaError",
    "ServerError",
    "UnsupportedQueryError",
    "connect",
    "load_schema",
]
