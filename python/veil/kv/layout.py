"""Where a key lives: its hash partition and its position in packID order.

Plain packIDs (the default) are the encoded keys themselves, so the server's
order on packIDs is the key order: floor lookups and range queries work.

Pseudorandom packIDs (``prf_pack_ids=True``, GENERIC mode only, paper §2.5)
replace every key's position by ``0x03 || HMAC-SHA256(k_id, encoded key)[:16]``.
Packs then hold keys that are consecutive in *that* order, the packID is the
smallest such value in the pack, and every protocol runs unchanged on it: a
get is the floor lookup of HMAC(key), a split cuts the pack in HMAC order. So
the fixed mapping key -> pack that a PRF needs is exactly the floor rule over
pseudorandom positions. The server sees only pseudorandom packIDs (it learns
how many packs there are and which pack each request touches, nothing about
key values); range queries are impossible, since key order is gone, and are
refused.

Hash partitions (paper §7) spread packs over ``partitions`` independent ordered
partitions, as Cassandra needs: partition = HMAC-SHA256(k_part, key) mod N. A
pack then holds keys of one partition that are consecutive within it; a range
query asks every partition and merges the streams.

Key buckets (``bucket_bits``, tables created from the seventh round of issue 14
on): integer keys are hashed by *bucket*, ``key >> bucket_bits``, instead of one
by one, so a run of ``2**bucket_bits`` consecutive keys shares a partition and a
pack holds consecutive keys, as on a one-partition store. Hashing keys one by
one put keys ~N apart into a pack, and short records compress much worse that
way (Cassandra, 8 partitions: 81% and 50% of the whole-dataset ratio on short
JSON records and log lines). Every protocol is unchanged: a key still lives in
exactly one partition, so floors stay exact single-partition lookups; a range
needs only the partitions of the buckets it meets. The server learns nothing
new: with ordered packIDs it sees the keys that start packs anyway, and which
partition a request goes to was already visible. The width is chosen when the
table's pack size is (:func:`bucket_bits_for`) and fixed in its catalogue;
byte-string keys and pseudorandom packIDs keep per-key hashing.
"""

from __future__ import annotations

import hmac
import itertools
import statistics
from collections.abc import Sequence

from veil.kv.keys import INT_TAG

PRF_TAG = b"\x03"
PRF_BYTES = 16
BUCKET_TAG = b"\x04"  # HMAC input of a bucket, apart from encoded keys (0x01, 0x02)
# A bucket holds about this many packs: a pack straddles two buckets (and
# then holds two runs of consecutive keys) about once per bucket.
BUCKET_PACKS = 8
# At least 2**16 buckets over the 64-bit key space: a first batch of random
# keys (median gap ~2**49 at 20,000 keys) would otherwise get a handful of
# buckets, and the table would stay in that many partitions however it grew.
MAX_BUCKET_BITS = 48


class Layout:
    """Maps an encoded key to (partition, packID-order position)."""

    __slots__ = ("_part_key", "_prf_key", "bucket_bits", "partitions")

    def __init__(
        self,
        partitions: int,
        part_key: bytes,
        prf_key: bytes | None,
        bucket_bits: int | None = None,
    ):
        self.partitions = partitions
        self._part_key = part_key
        self._prf_key = prf_key
        # Buckets only where packs follow key order (not under a PRF).
        self.bucket_bits = bucket_bits if prf_key is None and partitions > 1 else None

    @property
    def ordered(self) -> bool:
        """True when packID order is key order (range queries possible)."""
        return self._prf_key is None

    def position(self, encoded: bytes) -> bytes:
        if self._prf_key is None:
            return encoded
        return PRF_TAG + hmac.digest(self._prf_key, encoded, "sha256")[:PRF_BYTES]

    def partition(self, encoded: bytes) -> int:
        if self.partitions == 1:
            return 0
        bucket = self._bucket(encoded)
        if bucket is not None:
            return self._bucket_partition(bucket)
        digest = hmac.digest(self._part_key, encoded, "sha256")
        return int.from_bytes(digest[:8], "big") % self.partitions

    def partitions_between(self, low: bytes, high: bytes) -> list[int]:
        """The partitions that may hold keys in ``[low, high]``, ascending.

        All of them, unless the keys are bucketed and the range meets fewer
        buckets than there are partitions.
        """
        first, last = self._bucket(low), self._bucket(high)
        if first is None or last is None or last - first >= self.partitions:
            return list(range(self.partitions))
        return sorted({self._bucket_partition(b) for b in range(first, last + 1)})

    def _bucket(self, encoded: bytes) -> int | None:
        if self.bucket_bits is None or len(encoded) != 9 or encoded[0] != INT_TAG:
            return None
        return int.from_bytes(encoded[1:], "big") >> self.bucket_bits

    def _bucket_partition(self, bucket: int) -> int:
        digest = hmac.digest(self._part_key, BUCKET_TAG + bucket.to_bytes(8, "big"), "sha256")
        return int.from_bytes(digest[:8], "big") % self.partitions

    def locate(self, encoded: bytes) -> tuple[int, bytes]:
        return self.partition(encoded), self.position(encoded)


def bucket_bits_for(pack_rows: int, keys: Sequence[bytes] = ()) -> int:
    """Bucket width (bits) for a new table: about BUCKET_PACKS packs of its keys.

    ``keys`` are the first batch's encoded keys in ascending order; their
    median gap says how many key values a run of rows spans (1 for dense keys,
    and when the batch says nothing: a single key, or byte-string keys, which
    are not bucketed). Deterministic for a given batch, like the pack size.
    The width stays fixed: a table that later fills its key range far more
    densely than its first batch did gets buckets of more than BUCKET_PACKS
    packs (larger partitions), never wrong reads.
    """
    ints = sorted(int.from_bytes(k[1:], "big") for k in keys if len(k) == 9 and k[0] == INT_TAG)
    gaps = [b - a for a, b in itertools.pairwise(ints) if b > a]
    gap = max(1, int(statistics.median_low(gaps))) if gaps else 1
    width = BUCKET_PACKS * max(1, pack_rows) * gap
    return min(MAX_BUCKET_BITS, max(0, (width - 1).bit_length()))
