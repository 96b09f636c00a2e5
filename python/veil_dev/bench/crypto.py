"""``veil bench crypto``: batch throughput of every scheme, beside raw AES.

Each figure is the median of several timed runs of one batch call on one core,
in values per second. Raw AES-128-ECB throughput is measured in the same run as
the physical limit the symmetric schemes are compared against.

Fast schemes run on 1M values. Schemes whose single operations cost tens of
microseconds or more (fresh OPE, Paillier) run on a smaller batch sized to take
about a second, and the table says how many values each figure was measured on.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from veil.crypto.keys import KeyLabel, MasterKey

MILLION = 1_000_000

# The targets, in values per second (None: reference figure only).
TARGETS: dict[str, float | None] = {
    "det_int64_encrypt": 20e6,
    "det_int64_decrypt": 20e6,
    "det_str_encrypt": 3e6,
    "rnd_encrypt": 3e6,
    "ope32_encrypt_fresh": 10e3,
    "ope32_encrypt_cached": 5e6,
    "paillier_encrypt": 2e3,
    "paillier_decrypt": 400,
    "paillier_add": 200e3,
    "search_encrypt": 1e6,
    "search_match": 1e6,
    "aes_ecb_blocks": None,
    "ashe_encrypt": None,
    "ashe_unpad_ids": None,
    "ashe_unpad_runs": None,
    "ashe_unpad_bitmap": None,
}


@dataclass(frozen=True)
class Measurement:
    name: str
    values: int
    per_second: float

    @property
    def target(self) -> float | None:
        return TARGETS.get(self.name)


def median_rate(run: Callable[[], object], values: int, repeats: int) -> float:
    """Median over ``repeats`` runs of ``values / seconds`` for one call of ``run``."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        rates.append(values / (time.perf_counter() - start))
    return statistics.median(rates)


