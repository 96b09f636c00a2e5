"""A collection's schema: the attribute of each field path (Secure Mongo §2.3).

A schema is a dict (or a JSON file holding one)::

    {"fields": {"title": "static",
                "year": {"attr": "index", "type": "int"},
                "price": {"attr": "index", "type": "decimal", "scale": 2},
                "salary": "h_add",
                "amount": {"attr": "h_add", "chain": "year", "domain": [0, 10000]},
                "meta.source": "do_nothing"},
     "default": "refuse"}

Field paths are dotted (``meta.source``: the ``source`` key of the
subdocument ``meta``). A path's value may be a scalar or an array of scalars;
a ``static`` path may also hold a whole subdocument. ``default`` says what
happens to a field the schema does not name: ``"refuse"`` (an error naming
the field) or ``"static"``. ``_id`` is always the server's, in the clear.

An ASHE ``h_add`` field may declare ``domain`` (inclusive integer bounds:
values outside are refused) and, with a domain, ``chain``: the path of a
field the server can group on (an ``int``/``datetime`` ``ope`` index or a
``do_nothing`` field), whose values each get their own chain of positions so
that unfiltered sums grouped by it run as one server aggregation
(:mod:`veil.documents.chains`; what the chains show the server is in
docs/security.md). A chained field with ``"reveal_increments": true`` takes
``$inc`` blind, in one server command, at the price of showing the server each
increment's amount (:mod:`veil.documents.drift`).
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
    chain: str = ""
    domain: tuple[int, int] | None = None
    #: A chained field's ``$inc`` sent blind as the increment in clear (the server learns
    #: each increment's amount): an explicit choice, named for what it gives away.
    reveal_increments: bool = False

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
    built = Schema({path: _field(path, value) for path, value in fields.items()}, default)
    for spec in built.fields.values():
        if spec.chain:
            _check_chain(built, spec)
    return built


def _field(path: object, value: object) -> FieldSpec:
    if not isinstance(path, str) or not path or path.startswith(("$", "_id")) or ".." in path:
        raise SchemaError(f"{path!r} is not a field path (dotted names, no $, not _id)")
    options = {"attr": value} if isinstance(value, str) else value
    if not isinstance(options, dict) or options.get("attr") not in ATTRIBUTES:
        raise SchemaError(f"field {path!r}: attribute must be one of {ATTRIBUTES}, got {value!r}")
    unknown = set(options) - {
        "attr", "type", "scale", "scheme", "chain", "domain", "reveal_increments",
    }  # fmt: skip
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
        chain=options.get("chain", ""),
        domain=_domain(path, options.get("domain")),
        reveal_increments=options.get("reveal_increments", False),
    )
    _check(spec)
    return spec


def _check(spec: FieldSpec) -> None:
    where = f"field {spec.path!r}"
    if (spec.chain or spec.domain) and (spec.attr != "h_add" or spec.scheme != "ashe"):
        raise SchemaError(f"{where}: 'chain' and 'domain' apply to h_add fields under 'ashe'")
    if spec.chain and (not isinstance(spec.chain, str) or spec.domain is None):
        raise SchemaError(f"{where}: 'chain' names a field path and needs a 'domain'")
    if spec.reveal_increments not in (False, True) or (spec.reveal_increments and not spec.chain):
        raise SchemaError(f"{where}: 'reveal_increments' is true or false, on chained fields only")
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


def _domain(path: str, value: object) -> tuple[int, int] | None:
    if value is None:
        return None
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) for v in value)
        or value[0] > value[1]
    ):
        raise SchemaError(f"field {path!r}: 'domain' is [low, high], two integers, low <= high")
    return (value[0], value[1])


def _check_chain(schema: Schema, spec: FieldSpec) -> None:
    """A chain's grouping field must be one the server groups on exactly."""
    group = schema.fields.get(spec.chain)
    if group is None or not (group.attr == "do_nothing" or group.exact_order):
        raise SchemaError(
            f"field {spec.path!r}: its chain field {spec.chain!r} must be in the schema as "
            "an int or datetime 'ope' index or a do_nothing field (one the server groups on)"
        )
