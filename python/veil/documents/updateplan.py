"""Update documents (``$set``, ``$unset``, ``$inc``) over stored fields.

Most updates go to the server blind, as one command: ``$set`` sends the new
value's stored form (encrypted once for every matched document), ``$unset``
the opaque names, and ``$inc`` on an ``h_add`` field adds the halves of the
increment's ASHE ciphertext and appends its id, without reading the value.
``$inc`` on an ``index`` or ``static`` field, or on a Paillier ``h_add`` field
(the server cannot multiply big integers), cannot be done by the server alone:
those paths come back as *client ops*. The collection applies Paillier ones
without decrypting (it multiplies the stored ciphertext by the increment's
encryption and writes back conditionally) and the others by reading,
decrypting, adding and writing back conditionally. A chained ``h_add``
field's new value, and every chained value whose grouping field an update
changes, take a position claimed in their group's chain, one per document,
so ``$set``/``$inc`` on them and ``$set``/``$unset``/``$inc`` on a grouping
field are client ops too (an :class:`Assign` where not an increment). A
chained field whose schema reveals increments takes ``$inc`` as a
:class:`Revealed` op: blind, one server command once its drift is claimed
(:mod:`veil.documents.drift`), read-modify-write when that cannot be proved
exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veil.documents.codec import DocumentCodec
from veil.documents.errors import DocumentsError, UnsupportedQueryError
from veil.documents.match import MISSING

OPERATORS = ("$set", "$unset", "$inc")
#: An :class:`Assign` value: the field keeps its value (written again, in a new chain
#: position, because its grouping field changed).
KEEP = object()


@dataclass(frozen=True)
class Assign:
    """A client op that sets a path's value (``MISSING`` removes it)."""

    value: Any


@dataclass(frozen=True)
class Revealed:
    """A client op: ``$inc`` by ``delta`` of a chained field that reveals increments."""

    delta: int


def plan_update(
    codec: DocumentCodec, update: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(server update document, client ops {path: increment})."""
    if not isinstance(update, dict) or not update:
        raise DocumentsError("an update is a non-empty dict of $set / $unset / $inc")
    server: dict[str, dict[str, Any]] = {}
    client: dict[str, Any] = {}
    for op, fields in update.items():
        if op not in OPERATORS:
            raise UnsupportedQueryError("(update)", f"the update operator {op}", "any")
        if not isinstance(fields, dict):
            raise DocumentsError(f"{op} takes a dict of field paths")
        for path, value in fields.items():
            _plan_field(codec, op, path, value, server, client)
    return server, client


def _plan_field(
    codec: DocumentCodec, op: str, path: str, value: Any,
    server: dict[str, dict[str, Any]], client: dict[str, Any],
) -> None:  # fmt: skip
    if path == "_id" or path.startswith("_id."):
        raise DocumentsError("_id cannot be updated")
    spec = codec.schema.spec(path)
    if spec is None or (spec.path != path and spec.attr != "do_nothing"):
        attr = "static (not in the schema)" if spec is None else spec.attr
        raise UnsupportedQueryError(path, op, attr)
    if op != "$unset":  # a write creates the subdocuments holding the path
        markers = codec.markers(path)
        if markers:
            server.setdefault("$set", {}).update(markers)
    chained = [s.path for s in codec.schema.fields.values() if s.chain == path]
    if chained and spec.path == path:  # a grouping field: its chained values move chain
        client[path] = Assign(MISSING if op == "$unset" else value) if op != "$inc" else value
        for dependent in chained:
            client.setdefault(dependent, Assign(KEEP))
        return
    if spec.attr == "do_nothing":
        server.setdefault(op, {})[path] = value
        return
    cipher = codec.ciphers[path]
    if spec.chain and op == "$set":
        client[path] = Assign(value)
        return
    name = cipher.name
    if op == "$set":
        fields, dropped = codec.encode_value(path, value)
        server.setdefault("$set", {}).update(fields)
        if dropped:
            server.setdefault("$unset", {}).update(dict.fromkeys(dropped, ""))
    elif op == "$unset":
        server.setdefault("$unset", {}).update(dict.fromkeys(cipher.stored_names, ""))
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DocumentsError(f"field {path!r}: $inc takes a number, got {value!r}")
    elif spec.attr == "h_add" and not isinstance(value, int):
        raise DocumentsError(f"field {path!r} is h_add over integers: $inc takes an integer")
    elif spec.chain and spec.reveal_increments:
        client[path] = Revealed(int(value))
    elif spec.attr == "h_add" and spec.scheme == "ashe" and not spec.chain:
        halves, id_ = cipher.increment(int(value))
        server.setdefault("$inc", {}).update({name: halves["l"], f"{name}h": halves["h"]})
        server.setdefault("$push", {})[f"{name}j"] = id_
    else:
        client[path] = value