class CryptoBench:
    """Builds each scheme's inputs once, then times its batch calls."""

    def __init__(self, scale: float = 1.0, repeats: int = 5, seed: int = 7):
        self.scale = scale
        self.repeats = repeats
        self.rng = np.random.default_rng(seed)
        self.master = MasterKey(self.rng.bytes(32))

    def size(self, full: int) -> int:
        return max(10, int(full * self.scale))

    def key(self, scheme: str, length: int = 32) -> bytes:
        return self.master.derive(KeyLabel(scheme, "bench"), length)

    def run_all(self) -> list[Measurement]:
        steps = [
            self.aes_ecb,
            self.det_int64,
            self.det_str,
            self.rnd,
            self.ope32,
            self.paillier,
            self.search,
            self.ashe,
        ]
        results: list[Measurement] = []
        for step in steps:
            results.extend(step())
        return results

    def aes_ecb(self) -> list[Measurement]:
        from veil import _native

        blocks = self.size(MILLION)
        data = self.rng.integers(0, 256, blocks * 16, dtype=np.uint8)
        out = np.empty_like(data)
        key = self.key("bench-aes", 16)
        rate = median_rate(lambda: _native.aes_ecb_blocks(key, data, out), blocks, self.repeats)
        return [Measurement("aes_ecb_blocks", blocks, rate)]

    def det_int64(self) -> list[Measurement]:
        from veil.crypto.det import DetInt

        n = self.size(MILLION)
        scheme = DetInt(self.key("det-ff1", 16), bits=64)  # the key size from_master uses
        plain = self.rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
        cipher = scheme.encrypt(plain)
        return [
            Measurement(
                "det_int64_encrypt", n, median_rate(lambda: scheme.encrypt(plain), n, self.repeats)
            ),
            Measurement(
                "det_int64_decrypt", n, median_rate(lambda: scheme.decrypt(cipher), n, self.repeats)
            ),
        ]

    def det_str(self) -> list[Measurement]:
        from veil.crypto.det import DetBytes

        n = self.size(MILLION)
        scheme = DetBytes(self.key("det-siv", 32))  # AES-SIV over AES-128, as from_master
        strings = self.strings(n, 25)
        rate = median_rate(lambda: scheme.encrypt(strings), n, self.repeats)
        return [Measurement("det_str_encrypt", n, rate)]

    def rnd(self) -> list[Measurement]:
        from veil.crypto.rnd import Rnd

        n = self.size(MILLION)
        scheme = Rnd(self.key("rnd"))
        strings = self.strings(n, 24)
        return [
            Measurement(
                "rnd_encrypt", n, median_rate(lambda: scheme.encrypt(strings), n, self.repeats)
            )
        ]

    def ope32(self) -> list[Measurement]:
        from veil.crypto.ope import Ope

        fresh_n = self.size(20_000)
        distinct = self.rng.choice(2**32, fresh_n, replace=False).astype(np.int64) - 2**31
        rates = []
        for _ in range(max(1, self.repeats // 2)):
            scheme = Ope(self.key("ope"), bits=32)  # a new instance: an empty cache
            start = time.perf_counter()
            scheme.encrypt(distinct)
            rates.append(fresh_n / (time.perf_counter() - start))
        cached_n = self.size(MILLION)
        repeats = np.resize(distinct, cached_n)
        cached = median_rate(lambda: scheme.encrypt(repeats), cached_n, self.repeats)
        return [
            Measurement("ope32_encrypt_fresh", fresh_n, statistics.median(rates)),
            Measurement("ope32_encrypt_cached", cached_n, cached),
        ]

    def paillier(self) -> list[Measurement]:
        from veil.crypto.hom import PaillierKey, add_ciphertexts

        key = PaillierKey.from_seed(self.key("hom"), bits=2048)
        enc_n, dec_n, add_n = self.size(4000), self.size(800), self.size(200_000)
        ints = [int(v) for v in self.rng.integers(0, 2**62, enc_n)]
        ciphertexts = key.encrypt_ints(ints)
        few = ciphertexts[:dec_n]
        pairs = pa.array(np.resize(np.array(ciphertexts, dtype=object), add_n), pa.binary())
        n_square = key.public.n_square
        reps = max(1, self.repeats // 2)
        return [
            Measurement(
                "paillier_encrypt", enc_n, median_rate(lambda: key.encrypt_ints(ints), enc_n, reps)
            ),
            Measurement(
                "paillier_decrypt", dec_n, median_rate(lambda: key.decrypt_ints(few), dec_n, reps)
            ),
            Measurement(
                "paillier_add",
                add_n,
                median_rate(lambda: add_ciphertexts(pairs, pairs, n_square), add_n, self.repeats),
            ),
        ]

    def search(self) -> list[Measurement]:
        from veil.crypto.search import Search, search_match, tokenize

        rows = self.size(MILLION // 10)
        vocabulary = [f"w{i:05d}" for i in range(20_000)]
        picks = self.rng.integers(0, len(vocabulary), (rows, 10))
        texts = pa.array([" ".join(vocabulary[j] for j in row) for row in picks])
        words = (
            sum(len(set(tokenize(t))) for t in texts.to_pylist()[:1000]) * rows // min(rows, 1000)
        )
        scheme = Search(self.key("search"))
        stored = scheme.encrypt(texts)
        token = scheme.token(vocabulary[3])
        return [
            Measurement(
                "search_encrypt",
                words,
                median_rate(lambda: scheme.encrypt(texts), words, self.repeats),
            ),
            Measurement(
                "search_match",
                words,
                median_rate(lambda: search_match(stored, token), words, self.repeats),
            ),
        ]

    def ashe(self) -> list[Measurement]:
        """ASHE encryption over sequential ids, and unpadding a random half of them.

        The unpad figures count the ids a sum covers: a filter keeping each row
        with probability 1/2 leaves runs of two ids on average, given as the
        ids themselves, as [start, end] runs, or as a bitmap.
        """
        from veil.crypto.ashe import Ashe

        n = self.size(MILLION)
        scheme = Ashe(self.key("ashe-v1"))
        ids = np.arange(n, dtype=np.int64)
        plain = self.rng.integers(-(2**40), 2**40, n, dtype=np.int64)
        kept = self.rng.random(n) < 0.5
        kept_ids = ids[kept]
        edges = np.diff(np.concatenate(([False], kept, [False])).astype(np.int8))
        runs = np.stack([np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1], axis=1)
        bitmap = (0, np.packbits(kept, bitorder="little"))
        covered = len(kept_ids)
        return [
            Measurement(
                "ashe_encrypt", n, median_rate(lambda: scheme.encrypt(ids, plain), n, self.repeats)
            ),
            Measurement(
                "ashe_unpad_ids",
                covered,
                median_rate(lambda: scheme.pad_sum(ids=kept_ids), covered, self.repeats),
            ),
            Measurement(
                "ashe_unpad_runs",
                covered,
                median_rate(lambda: scheme.pad_sum(runs=runs), covered, self.repeats),
            ),
            Measurement(
                "ashe_unpad_bitmap",
                covered,
                median_rate(lambda: scheme.pad_sum(bitmap=bitmap), covered, self.repeats),
            ),
        ]

    def strings(self, n: int, length: int) -> pa.Array:
        """``n`` distinct-ish ASCII strings of ``length`` bytes, built without a Python loop."""
        letters = self.rng.integers(ord("a"), ord("z") + 1, n * length, dtype=np.uint8)
        offsets = np.arange(0, (n + 1) * length, length, dtype=np.int32)
        return pa.Array.from_buffers(
            pa.utf8(), n, [None, pa.py_buffer(offsets), pa.py_buffer(letters)]
        )


def pin_to_one_core() -> None:
    """Keep the measurement on one core, as the targets are stated per core."""
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[-1]})
