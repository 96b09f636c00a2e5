"""h_mul: ElGamal values round-trip, and products per group need one decryption each."""

from __future__ import annotations

import math
import random

import pytest

import veil.documents
from veil.documents import FieldTypeError, UnsupportedQueryError
from veil.documents.elgamal import ElGamal, P
from veil.errors import DomainError

SCHEMA = {"r": {"g": "index", "f": "h_mul", "name": {"attr": "index", "type": "string"}}}


def test_products_by_group(url, key_file):
    rng = random.Random(5)
    rows = [
        {"_id": i, "g": i % 4, "name": f"n{i % 3}", "f": rng.randrange(1, 10**6)} for i in range(30)
    ]
    rows += [{"_id": 100, "g": 1}, {"_id": 101, "g": 2, "f": None}]
    with veil.documents.connect(url, key_file, SCHEMA) as database:
        database.r.insert_many([dict(r) for r in rows])
        assert {d["_id"]: d.get("f") for d in database.r.find()} == {
            r["_id"]: r.get("f") for r in rows
        }
        for key in ("$g", "$name"):  # the server groups on g; name groups on the client
            pipeline = [
                {"$match": {"g": {"$gte": 1}}},
                {"$group": {"_id": key, "p": {"$product": "$f"}}},
            ]
            got = {row["_id"]: row["p"] for row in database.r.aggregate(pipeline)}
            expected: dict[object, int] = {}
            for r in rows:
                if r["g"] >= 1:
                    expected.setdefault(r.get(key[1:]), 1)
                    expected[r.get(key[1:])] *= r.get("f") or 1
            assert got == expected
        database.r.update_one({"_id": 3}, {"$set": {"f": 7}})
        assert database.r.find_one({"_id": 3})["f"] == 7


def test_h_mul_refuses_what_it_cannot_hold(url, key_file):
    with veil.documents.connect(url, key_file, SCHEMA) as database:
        with pytest.raises(FieldTypeError):
            database.r.insert_one({"f": 2.5})
        for bad in (0, -3, int(P)):
            with pytest.raises(DomainError):
                database.r.insert_one({"f": bad})
        with pytest.raises(UnsupportedQueryError, match="h_mul"):
            database.r.find_one({"f": 3})
        assert database.r.count_documents({}) == 0


def test_ciphertexts_multiply(key_file):
    from veil.crypto.keys import load_key_file
    from veil.documents.elgamal import Product

    scheme = ElGamal(load_key_file(key_file), "scope")
    values = [3, 5, 7, 2**100]
    product = Product()
    for value in values:
        stored = scheme.encrypt(value)
        assert scheme.decrypt(stored) == value
        assert stored != scheme.encrypt(value)  # randomised
        product.add(scheme.parse(stored))
    assert product.value(scheme) == math.prod(values)
