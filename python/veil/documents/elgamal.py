"""ElGamal over a 2048-bit safe-prime group: the ``h_mul`` attribute (Secure Mongo §2.3.4).

``E(m) = (g^r, m · h^r) mod p`` with ``h = g^x``; multiplying two ciphertexts
component-wise gives an encryption of the product of their plaintexts, so a
product over many documents needs one decryption, not one per document.

The group is RFC 3526's 2048-bit MODP group (``p = 2q + 1`` a safe prime,
``g = 2``, which generates the order-``q`` subgroup). The secret exponent
``x`` is 256 bits derived from the master key per field (HKDF), and ``r`` is
a fresh 256-bit random exponent per encryption (short exponents, as is
usual for discrete-log groups of this size). Plaintexts are integers in
``[1, p)``; a product is exact while it stays below ``p`` (about 2047 bits).

Leakage, as for textbook ElGamal in ``Z_p*``: the server can compute the
Legendre symbol of a ciphertext's second component, which tells whether the
plaintext is a quadratic residue (one bit per value). The paper's scheme has
the same property. Ciphertexts are not authenticated (they are malleable by
design).

Stored form: ``{"v": 1, "a": g^r, "b": m·h^r}``, each a 256-byte big-endian
binary.
"""

from __future__ import annotations

import secrets
from typing import Any

import gmpy2

from veil.crypto.keys import KeyLabel, MasterKey
from veil.documents.errors import FieldTypeError
from veil.errors import DomainError, MalformedCiphertextError

VERSION = 1
P = gmpy2.mpz(
    int(
        "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A0879"
        "8E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B"
        "0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA4836"
        "1C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804"
        "F1746C08CA18217C32905E462E36CE3BE39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6"
        "955817183995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF",
        16,
    )
)
G = gmpy2.mpz(2)
Q = (P - 1) // 2
WIDTH = 256
EXPONENT_BYTES = 32


class ElGamal:
    """One field's ElGamal key pair (the public part is kept for encryption)."""

    __slots__ = ("_x", "column", "h")

    def __init__(self, master: MasterKey, scope: str, column: str | None = None):
        seed = master.derive(KeyLabel("documents-elgamal", scope), EXPONENT_BYTES)
        self._x = gmpy2.mpz(int.from_bytes(seed, "big")) % Q
        self.h = gmpy2.powmod(G, self._x, P)
        self.column = column

    def encrypt(self, value: int) -> dict[str, Any]:
        if isinstance(value, bool) or not isinstance(value, int):
            raise FieldTypeError(
                f"field {self.column!r} is h_mul: it takes integers, got {type(value).__name__}"
            )
        if not 1 <= value < P:
            raise DomainError(
                f"h_mul encrypts integers in [1, p) (p a 2048-bit prime), got {value!r}",
                column=self.column, domain="[1, 2^2047)",
            )  # fmt: skip
        r = gmpy2.mpz(int.from_bytes(secrets.token_bytes(EXPONENT_BYTES), "big"))
        a = gmpy2.powmod(G, r, P)
        b = (gmpy2.powmod(self.h, r, P) * value) % P
        return {"v": VERSION, "a": _bytes(a), "b": _bytes(b)}

    def decrypt(self, stored: Any) -> int:
        a, b = self.parse(stored)
        return int((b * gmpy2.powmod(a, P - 1 - self._x, P)) % P)

    def parse(self, stored: Any) -> tuple[Any, Any]:
        """The two group elements of a stored ciphertext (checked to lie in Z_p*)."""
        try:
            if stored["v"] != VERSION:
                raise MalformedCiphertextError(f"unknown h_mul version {stored['v']!r}")
            a, b = (
                gmpy2.mpz(int.from_bytes(stored["a"], "big")),
                gmpy2.mpz(int.from_bytes(stored["b"], "big")),
            )
        except (KeyError, TypeError) as exc:
            raise MalformedCiphertextError(
                f"column {self.column!r}: malformed h_mul ciphertext ({exc})"
            ) from None
        if not (0 < a < P and 0 < b < P):
            raise MalformedCiphertextError(f"column {self.column!r}: h_mul value outside Z_p*")
        return a, b


class Product:
    """A running product of ciphertexts: multiply as they arrive, decrypt once."""

    def __init__(self) -> None:
        self.a, self.b, self.count = gmpy2.mpz(1), gmpy2.mpz(1), 0

    def add(self, pair: tuple[Any, Any]) -> None:
        self.a = (self.a * pair[0]) % P
        self.b = (self.b * pair[1]) % P
        self.count += 1

    def value(self, scheme: ElGamal) -> int:
        """The product of the plaintexts (1 for an empty product, as ``$product`` of none)."""
        if not self.count:
            return 1
        return scheme.decrypt({"v": VERSION, "a": _bytes(self.a), "b": _bytes(self.b)})


def _bytes(value: Any) -> bytes:
    return int(value).to_bytes(WIDTH, "big")
