"""Per-field encryption: what each attribute stores on the server, batch at a time.

Stored forms, under an opaque field name (``f`` + 8 hex digits of a keyed
hash of the collection and path):

* ``static``: ``Binary(AES-256-GCM(BSON {"v": value}))`` (version byte 0x01,
  random nonce, the collection and path as associated data).
* ``index`` ``int``/``datetime``: ``OPE(order key) | [OPE, ...] | null`` itself.
* ``index`` ``string``/``decimal``: ``{"s": <static form>, "o": OPE(order key) |
  [OPE, ...] | null, "e": keyed hash (strings only)}``; ``o`` is 13 bytes ``0x01 || 96-bit BCLO``
  which the server compares byte-wise. Arrays of scalars keep one ``o`` (and
  ``e``) per element, so the server's array matching is the plaintext's.
  ``int`` and ``datetime`` fields store no ``s``: their OPE is one-to-one, so
  values decrypt from it (a changed ``o`` fails as a malformed ciphertext
  unless it happens to be another valid one; ``s`` would not stop a swap of
  whole fields between documents either, see docs/security.md).
* ``h_add`` (ASHE): three top-level int64 fields, the low 32 bits of an ASHE
  ciphertext at the field's name, its high 32 bits at the name + ``h`` and its
  fresh 63-bit id at the name + ``i``: split in halves so the server's int64
  ``$sum`` cannot overflow below 2**31 documents. A blind ``$inc`` adds the
  halves of the increment's ciphertext and appends its id to a list at the
  name + ``j``. The form is flat because FerretDB parses every stored document
  of every query and nested documents cost it more (``veil_dev.bench.documents.probe``:
  20-44% less for a ``$group`` ``$sum`` than the nested form). Its version is
  its layout: an integer at the name (the earlier forms, a document there,
  ``{"l", "h", "i": id, "j": [ids]}`` and ``{"v": 1, "l", "h", "i": [ids]}``,
  are still read and summed).
* ``h_mul``: ``{"v": 1, "a": g^r, "b": m·h^r}`` (ElGamal, :mod:`veil.documents.elgamal`).
* ``do_nothing``: the value itself, at its own path.

``null`` is stored as ``null`` for ``index`` and ``h_add`` (the server learns
which values are null); ``static`` encrypts it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Any

import bson
import bson.errors
import numpy as np
import pyarrow as pa
from bson.int64 import Int64

from veil.crypto.ashe import Ashe
from veil.crypto.keys import KeyLabel, MasterKey
from veil.crypto.ope import Ope
from veil.crypto.paillier import PaillierKey
from veil.crypto.rnd import Rnd
from veil.documents.chainlayout import ChainLayout
from veil.documents.chains import ChainedField
from veil.documents.elgamal import ElGamal
from veil.documents.errors import FieldTypeError
from veil.documents.match import MISSING
from veil.documents.ore import OreKeys
from veil.documents.oreindex import OreIndex
from veil.documents.paillier import PENDING, PaillierField
from veil.documents.schema import FieldSpec
from veil.documents.values import key_value, order_key
from veil.errors import MalformedCiphertextError

TAG_VERSION = b"\x01"
#: Bytes of keyed hash in an opaque field name; short names make every server scan
#: cheaper (FerretDB parses each stored document), and a collection checks that its
#: names do not collide.
NAME_BYTES = 4
_LOW = np.uint64(0xFFFFFFFF)
#: Suffixes of an ASHE ``h_add`` field's companion names: high half, id, ``$inc`` ids.
ADDITIVE_PARTS = ("h", "i", "j")


def opaque_name(master: MasterKey, scope: str, path: str) -> str:
    """The server's name for ``path`` in ``scope`` (a keyed hash: names stay hidden)."""
    key = master.derive(KeyLabel("documents-name", scope))
    return "f" + hmac.digest(key, path.encode(), "sha256")[:NAME_BYTES].hex()


