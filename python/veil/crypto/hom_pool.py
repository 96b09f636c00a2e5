"""Paillier encryption of many packed plaintexts on every core.

One encryption is ~56 multiplications modulo n^2 in gmpy2 (~0.2 ms for a
2048-bit key). gmpy2 holds the GIL for operations this small, so threads do
not help (measured: 2 threads run at the speed of one); worker processes do.

Workers are started with ``spawn`` (forking a process that runs DuckDB's
threads can deadlock) and receive the key's 32-byte *seed* through the pool's
pipe, so a key exists only in this client's own processes; each worker
derives the key once (``PaillierKey.from_seed`` is cached per process).
Small inputs are encrypted in this process: starting workers costs about a
second.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gmpy2 import mpz

from veil.crypto.keys import KeyLabel, MasterKey
from veil.crypto.paillier import DEFAULT_BITS, SEED_BYTES, PaillierKey
from veil.crypto.paillier_wire import to_wire

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

# Below this many plaintexts, starting worker processes costs more than it saves.
PARALLEL_THRESHOLD = 4096
_CHUNK = 1024

_worker_key: PaillierKey | None = None


def _start_worker(seed: bytes, bits: int) -> None:
    global _worker_key
    _worker_key = PaillierKey.from_seed(seed, bits)


def _encrypt_chunk(plaintexts: list[int]) -> list[bytes]:
    assert _worker_key is not None
    return _encrypt_with(_worker_key, plaintexts)


def _encrypt_with(key: PaillierKey, plaintexts: Sequence[int]) -> list[bytes]:
    n, width = key.public.n, key.public.width
    return [to_wire(c, width) for c in key.raw_encrypt_many([mpz(p) % n for p in plaintexts])]


class EncryptionPool:
    """Encrypts signed plaintexts (taken modulo n) under one scope's Paillier key."""

    def __init__(self, master: MasterKey, scope: str, *, bits: int = DEFAULT_BITS):
        self._seed = master.derive(KeyLabel("hom", scope), SEED_BYTES)
        self._bits = bits
        self.key = PaillierKey.from_seed(self._seed, bits)
        self.workers = max(1, len(os.sched_getaffinity(0)))
        self._pool: ProcessPoolExecutor | None = None

    def encrypt(self, plaintexts: Sequence[int]) -> list[bytes]:
        """Stored ciphertexts (``0x01 || c``) of ``plaintexts``, in order."""
        if self.workers == 1 or len(plaintexts) < PARALLEL_THRESHOLD:
            return _encrypt_with(self.key, plaintexts)
        chunks = [list(plaintexts[i : i + _CHUNK]) for i in range(0, len(plaintexts), _CHUNK)]
        return [c for done in self._executor().map(_encrypt_chunk, chunks) for c in done]

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # imported here: every process imports this module (the session's ciphers),
            # few encrypt enough to start workers, and these imports cost a fresh
            # process's first query ~10-25 ms (issue 41)
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(self._seed, self._bits),
            )
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> EncryptionPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> str:
        raise TypeError("an EncryptionPool holds key material and is not picklable")
