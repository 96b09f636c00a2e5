"""Trained zstd dictionaries, one series per table (issue 14; beyond MiniCrypt).

A pack compresses only what its own rows repeat; a dictionary trained on a
sample of the table gives every pack the patterns the whole table shares, so
small packs (cheap point reads) compress almost like large ones.

Stored in the store's catalogue table, sealed like packs (AES-256-GCM under the
table's pack key, the associated data binding table and version)::

    dict/<table>/<version, 4 bytes>  ->  seal("dict", version, meta JSON length (u32) | meta | dictionary)
    dict/<table>/current             ->  seal("dict-current", "", version (u32))

Every pack written with a dictionary names its version in its (authenticated)
envelope header (``veil.kv.envelope``, envelope version 2). Versions are never
deleted or changed: a pack stays readable whatever was trained after it. A
client trains version n + 1 (insert-if-not-exists: of two racing trainers one
version wins and both use it) when a batch compresses markedly worse than the
current dictionary did on its own sample (``DRIFT``), then moves ``current``
with update-if. Writers that still use version n meanwhile write packs that
name n: nothing is lost, the packs are only a little larger.

A pack naming a version the store lacks raises :class:`MissingDictionaryError`;
a dictionary or ``current`` row modified on the server fails authentication.
The server learns how many versions exist, when they appear, their sizes, and
which version each pack uses.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Callable, Sequence

import zstandard

from veil import _native
from veil.errors import VeilError
from veil.kv.backends.base import KVBackend
from veil.kv.pack import serialize_entries

CATALOG_TABLE = "veil_kv_catalog"  # shared with veil.kv.catalog (no import cycle)
DICT_KIND = b"dict"
CURRENT_KIND = b"dict-current"
LEVEL = 3
# Blocked packs written in bulk (rust/veil-kernels/src/kvpack/blocks.rs, Level::Dense):
# the level the pack-size choice estimates with.
BLOCK_LEVEL = 19
MIN_DICT_BYTES, MAX_DICT_BYTES = 4 * 1024, 64 * 1024
SAMPLE_GROUP = 8  # rows per training sample: a small pack's worth
MAX_SAMPLE_BYTES = 4 << 20
MIN_SAMPLES = 64  # fewer samples do not train a useful dictionary
MIN_DICTIONARY_ROWS = SAMPLE_GROUP * MIN_SAMPLES  # smaller batches keep the current version
DRIFT = 0.15  # retrain when a batch compresses 15% worse than the dictionary's sample
_VERSION = struct.Struct(">I")
Seal = Callable[[bytes, bytes, bytes], bytes]  # (kind, location, plaintext) -> stored
Open = Callable[[bytes, bytes, bytes], bytes]  # (kind, location, stored) -> plaintext


class MissingDictionaryError(VeilError):
    """A pack names a compression dictionary version the store does not hold."""

    anchor = "kv-dictionary"


class Dictionary:
    """One trained version: its bytes, its prepared forms, and the ratio it reached."""

    __slots__ = ("_block_compression", "_compression", "data", "prepared", "ratio", "version")

    def __init__(self, version: int, data: bytes, ratio: float = 0.0):
        self.version, self.data = version, data
        self.ratio = ratio  # raw / compressed on the sample it was trained from
        self.prepared = _native.KvDictionary(data)  # for the native pack decoder
        self._compression = zstandard.ZstdCompressionDict(data)
        self._compression.precompute_compress(level=LEVEL)
        self._block_compression: zstandard.ZstdCompressionDict | None = None

    def compressor(self) -> zstandard.ZstdCompressor:
        """A compressor using this dictionary (zstandard's are not thread-safe: one per use)."""
        return zstandard.ZstdCompressor(level=LEVEL, dict_data=self._compression)

    def block_compressor(self) -> zstandard.ZstdCompressor:
        """A compressor as the native writer of blocked packs uses (for sizing estimates)."""
        if self._block_compression is None:
            self._block_compression = zstandard.ZstdCompressionDict(self.data)
            self._block_compression.precompute_compress(level=BLOCK_LEVEL)
        return block_compressor(self._block_compression)


def block_compressor(
    dictionary: zstandard.ZstdCompressionDict | None = None,
) -> zstandard.ZstdCompressor:
    """zstd as blocks are written: no dictionary id, no checksum (GCM authenticates)."""
    return zstandard.ZstdCompressor(
        level=BLOCK_LEVEL, dict_data=dictionary, write_dict_id=False, write_checksum=False
    )


def training_samples(entries: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
    """Small packs (SAMPLE_GROUP rows) of a batch, at most MAX_SAMPLE_BYTES, evenly spread."""
    total = sum(len(k) + len(v) for k, v in entries)
    step = SAMPLE_GROUP * max(1, -(-total // MAX_SAMPLE_BYTES))
    return [serialize_entries(entries[i : i + SAMPLE_GROUP]) for i in range(0, len(entries), step)]


def refresh(
    dictionaries: Dictionaries, entries: Sequence[tuple[bytes, bytes]]
) -> Dictionary | None:
    """The dictionary to compress this batch with, training a new version if needed.

    Trains version 1 when the table has none, and version n + 1 when the batch
    compresses more than DRIFT worse with version n than version n did on
    its own sample. Returns the current version (None if none could be trained).
    """
    current = dictionaries.current()
    samples = training_samples(entries)
    if current is not None and ratio_with(current, samples) >= (1 - DRIFT) * current.ratio:
        return current
    trained = train(current.version + 1 if current else 1, samples)
    if trained is None:
        return current
    return dictionaries.publish(trained)


def train(version: int, samples: Sequence[bytes]) -> Dictionary | None:
    """Train a dictionary on pack plaintexts; None when the sample is too small."""
    if len(samples) < MIN_SAMPLES:
        return None
    size = min(MAX_DICT_BYTES, max(MIN_DICT_BYTES, sum(len(s) for s in samples) // 50))
    try:
        trained = zstandard.train_dictionary(size, list(samples), level=LEVEL)
    except zstandard.ZstdError:
        return None  # zstd found nothing worth keeping
    dictionary = Dictionary(version, trained.as_bytes())
    dictionary.ratio = ratio_with(dictionary, samples)
    return dictionary


def ratio_with(dictionary: Dictionary | None, plaintexts: Sequence[bytes]) -> float:
    """Raw / compressed bytes of these plaintexts compressed one by one."""
    compressor = (
        dictionary.compressor() if dictionary is not None else zstandard.ZstdCompressor(level=LEVEL)
    )
    raw = sum(len(p) for p in plaintexts)
    return raw / max(1, sum(len(compressor.compress(p)) for p in plaintexts))


class Dictionaries:
    """One table's dictionary versions: fetched, authenticated and cached."""

    def __init__(self, backend: KVBackend, table: str, seal: Seal, open_: Open):
        self._backend = backend
        self._prefix = f"dict/{table}/".encode()
        self._seal, self._open = seal, open_  # the table's envelope
        self._known: dict[int, Dictionary] = {}
        self._lock = threading.Lock()

    # -- reading ------------------------------------------------------------
    def get(self, version: int) -> Dictionary:
        """Version ``version`` (cached once authenticated)."""
        with self._lock:
            known = self._known.get(version)
        if known is not None:
            return known
        row = self._backend.get(CATALOG_TABLE, 0, self._prefix + _VERSION.pack(version))
        if row is None:
            raise MissingDictionaryError(
                f"a pack of this table was compressed with dictionary version {version}, "
                "which the store does not hold (its catalogue row was deleted or not "
                "copied); restore the table's dict/ rows from a backup of the store"
            )
        plaintext = self._open(DICT_KIND, _VERSION.pack(version), row.value)
        dictionary = _decode(version, plaintext)
        with self._lock:
            self._known[version] = dictionary
        return dictionary

    def current(self) -> Dictionary | None:
        """The version writers use now (None before the first training)."""
        row = self._backend.get(CATALOG_TABLE, 0, self._prefix + b"current")
        if row is None:
            return None
        version = _VERSION.unpack(self._open(CURRENT_KIND, b"", row.value))[0]
        return self.get(version)

    # -- training -------------------------------------------------------------
    def publish(self, dictionary: Dictionary) -> Dictionary:
        """Store ``dictionary`` as its version unless another client did; make it current.

        Returns the dictionary that holds that version (ours or the racer's).
        """
        location = _VERSION.pack(dictionary.version)
        stored = self._seal(DICT_KIND, location, _encode(dictionary))
        self._backend.insert_if_not_exists(
            CATALOG_TABLE, 0, self._prefix + location, stored, os.urandom(16)
        )
        winner = self.get(dictionary.version)
        self._advance_current(winner.version)
        return winner

    def _advance_current(self, version: int) -> None:
        key = self._prefix + b"current"
        value = self._seal(CURRENT_KIND, b"", _VERSION.pack(version))
        while True:
            row = self._backend.get(CATALOG_TABLE, 0, key)
            if row is None:
                if self._backend.insert_if_not_exists(CATALOG_TABLE, 0, key, value, os.urandom(16)):
                    return
                continue
            now = _VERSION.unpack(self._open(CURRENT_KIND, b"", row.value))[0]
            if now >= version:  # never move current backwards
                return
            if self._backend.update_if(CATALOG_TABLE, 0, key, value, os.urandom(16), row.tag):
                return

    def stored_bytes(self) -> int:
        """Bytes of this table's dictionary rows (for space accounting)."""
        rows = self._backend.scan(CATALOG_TABLE, 0, self._prefix, self._prefix + b"\xff")
        return sum(len(r.key) + len(r.value) + len(r.tag) for r in rows)


def _encode(dictionary: Dictionary) -> bytes:
    meta = json.dumps({"ratio": round(dictionary.ratio, 4)}).encode()
    return _VERSION.pack(len(meta)) + meta + dictionary.data


def _decode(version: int, plaintext: bytes) -> Dictionary:
    (length,) = _VERSION.unpack_from(plaintext)
    meta = json.loads(plaintext[4 : 4 + length])
    return Dictionary(version, plaintext[4 + length :], float(meta["ratio"]))
