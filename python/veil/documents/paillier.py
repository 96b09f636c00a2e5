"""``h_add`` under ``"scheme": "paillier"``: the paper's additive scheme (§2.3.3).

A value is stored as ``0x01 ‖ c``, a 2048-bit Paillier ciphertext (513 bytes,
``veil.crypto.paillier``; the key is derived from the master key per field).
Unlike ASHE, anyone holding the **public** key can add: the product of two
ciphertexts modulo ``n²`` encrypts the sum of their plaintexts. Each field's
public modulus is kept in the database's catalog collection, so a party
without the key file (a server-side job, another service) can read it and add
stored values (:func:`public_key`, :func:`add`).

A MongoDB-wire server cannot multiply big integers, so ``$sum``/``$avg`` of a
Paillier field fetch the group keys and ciphertexts, and the client multiplies
them per group and decrypts once per group.

``$inc`` is blind, nothing is decrypted. On one document pinned by its ``_id``
it is one server command: the increment's encryption is pushed onto the
field's *pending* ciphertexts (``name + "j"``) of a document that holds a
value. A value is its stored ciphertext times its pending ones
(:meth:`PaillierField.gathered`). The server sees a fresh ciphertext per
increment, not its amount. A document holding ``FOLD_AT`` pending ones or no
value (and every other ``$inc``: ``update_many``, filters not pinned by
``_id``) takes the read-modify-write: read the ciphertexts, multiply them and
the increment's (the public key's addition), write the product back only if
nothing changed meanwhile, pending ones dropped. A missing value becomes the
increment; a null one is refused, as MongoDB refuses it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pyarrow as pa
import pymongo.errors
from pymongo.database import Database as ServerDatabase

from veil.crypto.paillier import PaillierKey, PaillierPublicKey
from veil.crypto.paillier_wire import add_ciphertexts, sum_ciphertexts
from veil.documents.errors import FieldTypeError
from veil.documents.server import CATALOG
from veil.errors import MalformedCiphertextError

CATALOG_PREFIX = "paillier:"
#: Suffix of a field's pending increments' name (an array of ciphertexts).
PENDING = "j"
#: Pending increments a document holds before the next ``$inc`` folds them: each is a
#: 513-byte ciphertext that every scan of the collection reads.
FOLD_AT = 8


class PaillierField:
    """One Paillier ``h_add`` field's key."""

    def __init__(self, key: PaillierKey, path: str):
        self.key = key
        self.path = path

    def encrypt(self, values: list[Any]) -> list[bytes | None]:
        for value in values:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise FieldTypeError(
                    f"field {self.path!r} is h_add: it takes integers, "
                    f"got {type(value).__name__} {value!r}"
                )
        present = [v for v in values if v is not None]
        encrypted = iter(self.key.encrypt_ints(present, column=self.path))
        return [None if v is None else next(encrypted) for v in values]

    def decrypt(self, stored: list[Any]) -> list[int | None]:
        if any(s is not None and not isinstance(s, bytes) for s in stored):
            raise MalformedCiphertextError(f"field {self.path!r}: malformed Paillier ciphertext")
        present = [s for s in stored if s is not None]
        plain = iter(self.key.decrypt_ints(present, column=self.path))
        return [None if s is None else next(plain) for s in stored]

    def gathered(self, stored: Any, pending: Any) -> Any:
        """A stored value with its pending increments: their product (a missing or null
        stored value counts as 0), or the stored value as it is without any."""
        if pending is None or pending == []:
            return stored
        if not isinstance(pending, list) or not all(isinstance(c, bytes) for c in pending):
            raise MalformedCiphertextError(f"field {self.path!r}: malformed pending increments")
        present = pending if stored is None else [stored, *pending]
        return sum_ciphertexts(pa.array(present, pa.binary()), self.key.public.n_square)

    def sum(self, ciphertexts: list[bytes]) -> int:
        """The sum of the values of ``ciphertexts``: one product, one decryption."""
        total = sum_ciphertexts(pa.array(ciphertexts, pa.binary()), self.key.public.n_square)
        return self.decrypt([total])[0] or 0

    def add(self, a: Any, b: Any) -> bytes:
        """The stored ciphertext of the sum of two stored values: public key only."""
        return add(self.key.public, a, b)

    def record_public_key(self, catalog: Any, collection: str, name: str) -> None:
        """Keep the public modulus in the catalog, for parties without the key file."""
        n = int(self.key.public.n)
        entry = {"_id": f"{CATALOG_PREFIX}{collection}.{name}"}
        if catalog.find_one(entry) is None:
            with contextlib.suppress(pymongo.errors.DuplicateKeyError):  # another client was first
                catalog.insert_one(entry | {"n": n.to_bytes((n.bit_length() + 7) // 8, "big")})


def public_key(database: ServerDatabase[Any], collection: str, name: str) -> PaillierPublicKey:
    """The public key of the stored field ``name`` of the server collection ``collection``
    (both opaque names), read from the catalog: all a party needs to :func:`add`."""
    found = database[CATALOG].find_one({"_id": f"{CATALOG_PREFIX}{collection}.{name}"})
    if found is None:
        raise MalformedCiphertextError(f"no Paillier public key for {collection}.{name}")
    return PaillierPublicKey(int.from_bytes(found["n"], "big"))


def add(key: PaillierPublicKey, a: bytes, b: bytes) -> bytes:
    """The stored ciphertext of the sum of ``a``'s and ``b``'s values; no private key."""
    if not isinstance(a, bytes) or not isinstance(b, bytes):
        raise MalformedCiphertextError("add takes two stored Paillier ciphertexts (bytes)")
    column = add_ciphertexts(pa.array([a], pa.binary()), pa.array([b], pa.binary()), key.n_square)
    return bytes(column[0].as_py())
