"""A pipeline's ``$group`` as the server runs it: keys and accumulators over stored fields.

:func:`plan_group` translates a ``$group`` stage when the server can group: its keys
are ``do_nothing`` fields or one-to-one ``index`` fields (whose OPE ciphertexts group
exactly as their values), and each accumulator is ``$count``, ``$sum`` of a constant,
``$sum``/``$avg`` of an ``h_add`` field or ``$product`` of an ``h_mul`` one. Before ->
after, for ``g`` an ``int`` index and ``v`` an ASHE ``h_add`` field::

    {"$group": {"_id": "$g", "s": {"$sum": "$v"}}}
      -> {"_id": "$f3a1b2c4d", "s_l": {"$sum": "$f9c0d1e2f"}, "s_h": {"$sum": "$f9c0d1e2fh"}}
         outputs: [("s", "sum", cipher of v)]

Each output's *kind* says how the client finishes it: ``count`` (the server's number),
``sum``/``avg`` (ASHE halves summed by the server, the pads removed by the client),
``chain_sum``/``chain_avg`` (chained words, veil.documents.chainsums),
``paillier_sum``/``paillier_avg`` and ``product`` (ciphertexts fetched and combined by
the client). Anything else returns None: the client groups decrypted documents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import bson
from bson.int64 import Int64

from veil.documents.codec import DocumentCodec
from veil.documents.match import MISSING, get_path

#: Per group identity (:meth:`GroupKeys.identity`): a row of the server's accumulators,
#: or what the client gathered for the group (ids, ciphertexts, sums).
Rows = dict[bytes, dict[str, Any]]


class Output(NamedTuple):
    """One accumulator: its output name, how its value is made, the field it reads."""

    name: str
    kind: str
    cipher: Any  # the FieldCipher of the field accumulated; None for a count


@dataclass(frozen=True)
class GroupKeys:
    """The group key: each part's server expression and cipher (None: in the clear).
    A single key (``"_id": "$g"``) is the one part ``"k"``; no key has no parts."""

    parts: Mapping[str, tuple[str, Any]]
    single: bool
    paths: tuple[str, ...]  # the plaintext paths grouped by

    def server(self) -> dict[str, str]:
        """Each part's server expression (``$`` and the stored field's name)."""
        return {name: expression for name, (expression, _) in self.parts.items()}

    def projection(self, names: Iterable[str]) -> dict[str, int]:
        """An inclusion projection of the key's stored fields and ``names``, without
        ``_id`` (smaller replies: FerretDB's cost grows with every document it returns);
        ``_id`` alone when nothing else is needed."""
        fields = {e[1:]: 1 for e in self.server().values()} | dict.fromkeys(names, 1)
        return fields | {"_id": 0} if fields else {"_id": 1}

    def of_stored(self, document: dict[str, Any]) -> dict[str, Any]:
        """The key parts a fetched stored document holds."""
        values = {name: get_path(document, e[1:]) for name, e in self.server().items()}
        return {name: value for name, value in values.items() if value is not MISSING}

    def identity(self, server_key: Any) -> bytes:
        """One group's identity: its keys in order, an absent key apart from null."""
        if not self.parts:
            return b""
        present = server_key if isinstance(server_key, dict) else {}
        values = [present.get(k) if k in present else {"$absent": 1} for k in self.parts]
        values = [int(v) if isinstance(v, Int64) else v for v in values]  # ints group as one
        if self.single:
            values = [None if isinstance(v, dict) else v for v in values]
        return bson.encode({"k": values})

    def row_identity(self, raw_key: Any) -> bytes:
        """The identity of a group the server returned under ``raw_key``."""
        return self.identity({"k": raw_key} if self.single else raw_key)

    def plain(self, server_key: Any) -> Any:
        """The group's ``_id`` as the user sees it: its keys decrypted."""
        if not self.parts:
            return None
        if self.single:
            ((_, cipher),) = self.parts.values()
            return _decrypt_key(cipher, server_key)
        present = server_key if isinstance(server_key, dict) else {}
        return {
            name: _decrypt_key(cipher, present[name])
            for name, (_, cipher) in self.parts.items()
            if name in present
        }


@dataclass(frozen=True)
class GroupPlan:
    """The server's ``$group`` after its exact ``$match`` (both over stored fields)."""

    match: Mapping[str, Any]
    stage: Mapping[str, Any]
    outputs: tuple[Output, ...]
    keys: GroupKeys

    def pipeline(self, stage: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The server pipeline grouping by ``stage`` what the plan's filter matches."""
        match = [{"$match": self.match}] if self.match else []
        return [*match, {"$group": stage}]

    @property
    def fetched(self) -> bool:
        """Whether an output needs its ciphertexts fetched: products, Paillier and chained
        values (whose words the id path cannot open)."""
        return any(kind not in ("sum", "avg", "count") for _, kind, _ in self.outputs)


def plan_group(
    codec: DocumentCodec, match: Mapping[str, Any], spec: dict[str, Any]
) -> GroupPlan | None:
    """The server's form of the ``$group`` ``spec`` after ``match``; None if the client
    must group."""
    keys = _keys(codec, spec.get("_id"))
    if keys is None:
        return None
    server_keys: Any = keys.server()
    if keys.single:
        server_keys = server_keys["k"]
    stage: dict[str, Any] = {"_id": server_keys or None}
    outputs: list[Output] = []
    for output, accumulator in spec.items():
        if output == "_id":
            continue
        planned = _accumulator(codec, output, accumulator, stage)
        if planned is None:
            return None
        outputs.append(planned)
    return GroupPlan(match, stage, tuple(outputs), keys)


def _keys(codec: DocumentCodec, key: Any) -> GroupKeys | None:
    """The key's parts, or None if the server cannot group on one of them."""
    single = isinstance(key, str)
    if key is None:
        return GroupKeys({}, single, ())
    parts = {"": key} if isinstance(key, str) else key
    if not isinstance(parts, dict):
        return None
    out: dict[str, tuple[str, Any]] = {}
    paths: list[str] = []
    for name, expression in parts.items():
        if not isinstance(expression, str) or not expression.startswith("$"):
            return None
        path = expression[1:]
        paths.append(path)
        spec = codec.schema.spec(path)
        if spec is not None and spec.attr == "do_nothing":
            out[name or "k"] = (expression, None)
        elif spec is not None and spec.exact_order and spec.path == path:
            cipher = codec.ciphers[path]
            out[name or "k"] = (f"${cipher.order_path}", cipher)
        else:
            return None
    return GroupKeys(out, single, tuple(paths))


def _accumulator(
    codec: DocumentCodec, output: str, accumulator: Any, stage: dict[str, Any]
) -> Output | None:
    """One accumulator's output, its server accumulators added to ``stage``."""
    if not isinstance(accumulator, dict) or len(accumulator) != 1:
        return None
    ((op, argument),) = accumulator.items()
    if op == "$count" and argument == {}:
        stage[output] = {"$sum": 1}
        return Output(output, "count", None)
    if op == "$sum" and isinstance(argument, int) and not isinstance(argument, bool):
        stage[output] = {"$sum": argument}
        return Output(output, "count", None)
    if op in ("$sum", "$avg") and isinstance(argument, str) and argument.startswith("$"):
        spec = codec.schema.fields.get(argument[1:])
        if spec is None or spec.attr != "h_add":
            return None
        cipher = codec.ciphers[spec.path]
        if cipher.paillier is not None:  # the client multiplies fetched ciphertexts
            return Output(output, f"paillier_{op[1:]}", cipher)
        if cipher.chained is not None:  # one word a value: one $group, no ids
            stage[output] = {"$sum": f"${cipher.name}"}
            return Output(output, f"chain_{op[1:]}", cipher)
        stage[f"{output}_l"] = {"$sum": f"${cipher.name}"}  # earlier nested forms: ignored
        stage[f"{output}_h"] = {"$sum": f"${cipher.name}h"}  # here, added by summed_ids
        return Output(output, op[1:], cipher)
    if op == "$product" and isinstance(argument, str) and argument.startswith("$"):
        spec = codec.schema.fields.get(argument[1:])
        if spec is None or spec.attr != "h_mul":
            return None
        return Output(output, "product", codec.ciphers[spec.path])
    return None


def _decrypt_key(cipher: Any, value: Any) -> Any:
    if cipher is None or value is None:
        return value
    if isinstance(value, list):
        return [_decrypt_key(cipher, v) for v in value]
    return cipher.order_value(value)