class FieldCipher:
    """Encrypts and decrypts one field path's values, in batches."""

    def __init__(
        self, master: MasterKey, scope: str, spec: FieldSpec, group: FieldSpec | None = None
    ):
        self.spec = spec
        self.name = opaque_name(master, scope, spec.path)
        where = f"documents:{scope}/{spec.path}"
        self._rnd = Rnd.from_master(master, where, context=where.encode(), column=spec.path)
        self._ope: Ope | None = None
        self._ashe: Ashe | None = None
        self._tag_key = b""
        self.ore: OreIndex | None = None
        if spec.attr == "index":
            signed = spec.type != "string"
            if spec.scheme == "ore":
                self.ore = OreIndex(OreKeys(master, where, spec.path, signed), spec)
            else:
                self._ope = Ope.from_master(master, where, 64, signed=signed, column=spec.path)
            self._tag_key = master.derive(KeyLabel("documents-tag", where))
        self.paillier: PaillierField | None = None
        self.chained: ChainedField | None = None
        if spec.attr == "h_add" and spec.scheme == "paillier":
            self.paillier = PaillierField(PaillierKey.from_master(master, where), spec.path)
        elif spec.attr == "h_add" and spec.chain:
            assert group is not None  # the schema checked the chain's field
            self.chained = ChainedField(master, where, spec, group)
        elif spec.attr == "h_add":
            self._ashe = Ashe.from_master(master, where, column=spec.path)
        self.elgamal = ElGamal(master, where, spec.path) if spec.attr == "h_mul" else None

    # -- writing ---------------------------------------------------------------

    def encrypt(self, values: list[Any]) -> list[Any]:
        """The stored forms of ``values`` (one per value, same order)."""
        if self.paillier is not None:
            return self.paillier.encrypt(values)
        if self.chained is not None:  # null only: values need claimed positions
            return self.chained.encrypt(values, None)
        if self.spec.attr == "h_add":
            return self._encrypt_additive(values)
        if self.elgamal is not None:
            return [None if v is None else self.elgamal.encrypt(v) for v in values]
        if self.spec.attr == "static":
            return self.seal(values)
        if self.ore is not None:
            return self._with_equality(values, self.seal(values), self.ore.tag_values(values), "k")
        orders = self.order_ciphertexts(values)  # checks the values' types first
        if self.spec.exact_order:  # OPE is one-to-one here: values decrypt from it
            return orders
        return self._with_equality(values, self.seal(values), orders, "o")

    def _with_equality(
        self, values: list[Any], sealed: list[bytes], orders: list[Any], order_name: str
    ) -> list[Any]:
        """``{"s": sealed, order_name: order}``, and strings' equality hashes ``e``."""
        stored = [{"s": s, order_name: o} for s, o in zip(sealed, orders, strict=True)]
        if self.spec.type == "string":
            for entry, value in zip(stored, values, strict=True):
                entry["e"] = self.tags(value)
        return stored

    def seal(self, values: list[Any]) -> list[bytes]:
        """AES-GCM of each value's BSON encoding (one native call for the batch)."""
        try:
            plain = [bson.encode({"v": value}) for value in values]
        except (OverflowError, bson.errors.InvalidDocument) as exc:
            raise FieldTypeError(f"field {self.spec.path!r}: cannot store a value: {exc}") from None
        return list(self._rnd.encrypt(pa.array(plain, pa.binary())).to_pylist())

    def order_ciphertexts(self, values: list[Any]) -> list[Any]:
        """OPE of each value's order key; arrays give lists, null gives null."""
        keys: list[int] = []
        for value in values:
            for element in value if isinstance(value, list) else [value]:
                if element is not None:
                    keys.append(order_key(self.spec, element))
        assert self._ope is not None
        dtype = np.int64 if self._ope.signed else np.uint64
        ciphertexts = self._ope.encrypt(pa.array(np.array(keys, dtype=dtype)))
        assert isinstance(ciphertexts, pa.Array)
        encrypted = iter(ciphertexts.to_pylist())
        out: list[Any] = []
        for value in values:
            if isinstance(value, list):
                out.append([None if e is None else next(encrypted) for e in value])
            else:
                out.append(None if value is None else next(encrypted))
        return out

    @property
    def order_path(self) -> str:
        """Where the server finds the order ciphertext: the field itself for one-to-one
        types (nothing else is stored), its ``o`` otherwise."""
        if self.ore is not None:
            return f"{self.name}.k"
        return self.name if self.spec.exact_order else f"{self.name}.o"

    def order_ciphertext(self, value: Any) -> Any:
        return self.order_ciphertexts([value])[0]

    def tags(self, value: Any) -> Any:
        """The keyed hash of a string (or of each string of an array); null stays null."""
        if isinstance(value, list):
            return [self.tags(element) for element in value]
        if value is None:
            return None
        if not isinstance(value, str):
            order_key(self.spec, value)  # raises the type error
        encoded = value.encode("utf-8", "surrogatepass")
        return TAG_VERSION + hmac.digest(self._tag_key, encoded, hashlib.sha256)[:16]

    def _encrypt_additive(self, values: list[Any]) -> list[Any]:
        present = [j for j, value in enumerate(values) if value is not None]
        for j in present:
            if isinstance(values[j], bool) or not isinstance(values[j], int):
                raise FieldTypeError(
                    f"field {self.spec.path!r} is h_add: it takes integers, "
                    f"got {type(values[j]).__name__} {values[j]!r}"
                )
        if self.spec.domain is not None:
            for j in present:
                _within(self.spec, values[j])
        ids = fresh_ids(len(present))
        out: list[Any] = [None] * len(values)
        if present:
            assert self._ashe is not None
            plain = np.array([values[j] for j in present], dtype=object)
            if any(not -(2**63) <= v < 2**63 for v in plain):
                self._ashe.encrypt_one(0, max(plain, key=abs))  # raises DomainError
            cipher = self._ashe.encrypt(ids, plain.astype(np.int64)).view(np.uint64)
            lows, highs = (cipher & _LOW).tolist(), (cipher >> np.uint64(32)).tolist()
            for k, j in enumerate(present):  # Int64: FerretDB's int32 $inc wraps at 2**31
                out[j] = {"l": Int64(lows[k]), "h": Int64(highs[k]), "i": Int64(ids[k])}
        return out

    def increment(self, delta: int) -> tuple[dict[str, int], int]:
        """The halves to add and the id to append for a blind ``$inc`` by ``delta``."""
        stored = self._encrypt_additive([delta])[0]
        return {"l": stored["l"], "h": stored["h"]}, stored["i"]

    # -- reading ---------------------------------------------------------------

    def decrypt(self, stored: list[Any]) -> list[Any]:
        """Plaintext values of stored forms (one native call per batch for GCM)."""
        if self.paillier is not None:
            return self.paillier.decrypt(stored)
        if self.spec.attr == "h_add":
            return [self.additive_value(entry) for entry in stored]
        if self.elgamal is not None:
            return [None if e is None else self.elgamal.decrypt(e) for e in stored]
        if self.spec.exact_order:
            return self._decrypt_orders(stored)
        sealed = stored if self.spec.attr == "static" else [self._sealed(e) for e in stored]
        for value in sealed:
            if not isinstance(value, bytes):
                raise MalformedCiphertextError(
                    f"field {self.spec.path!r}: the server returned {type(value).__name__} "
                    "where a ciphertext was stored"
                )
        plain = self._rnd.decrypt(pa.array(sealed, pa.binary())).to_pylist()
        return [bson.decode(p)["v"] for p in plain]

    def _decrypt_orders(self, stored: list[Any]) -> list[Any]:
        """Values of one-to-one index fields, from their OPE ciphertexts (one native call)."""
        forms = stored
        flat = [c for f in forms for c in (f if isinstance(f, list) else [f]) if c is not None]
        if any(not isinstance(c, bytes) for c in flat):
            raise MalformedCiphertextError(f"field {self.spec.path!r}: malformed OPE ciphertext")
        assert self._ope is not None
        plain = self._ope.decrypt(pa.array(flat, pa.binary()))
        assert isinstance(plain, pa.Array)
        keys = iter(plain.to_pylist())
        out: list[Any] = []
        for form in forms:
            if isinstance(form, list):
                out.append([None if c is None else key_value(self.spec, next(keys)) for c in form])
            else:
                out.append(None if form is None else key_value(self.spec, next(keys)))
        return out

    def _sealed(self, entry: Any) -> Any:
        return entry.get("s") if isinstance(entry, dict) else entry

    def additive_value(self, entry: Any) -> int | None:
        if entry is None:
            return None
        try:
            if self.chained is not None:
                return self.chained.value(entry)
            total = (int(entry["h"]) << 32) + int(entry["l"])
            ids = additive_ids(entry)
        except (KeyError, TypeError, ValueError):
            raise MalformedCiphertextError(
                f"field {self.spec.path!r}: malformed h_add ciphertext"
            ) from None
        assert self._ashe is not None
        return self._ashe.decrypt_sum(total, ids=np.array(ids, dtype=np.int64))

    def additive_sum(self, total: int, ids: list[int]) -> int:
        assert self._ashe is not None
        return self._ashe.decrypt_sum(total, ids=np.array(ids, dtype=np.int64))

    # -- the flat ASHE form --------------------------------------------------------

    @property
    def stored_names(self) -> tuple[str, ...]:
        """Every top-level stored name this field may occupy."""
        if self.chained is not None:
            return (self.name, *(self.name + part for part in self.chained.PARTS))
        if self.paillier is not None:
            return (self.name, self.name + PENDING)
        if self._ashe is None:
            return (self.name,)
        return (self.name, *(self.name + part for part in ADDITIVE_PARTS))

    def stored_fields(self, form: Any) -> dict[str, Any]:
        """The top-level stored fields of one form (ASHE's halves and id side by side)."""
        if self.chained is not None and form is not None:
            return self.chained.stored_fields(self.name, form)
        if self._ashe is None or form is None:
            return {self.name: form}
        return {self.name: form["l"], self.name + "h": form["h"], self.name + "i": form["i"]}

    def set_fields(self, form: Any) -> tuple[dict[str, Any], list[str]]:
        """(``$set``, ``$unset`` names) replacing the stored value by ``form``: an ASHE
        value also drops the old value's companions (its ``$inc`` ids above all)."""
        fields = self.stored_fields(form)
        return fields, [n for n in self.stored_names if n not in fields]

    def gathered(self, stored: dict[str, Any]) -> Any:
        """This field's form in a stored document: for ASHE, ``{"l", "h", "i"?, "j"?}``
        from the flat fields (an earlier nested form as it is), for Paillier the product
        with its pending increments; MISSING if absent."""
        if self.name not in stored:
            return MISSING
        if self.chained is not None:
            return self.chained.gathered(self.name, stored)
        if self.paillier is not None:
            return self.paillier.gathered(stored[self.name], stored.get(self.name + PENDING))
        low = stored[self.name]
        if self._ashe is None or low is None or isinstance(low, dict):
            return low
        form = {"l": low}
        for part in ADDITIVE_PARTS:
            if self.name + part in stored:
                form[part] = stored[self.name + part]
        return form

    def order_value(self, ciphertext: bytes) -> Any:
        """The value of an OPE ciphertext, for the one-to-one index types."""
        assert self._ope is not None and self.spec.exact_order
        return key_value(self.spec, self._ope.decrypt_one(ciphertext))


def _within(spec: FieldSpec, value: int) -> None:
    """Refuse a value outside the domain the schema declares for ``spec``."""
    assert spec.domain is not None
    ChainLayout(spec.domain[0], spec.domain[1], 0, 0).check(spec.path, value)


def additive_ids(entry: dict[str, Any]) -> list[int]:
    """The ASHE ids of a stored ``h_add`` form: its value's ``i`` (one id; a list in
    forms written before ``j``; none when the value was created by ``$inc``) and the
    ids of the ``$inc`` it received, ``j``. No id at all raises ``KeyError``."""
    first = entry.get("i", [])
    ids = [int(i) for i in first] if isinstance(first, list) else [int(first)]
    ids += [int(i) for i in entry.get("j", ())]
    if not ids:
        raise KeyError("i")
    return ids


def fresh_ids(count: int) -> np.ndarray:
    """``count`` random 63-bit ASHE ids (one-time: a collision has odds ~count**2 / 2**64)."""
    raw = np.frombuffer(os.urandom(8 * count), dtype=np.uint64) >> np.uint64(1)
    return raw.astype(np.int64)
