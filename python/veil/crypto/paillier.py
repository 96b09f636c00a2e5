"""Paillier encryption, raw layer: keys, encryption and decryption of integers.

This is the hazmat layer under ``veil.crypto.hom``: it encrypts integers
modulo ``n`` and nothing else. Use ``HomPacker`` to encrypt table columns.

Choices, and why:

* **Deterministic keys.** A key is generated from a 32-byte seed (derived
  from the master key with ``KeyLabel("hom", scope)``), so the key file keeps
  only the master key. The seed drives a SHAKE-256 counter-mode stream;
  each prime is ``next_prime`` of a stream value with its top two bits set
  (so ``n`` has exactly ``bits`` bits), confirmed by a BPSW test. (Taking the
  next prime favours primes after long gaps slightly; that is the usual
  incremental search and no known attack uses it.) Deriving takes 0.1-1 s,
  so keys are cached per process, and, inside ``keys_kept_by``, in the
  client directory, sealed under the master key (``veil.keys.derivations``).
* **g = n + 1**, so ``g^m = 1 + m*n (mod n^2)`` costs one multiplication.
* **Short-exponent randomness** (the "DJN" variant: Damgård, Jurik, Nielsen,
  "A generalization of Paillier's public-key system with applications to
  electronic voting", IJIS 2010): ``h = -x^2 mod n`` for a
  seed-derived ``x``, ``h_s = h^n mod n^2``, and ``E(m) = (1 + m*n) * h_s^r``
  with a short random ``r``. ``r`` has 4x the modulus's security level in
  bits (448 bits for 2048-bit n, NIST SP 800-57: 112-bit security): a generic
  (kangaroo) search for ``r`` costs 2^(bits/2) = 2^224, and the extra factor 2
  covers a smooth part of the unknown group order of up to 224 bits, which a
  van Oorschot–Wiener attack could peel off first. ``h_s^r`` comes from a
  fixed-base table of 8-bit windows, ``table[i][j] = h_s^(j * 2^(8i))``
  (7.3 MB for 2048-bit n), so one encryption is 56 multiplications mod n^2.
  Caveat: semantic security then rests on DCR *and* on ``h_s^r`` with a short
  ``r`` being indistinguishable from a random n-th residue (DJN's assumption),
  not on DCR alone.
* **CRT decryption** with ``hp``, ``hq`` precomputed (Paillier 1999, §7).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import NoReturn, Protocol

import gmpy2
import pyarrow as pa
from gmpy2 import mpz

from veil.crypto.keys import KeyLabel, MasterKey
from veil.crypto.paillier_wire import ciphertext_width, from_wire, parse_array, to_wire
from veil.errors import DomainError, MalformedCiphertextError, ParameterError

DEFAULT_BITS = 2048
MIN_BITS = 512  # below 2048 only for tests: fast keys, no security claim
SEED_BYTES = 32
WINDOW_BITS = 8

# NIST SP 800-57 Part 1, Table 2: security strength of an RSA-like modulus.
_SECURITY_LEVELS = ((1024, 80), (2048, 112), (3072, 128), (7680, 192), (15360, 256))


def security_bits(modulus_bits: int) -> int:
    """Security strength (bits) of a ``modulus_bits`` modulus."""
    for limit, strength in _SECURITY_LEVELS:
        if modulus_bits <= limit:
            return strength
    return 256


def randomness_bits(modulus_bits: int) -> int:
    """Length of the short exponent ``r``: 4x the security level (see module doc)."""
    return 4 * security_bits(modulus_bits)


class _SeedStream:
    """SHAKE-256 in counter mode: ``SHAKE256(domain || purpose || seed || i)``."""

    def __init__(self, seed: bytes, purpose: str):
        self._prefix = b"veil/paillier/v1" + len(purpose).to_bytes(2, "big") + purpose.encode()
        self._prefix += seed
        self._counter = 0

    def read_int(self, bits: int) -> mpz:
        block = hashlib.shake_256(self._prefix + self._counter.to_bytes(8, "big"))
        self._counter += 1
        value = mpz.from_bytes(block.digest((bits + 7) // 8), "big")
        return value >> (8 * ((bits + 7) // 8) - bits)


def _prime(stream: _SeedStream, bits: int) -> mpz:
    while True:
        candidate = stream.read_int(bits) | (mpz(3) << (bits - 2)) | 1
        prime = gmpy2.next_prime(candidate)
        # next_prime could step past 2^bits; BPSW confirms GMP's Miller-Rabin.
        if prime.bit_length() == bits and gmpy2.is_bpsw_prp(prime):
            return prime


def _primes(seed: bytes, bits: int) -> tuple[mpz, mpz]:
    stream = _SeedStream(seed, "primes")
    half = bits // 2
    p = _prime(stream, half)
    while True:
        q = _prime(stream, half)
        # Far apart (Fermat factoring needs |p - q| tiny) and gcd(n, phi) = 1.
        far = abs(p - q).bit_length() > half - 64
        if far and gmpy2.gcd(p * q, (p - 1) * (q - 1)) == 1:
            return (p, q) if p > q else (q, p)


class PaillierPublicKey:
    """The public half: what the server may know (``n``, ``n^2``)."""

    __slots__ = ("bits", "n", "n_square", "width")

    def __init__(self, n: int):
        self.n = mpz(n)
        self.n_square = self.n * self.n
        self.bits = int(self.n.bit_length())
        self.width = ciphertext_width(self.n_square)

    @property
    def max_int(self) -> int:
        """Largest magnitude a signed plaintext may have."""
        return int((self.n - 1) // 2)

    @property
    def capacity_bits(self) -> int:
        """Bits a packed plaintext may use and still decode as signed (< n/2)."""
        return self.bits - 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PaillierPublicKey) and self.n == other.n

    def __hash__(self) -> int:
        return hash(self.n)

    def __repr__(self) -> str:
        return f"PaillierPublicKey(bits={self.bits})"


class _FixedBaseTable:
    """``h_s^r`` by 8-bit windows: ``rows[i][j] = h_s^(j * 2^(8i)) mod n^2``."""

    def __init__(self, base: mpz, n_square: mpz, exponent_bits: int):
        self.exponent_bytes = exponent_bits // WINDOW_BITS
        self.rows: list[list[mpz]] = []
        for _ in range(self.exponent_bytes):
            row = [mpz(1), base]
            for _ in range(2, 1 << WINDOW_BITS):
                row.append(row[-1] * base % n_square)
            self.rows.append(row)
            base = row[-1] * base % n_square

    def power(self, exponent: bytes, n_square: mpz) -> mpz:
        """``h_s^e`` for ``e`` given as little-endian bytes (one per window)."""
        acc = mpz(1)
        for row, digit in zip(self.rows, exponent, strict=True):
            if digit:
                acc = acc * row[digit] % n_square
        return acc


class PaillierKey:
    """A private Paillier key. Never printed, pickled or logged."""

    __slots__ = ("_crt", "_h_s", "_p", "_q", "_table", "public")

    def __init__(self, p: int, q: int, h_s: int):
        """Use ``from_seed``/``from_master``; this trusts ``p``, ``q`` to be primes."""
        self._p, self._q = mpz(p), mpz(q)
        self.public = PaillierPublicKey(self._p * self._q)
        self._h_s = mpz(h_s)
        self._table: _FixedBaseTable | None = None
        self._crt = _CrtDecryptor(self._p, self._q)

    @classmethod
    def from_seed(cls, seed: bytes, bits: int = DEFAULT_BITS) -> PaillierKey:
        """The key a 32-byte seed determines (cached per process)."""
        if len(seed) != SEED_BYTES:
            raise ParameterError(f"a Paillier key seed is {SEED_BYTES} bytes, got {len(seed)}")
        if bits < MIN_BITS or bits % 2:
            raise ParameterError(
                f"a Paillier modulus has an even number of bits >= {MIN_BITS} "
                f"(2048 for real data), got {bits}"
            )
        return _derive(bytes(seed), bits)

    @classmethod
    def from_master(cls, master: MasterKey, scope: str, bits: int = DEFAULT_BITS) -> PaillierKey:
        """The key for ``scope``, from the seed ``KeyLabel("hom", scope)`` derives."""
        return cls.from_seed(master.derive(KeyLabel("hom", scope), SEED_BYTES), bits)

    @classmethod
    def derive(
        cls, master_or_seed: MasterKey | bytes, scope: str = "", bits: int = DEFAULT_BITS
    ) -> PaillierKey:
        """``from_seed`` for a 32-byte seed, ``from_master`` for a master key."""
        if isinstance(master_or_seed, bytes | bytearray):
            return cls.from_seed(bytes(master_or_seed), bits)
        return cls.from_master(master_or_seed, scope, bits)

    # -- raw layer: integers modulo n -------------------------------------

    def raw_encrypt(self, m: int, randomness: bytes | None = None) -> mpz:
        """``E(m)`` for ``0 <= m < n``; ``randomness`` is for test vectors only."""
        table = self._fixed_base()
        if randomness is None:
            randomness = os.urandom(table.exponent_bytes)
        n, n2 = self.public.n, self.public.n_square
        return (1 + m * n) * table.power(randomness, n2) % n2

    def raw_encrypt_many(self, plaintexts: Sequence[int]) -> list[mpz]:
        table = self._fixed_base()
        n, n2, size = self.public.n, self.public.n_square, table.exponent_bytes
        randomness = os.urandom(size * len(plaintexts))
        return [
            (1 + m * n) * table.power(randomness[i * size : (i + 1) * size], n2) % n2
            for i, m in enumerate(plaintexts)
        ]

    def raw_decrypt(self, c: int) -> mpz:
        """``m`` in ``[0, n)``; ``c`` must be in ``[1, n^2)``."""
        return self._crt.decrypt(mpz(c))

    # -- signed integers and stored ciphertexts ---------------------------

    def encode(self, value: int, *, column: str | None = None) -> mpz:
        """A signed integer as a plaintext modulo n (negatives wrap to n - |v|)."""
        limit = self.public.max_int
        if not -limit <= value <= limit:
            raise DomainError(
                "value does not fit a Paillier plaintext",
                column=column,
                domain=f"signed integers of magnitude <= (n-1)/2, about 2^{self.public.bits - 1}",
            )
        return mpz(value) % self.public.n

    def decode(self, m: int) -> int:
        """The signed integer a plaintext holds (above n/2 reads as negative)."""
        return int(m - self.public.n if m > self.public.max_int else m)

    def encrypt_ints(self, ints: Sequence[int], *, column: str | None = None) -> list[bytes]:
        """Stored ciphertexts (``0x01 || c``) of signed integers."""
        plaintexts = [self.encode(v, column=column) for v in ints]
        return [to_wire(c, self.public.width) for c in self.raw_encrypt_many(plaintexts)]

    def decrypt_ints(
        self,
        ciphertexts: Sequence[bytes] | pa.Array | pa.ChunkedArray,
        *,
        column: str | None = None,
    ) -> list[int | None]:
        """Signed integers of stored ciphertexts; an Arrow NULL stays None."""
        if isinstance(ciphertexts, pa.Array | pa.ChunkedArray):
            parsed = parse_array(ciphertexts, self.public.n_square, column=column)
        else:
            parsed = [from_wire(c, self.public.n_square, column=column) for c in ciphertexts]
        return [None if c is None else self.decrypt_one(c, column=column) for c in parsed]

    def decrypt_one(self, c: int, *, column: str | None = None) -> int:
        """Signed integer of a parsed ciphertext; refuses non-invertible ``c``."""
        if gmpy2.gcd(c, self.public.n) != 1:
            raise MalformedCiphertextError(
                f"{f'column {column!r}: ' if column else ''}Paillier ciphertext shares a factor "
                "with n, so no encryption under this key produced it; it is corrupt"
            )
        return self.decode(self.raw_decrypt(c))

    def _fixed_base(self) -> _FixedBaseTable:
        if self._table is None:  # built on first use: 14k multiplications, ~50 ms
            self._table = _FixedBaseTable(
                self._h_s, self.public.n_square, randomness_bits(self.public.bits)
            )
        return self._table

    def __repr__(self) -> str:
        return f"PaillierKey(bits={self.public.bits})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("a PaillierKey is not picklable: keys never leave the client process")


class _CrtDecryptor:
    """Paillier decryption modulo p^2 and q^2, joined by the CRT."""

    def __init__(self, p: mpz, q: mpz):
        self.p, self.q = p, q
        self.p2, self.q2 = p * p, q * q
        n = p * q
        self.hp = self._h(n, p, self.p2)
        self.hq = self._h(n, q, self.q2)
        self.q_inv_p = gmpy2.invert(q, p)

    @staticmethod
    def _h(n: mpz, prime: mpz, prime_square: mpz) -> mpz:
        # h = L_p(g^(p-1) mod p^2)^-1 mod p, with g = n + 1.
        return gmpy2.invert((gmpy2.powmod(n + 1, prime - 1, prime_square) - 1) // prime, prime)

    def decrypt(self, c: mpz) -> mpz:
        p, q = self.p, self.q
        mp = (gmpy2.powmod(c, p - 1, self.p2) - 1) // p * self.hp % p
        mq = (gmpy2.powmod(c, q - 1, self.q2) - 1) // q * self.hq % q
        return mq + q * ((mp - mq) * self.q_inv_p % p)


class KeyStore(Protocol):
    """Where a process finds the keys another process derived (``veil.keys.derivations``).

    A key is its primes ``p``, ``q`` and the DJN base ``h_s``, the two slow
    steps of deriving it from its seed.
    """

    def paillier_key(self, seed: bytes, bits: int) -> tuple[int, int, int] | None: ...

    def remember_paillier_key(self, seed: bytes, bits: int, p: int, q: int, h_s: int) -> None: ...


_KEY_STORE: ContextVar[KeyStore | None] = ContextVar("veil_paillier_key_store", default=None)


@contextmanager
def keys_kept_by(store: KeyStore | None) -> Iterator[None]:
    """Keys derived inside are looked up in ``store`` first, and new ones added to it.

    The prime search and ``h^n mod n^2`` are the slow steps of deriving a key
    (0.1-1 s a key); a client directory's sealed store spares a new process
    from repeating them.
    """
    token = _KEY_STORE.set(store)
    try:
        yield
    finally:
        _KEY_STORE.reset(token)


@lru_cache(maxsize=64)
def _derive(seed: bytes, bits: int) -> PaillierKey:
    store = _KEY_STORE.get()
    known = store.paillier_key(seed, bits) if store is not None else None
    if known is not None:
        return PaillierKey(*known)
    p, q, h_s = _searched(seed, bits)
    if store is not None:
        store.remember_paillier_key(seed, bits, int(p), int(q), int(h_s))
    return PaillierKey(p, q, h_s)


def _searched(seed: bytes, bits: int) -> tuple[mpz, mpz, mpz]:
    p, q = _primes(seed, bits)
    n = p * q
    stream = _SeedStream(seed, "djn-h")
    while True:
        x = stream.read_int(bits) % n
        if x > 1 and gmpy2.gcd(x, n) == 1:
            break
    h = (-x * x) % n
    return p, q, gmpy2.powmod(h, n, n * n)
