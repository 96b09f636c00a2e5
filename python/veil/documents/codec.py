"""Whole documents to stored documents and back, field by field, batch at a time.

A document is split into leaf paths by the schema: each schema path becomes
one opaque top-level field of the stored document (its attribute's stored
form, see :mod:`veil.documents.fields`); ``do_nothing`` paths keep their place
in the clear; fields the schema does not name are refused or, with
``"default": "static"``, sealed together in one extra ``static`` field
(their names included). Each field's values across a batch are encrypted in
one native call.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable
from typing import Any

from bson import ObjectId

from veil.crypto.keys import MasterKey
from veil.documents.chains import Slot
from veil.documents.errors import SchemaError
from veil.documents.fields import NAME_BYTES, FieldCipher, opaque_name
from veil.documents.match import MISSING, get_path
from veil.documents.schema import FieldSpec, Schema
from veil.documents.versions import new_version

#: ``claim(cipher, group values) -> [(chain, position, sub-chain)]``: slots for a
#: batch's non-null chained values, given their group values (claimed in the server).
Claim = Callable[[FieldCipher, list[Any]], list[Slot]]
EXTRA_PATH = "\x00extra"  # the sealed field of unnamed paths; no user path looks like it
#: A stored field name in a server's message (a cipher's, or a companion's with its suffix).
_STORED_NAME = re.compile(rf"\bf[0-9a-f]{{{2 * NAME_BYTES}}}[a-z]?\b")


class DocumentCodec:
    """Encrypts and decrypts the documents of one collection."""

    def __init__(self, master: MasterKey, scope: str, schema: Schema):
        self.schema = schema
        self.ciphers = {
            path: FieldCipher(master, scope, spec, schema.fields.get(spec.chain))
            for path, spec in schema.fields.items()
            if spec.attr != "do_nothing"
        }
        self.extra = FieldCipher(master, scope, FieldSpec(EXTRA_PATH, "static"))
        self._by_name = {cipher.name: cipher for cipher in self.ciphers.values()}
        self._by_name[self.extra.name] = self.extra
        #: A stored marker per subdocument that holds schema fields (``n`` of ``n.i``),
        #: under an opaque name: written wherever the document has that subdocument, so
        #: that one whose fields are all missing (``{"n": {}}``, or after ``$unset`` of its
        #: last field) is still there, as MongoDB keeps it.
        self.parents = {
            parent: opaque_name(master, scope, parent + ".") for parent in _parents(schema)
        }
        self._parent_paths = {name: parent for parent, name in self.parents.items()}
        #: The document's version, drawn afresh by every write (veil.documents.versions);
        #: no user path starts with ``$``.
        self.version = opaque_name(master, scope, "$version")
        #: Names that hold parts of another name's value (ASHE's high half, ids).
        self._companions = {
            name for cipher in self.ciphers.values() for name in cipher.stored_names[1:]
        }
        names = set(self._by_name) | set(self._parent_paths) | self._companions | {self.version}
        if len(names) != len(self.ciphers) + 2 + len(self.parents) + len(self._companions):
            raise SchemaError(
                "two field paths of this collection hash to one stored name; rename one"
            )

    def cipher(self, path: str) -> FieldCipher | None:
        return self.ciphers.get(path)

    def in_user_terms(self, text: str) -> str:
        """``text`` (a server's message) with each stored name as the field path it holds
        (``'f0857baff'`` -> ``'a'``): for the user's eyes only, never sent."""

        def path_of(match: re.Match[str]) -> str:
            name = match.group(0)
            cipher = self._by_name.get(name) or self._by_name.get(name[:-1])
            if cipher is not None and cipher is not self.extra:
                return cipher.spec.path
            return self._parent_paths.get(name, name)

        return _STORED_NAME.sub(path_of, text)

    def markers(self, path: str) -> dict[str, bool]:
        """The markers to ``$set`` with a value written at ``path``: the subdocuments
        holding it exist from then on, as the write creates them."""
        return {self.parents[p]: True for p in _prefixes(path) if p in self.parents}

    # -- documents to stored documents -------------------------------------------

    def encode_many(
        self, documents: Iterable[dict[str, Any]], claim: Claim | None = None
    ) -> list[dict[str, Any]]:
        """Stored forms of ``documents``; each document without ``_id`` gets an ObjectId.
        ``claim`` gives chained fields' values their chain and position in it (without
        it, each takes a one-document chain)."""
        documents = list(documents)
        stored: list[dict[str, Any]] = []
        columns: dict[str, list[tuple[int, Any]]] = {}
        for row, document in enumerate(documents):
            if not isinstance(document, dict):
                raise SchemaError(f"a document is a dict, not {type(document).__name__}")
            document.setdefault("_id", ObjectId())
            out: dict[str, Any] = {"_id": document["_id"], self.version: new_version()}
            extras: dict[str, Any] = {}
            self._split(document, "", out, columns, extras, row)
            if extras:
                columns.setdefault(EXTRA_PATH, []).append((row, extras))
            stored.append(out)
        for path, entries in columns.items():
            cipher = self.extra if path == EXTRA_PATH else self.ciphers[path]
            values = [value for _, value in entries]
            if cipher.chained is not None and claim is not None:
                groups = [_group_of(documents[row], cipher.spec.chain) for row, _ in entries]
                cipher.chained.check(values)  # a refused value claims nothing
                present = [g for g, value in zip(groups, values, strict=True) if value is not None]
                forms = cipher.chained.encrypt(values, claim(cipher, present))
            else:
                forms = cipher.encrypt(values)
            for (row, _), form in zip(entries, forms, strict=True):
                stored[row].update(cipher.stored_fields(form))
        return stored

    def encode_value(self, path: str, value: Any) -> tuple[dict[str, Any], list[str]]:
        """(stored fields to ``$set``, stored names to ``$unset``) for one value at
        ``path``; an ASHE value occupies several names."""
        spec = self.schema.fields.get(path)
        if spec is None:
            raise SchemaError(self._unknown(path))
        if spec.attr == "do_nothing":
            return {path: value}, []
        cipher = self.ciphers[path]
        return cipher.set_fields(cipher.encrypt([value])[0])

    def _split(
        self,
        document: dict[str, Any],
        prefix: str,
        out: dict[str, Any],
        columns: dict[str, list[tuple[int, Any]]],
        extras: dict[str, Any],
        row: int,
    ) -> None:
        for key, value in document.items():
            if not isinstance(key, str) or not key or key.startswith("$") or "." in key:
                raise SchemaError(f"field name {key!r} is not allowed (no $, no dots, not empty)")
            path = prefix + key
            if path == "_id":
                continue
            spec = self.schema.fields.get(path)
            if spec is not None and spec.attr == "do_nothing":
                _set_path(out, path, value)
            elif spec is not None:
                columns.setdefault(path, []).append((row, value))
            elif isinstance(value, dict) and self.schema.has_children(path):
                out[self.parents[path]] = True
                self._split(value, path + ".", out, columns, extras, row)
            elif self.schema.default == "static":
                extras[path] = value
            else:
                raise SchemaError(self._unknown(path))

    def _unknown(self, path: str) -> str:
        return (
            f"field {path!r} is not in the collection's schema; add it with an attribute "
            '(or set "default": "static" to seal unnamed fields)'
        )

    # -- stored documents to documents -------------------------------------------

    def decode_many(self, stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Plaintext documents of stored ones (each field's values decrypted in one call)."""
        documents: list[dict[str, Any]] = []
        columns: dict[str, list[tuple[int, Any]]] = {}
        parents: list[tuple[int, str]] = []
        for row, entry in enumerate(stored):
            document: dict[str, Any] = {}
            for name, form in entry.items():
                if name in self._parent_paths:
                    parents.append((row, self._parent_paths[name]))
                elif name in self._by_name:
                    form = self._by_name[name].gathered(entry)
                    columns.setdefault(name, []).append((row, form))
                elif name not in self._companions and name != self.version:
                    document[name] = copy.deepcopy(form) if isinstance(form, dict) else form
            documents.append(document)
        for name, entries in columns.items():
            cipher = self._by_name[name]
            values = cipher.decrypt([form for _, form in entries])
            for (row, _), value in zip(entries, values, strict=True):
                if cipher is self.extra:
                    for path, extra in value.items():
                        _set_path(documents[row], path, extra)
                else:
                    _set_path(documents[row], cipher.spec.path, value)
        for row, path in parents:
            _ensure_document(documents[row], path)
        return documents


def _group_of(document: dict[str, Any], path: str) -> Any:
    value = get_path(document, path)
    return None if value is MISSING else value


def _parents(schema: Schema) -> set[str]:
    """The subdocument paths that hold schema fields and are not fields themselves."""
    return {parent for path in schema.fields for parent in _prefixes(path)} - set(schema.fields)


def _prefixes(path: str) -> list[str]:
    """The subdocument paths holding ``path`` (``a``, ``a.b`` of ``a.b.c``)."""
    parts = path.split(".")
    return [".".join(parts[:cut]) for cut in range(1, len(parts))]


def _ensure_document(document: dict[str, Any], path: str) -> None:
    """The subdocument at ``path`` made to exist (empty when nothing else made it)."""
    for key in path.split("."):
        inner = document.setdefault(key, {})
        if not isinstance(inner, dict):
            return
        document = inner


def _set_path(document: dict[str, Any], path: str, value: Any) -> None:
    *outer, last = path.split(".")
    for key in outer:
        inner = document.get(key)
        if not isinstance(inner, dict):
            inner = document[key] = {}
        document = inner
    document[last] = value
