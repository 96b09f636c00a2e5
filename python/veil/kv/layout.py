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
"""

from __future__ import annotations

import hmac

PRF_TAG = b"\x03"
PRF_BYTES = 16


class Layout:
    """Maps an encoded key to (partition, packID-order position)."""

    __slots__ = ("_part_key", "_prf_key", "partitions")

    def __init__(self, partitions: int, part_key: bytes, prf_key: bytes | None):
        self.partitions = partitions
        self._part_key = part_key
        self._prf_key = prf_key

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
        digest = hmac.digest(self._part_key, encoded, "sha256")
        return int.from_bytes(digest[:8], "big") % self.partitions

    def locate(self, encoded: bytes) -> tuple[int, bytes]:
        return self.partition(encoded), self.position(encoded)
