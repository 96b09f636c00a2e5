"""A collection's schema: the attribute of each field path (Secure Mongo §2.3).

A schema is a dict (or a JSON file holding one)::

    {"fields": {"title": "static",
                "year": {"attr": "index", "type": "int"},
                "price": {"attr": "index", "type": "decimal", "scale": 2},
                "salary": "h_add",
                "meta.source": "do_nothing"},
     "default": "refuse"}

Field paths are dotted (``meta.source``: the ``source`` key of the
subdocument ``meta``). A path's value may be a scalar or an array of scalars;
a ``static`` path may also hold a whole subdocument. ``default`` says what
happens to a field the schema does not name: ``"refuse"`` (an error naming
the field) or ``"static"``. ``_id`` is always the server's, in the clear.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veil.documents.errors import SchemaError

ATTRIBUTES = ("static", "index", "h_add", "h_mul", "do_nothing")
INDEX_TYPES = ("int", "decimal", "datetime", "string")
#: Attributes whose scheme is not built yet, with what to use meanwhile.
NOT_BUILT: dict[str, str] = {}
DEFAULT_SCHEMES = {"index": "ope", "h_add": "ashe", "h_mul": "elgamal"}
INDEX_SCHEMES = ("ope", "ore")
ADD_SCHEMES = ("ashe", "paillier")
DEFAULT_POLICIES = ("refuse", "static")


@dataclass(frozen=True)
class FieldSpec:
    """One field path's attribute and, for ``index``, its value type and scheme."""

    path: str
    attr: str
    type: str = "int"
    scale: int = 0
    scheme: str = "ope"

    @property
    def exact_order(self) -> bool:
        """Whether the stored order key is one-to-one OPE (ints, datetimes), so that
        server comparisons, sorts and groups on it are exact."""
        return self.attr == "index" and self.scheme == "ope" and self.type in ("int", "datetime")


@dataclass(frozen=True)
class Schema:
    fields: dict[str, FieldSpec]
    default: str = "refuse"

    def spec(self, path: str) -> FieldSpec | None:
        """The spec of ``path`` or of the ``static``/``do_nothing`` path holding it."""
        found = self.fields.get(path)
        if found is not None:
            return found
        parts = path.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            outer = self.fields.get(".".join(parts[:cut]))
            if outer is not None:
                return outer if outer.attr in ("static", "do_nothing") else None
        return None

    def has_children(self, path: str) -> bool:
        prefix = path + "."
        return any(name.startswith(prefix) for name in self.fields)


def load_schema(schema: Schema | dict[str, Any] | str | os.PathLike[str] | None) -> Schema:
    """A :class:`Schema` from a dict, a JSON file path, or ``None`` (all fields static)."""
    if isinstance(schema, Schema):
        return schema
    if schema is None:
        return Schema({}, "static")
    if isinstance(schema, (str, os.PathLike)):
        try:
            schema = json.loads(Path(schema).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SchemaError(f"cannot read schema file {schema}: {exc}") from None
    if not isinstance(schema, dict):
        raise SchemaError(f"a schema is a dict or a JSON file, not {type(schema).__name__}")
    fields = schema.get("fields", schema)
    default = schema.get("default", "refuse") if "fields" in schema else "refuse"
    if default not in DEFAULT_POLICIES:
        raise SchemaError(f"schema default must be one of {DEFAULT_POLICIES}, got {default!r}")
    if not isinstance(fields, dict):
        raise SchemaError("schema 'fields' maps field paths to attributes")
    return Schema({path: _field(path, value) for path, value in fields.items()}, default)


def _field(path: object, value: object) -> FieldSpec:
    if not isinstance(path, str) or not path or path.startswith(("$", "_id")) or ".." in path:
        raise SchemaError(f"{path!r} is not a field path (dotted names, no $, not _id)")
    options = {"attr": value} if isinstance(value, str) else value
    if not isinstance(options, dict) or options.get("attr") not in ATTRIBUTES:
        raise SchemaError(f"field {path!r}: attribute must be one of {ATTRIBUTES}, got {value!r}")
    unknown = set(options) - {"attr", "type", "scale", "scheme"}
    if unknown:
        raise SchemaError(f"field {path!r}: unknown schema options {sorted(unknown)}")
    attr = options["attr"]
    if attr in NOT_BUILT:
        raise SchemaError(f"field {path!r}: {NOT_BUILT[attr]}")
    spec = FieldSpec(
        path,
        attr,
        type=options.get("type", "int"),
        scale=options.get("scale", 0),
        scheme=options.get("scheme", DEFAULT_SCHEMES.get(attr, "")),
    )
    _check(spec)
    return spec


def _check(spec: FieldSpec) -> None:
    where = f"field {spec.path!r}"
    if spec.attr == "index":
        if spec.type not in INDEX_TYPES:
            raise SchemaError(
                f"{where}: index type must be one of {INDEX_TYPES}, got {spec.type!r}"
            )
        if spec.scheme not in INDEX_SCHEMES:
            raise SchemaError(
                f"{where}: index scheme {spec.scheme!r} is not available (one of {INDEX_SCHEMES})"
            )
        if not isinstance(spec.scale, int) or not 0 <= spec.scale <= 12:
            raise SchemaError(f"{where}: decimal scale is an integer in 0..12, got {spec.scale!r}")
    elif spec.attr == "h_add" and (spec.type != "int" or spec.scheme not in ADD_SCHEMES):
        raise SchemaError(f"{where}: h_add holds int values under a scheme of {ADD_SCHEMES}")
    elif spec.attr == "h_mul" and (spec.type != "int" or spec.scheme != "elgamal"):
        raise SchemaError(f"{where}: h_mul holds positive int values under scheme 'elgamal'")
