"""Trained zstd dictionaries (issue 14): versions, retraining, missing and tampered rows."""

from __future__ import annotations

import json
import random
import threading

import pytest

from conftest import StoreFactory
from veil.errors import AuthenticationError
from veil.kv import Store, codec
from veil.kv.dictionary import CATALOG_TABLE, DICT_KIND, MissingDictionaryError
from veil.kv.envelope import ENVELOPE_BLOCKED, ENVELOPE_DICTIONARY


def _logs(count: int, start: int = 0) -> dict[int, bytes]:
    rng = random.Random(start)
    verbs = ["install", "configure", "status installed", "status unpacked", "trigproc"]
    return {
        i: f"2026-11-24 13:{i % 60:02d}:{i % 53:02d} {rng.choice(verbs)} lib{rng.randrange(400)}"
        f":amd64 {rng.randrange(9)}.{rng.randrange(30)}-{i}".encode()
        for i in range(start, start + count)
    }


def _json(count: int, start: int) -> dict[int, bytes]:
    """Records unlike the logs: the first dictionary compresses them badly."""
    rng = random.Random(start)
    return {
        i: json.dumps(
            {
                "id": i,
                "name": f"user{rng.randrange(10**6)}",
                "tags": [rng.random() for _ in range(3)],
            }
        ).encode()
        for i in range(start, start + count)
    }


def _versions(store: Store) -> dict[int, int]:
    """How many stored packs name each dictionary version (0 = none)."""
    counts: dict[int, int] = {}
    for part in range(store.layout.partitions):
        for row in store.backend.scan(store.packs.table, part):
            version = (
                int.from_bytes(row.value[2:6])
                if row.value[0] in (ENVELOPE_DICTIONARY, ENVELOPE_BLOCKED)
                else 0
            )
            counts[version] = counts.get(version, 0) + 1
    return counts


def _dict_row(store: Store, version: int) -> bytes:
    return f"dict/{store._base}/".encode() + version.to_bytes(4, "big")


def test_first_batch_trains_version_one_and_small_packs_result(open_store: StoreFactory) -> None:
    logs = _logs(3000)
    store = open_store(compression="zstd-dict")
    store.put_many(logs)
    dictionary = store.packs.envelope.dictionary
    assert dictionary is not None and dictionary.version == 1
    assert _versions(store).keys() == {1}
    reader = open_store()  # any client reads them, whatever it writes with
    assert reader.get(1234) == logs[1234]
    assert dict(reader.range(0, 2999)) == logs


def test_retraining_adds_a_version_and_old_packs_stay_readable(open_store: StoreFactory) -> None:
    logs, other = _logs(3000), _json(3000, start=10_000)
    # Small packs, so that the new records do not rewrite every old pack.
    store = open_store(compression="zstd-dict", pack_rows=50)
    store.put_many(logs)
    store.put_many(_logs(1000, start=5000))  # the same kind of data: no new version
    assert store.packs.envelope.dictionary.version == 1  # type: ignore[union-attr]
    store.put_many(other)  # drifted: compresses far worse with version 1
    assert store.packs.envelope.dictionary.version == 2  # type: ignore[union-attr]
    assert {1, 2} <= _versions(store).keys()
    fresh = open_store(compression="zstd-dict")  # a new client: nothing cached
    assert fresh.packs.envelope.dictionary.version == 2  # type: ignore[union-attr]
    assert fresh.get(17) == logs[17] and fresh.get(10_017) == other[10_017]
    assert dict(fresh.range(0, 2999)) == logs


def test_a_dictionary_is_stored_compressed_hard(open_store: StoreFactory) -> None:
    """Sealed at zstd 19 (it is written once and counted in the table's bytes); a row
    sealed at the ordinary level, as before, still reads."""
    store = open_store(compression="zstd-dict")
    store.put_many(_logs(3000))
    dictionary = store.packs.envelope.dictionary
    assert dictionary is not None
    row = store.backend.get(CATALOG_TABLE, 0, _dict_row(store, 1))
    assert row is not None
    plain = store.packs.envelope.open(DICT_KIND, (1).to_bytes(4, "big"), row.value)
    envelope_bytes = len(row.value) - len(codec.compress_dense(codec.ZSTD, plain))
    assert len(row.value) < len(codec.compress(codec.ZSTD, plain)) + envelope_bytes
    ordinary = store.packs.envelope.seal(DICT_KIND, (1).to_bytes(4, "big"), plain)
    store.backend.update_if(CATALOG_TABLE, 0, row.key, ordinary, row.tag, row.tag)
    assert open_store(pack_cache=0).get(10) == _logs(3000)[10]


def test_a_missing_dictionary_version_is_a_clear_error(open_store: StoreFactory) -> None:
    store = open_store(compression="zstd-dict")
    store.put_many(_logs(3000))
    store.backend.delete(CATALOG_TABLE, 0, _dict_row(store, 1))
    with pytest.raises(MissingDictionaryError, match="dictionary version 1"):
        open_store(pack_cache=0)  # the table's own codec: it would write with that dictionary
    reader = open_store(pack_cache=0, compression="zlib")  # opens; its reads cannot
    with pytest.raises(MissingDictionaryError, match="dictionary version 1"):
        reader.get(10)
    with pytest.raises(MissingDictionaryError):
        list(reader.range(0, 100))


def test_a_tampered_dictionary_fails_authentication(open_store: StoreFactory) -> None:
    store = open_store(compression="zstd-dict")
    store.put_many(_logs(3000))
    row = store.backend.get(CATALOG_TABLE, 0, _dict_row(store, 1))
    assert row is not None
    tampered = bytearray(row.value)
    tampered[len(tampered) // 2] ^= 0x20
    store.backend.update_if(CATALOG_TABLE, 0, row.key, bytes(tampered), row.tag, row.tag)
    with pytest.raises(AuthenticationError):
        open_store(pack_cache=0).get(10)
    with pytest.raises(AuthenticationError):  # nor can a version be moved to another slot
        store.backend.upsert(CATALOG_TABLE, 0, _dict_row(store, 2), row.value, b"t")
        store.packs.envelope.dictionaries.get(2)  # type: ignore[union-attr]


def test_concurrent_writers_with_a_retrain_in_the_middle_lose_nothing(
    open_store: StoreFactory,
) -> None:
    first = open_store(compression="zstd-dict")
    first.put_many(_logs(2000))
    single, bulk = open_store(compression="zstd-dict"), open_store(compression="zstd-dict")
    expected = dict(_logs(2000))
    singles = _logs(150, start=3000)
    expected |= singles | {k: b"rewritten %d" % k for k in range(0, 2000, 40)}
    errors: list[BaseException] = []

    def write_singles() -> None:
        try:
            for key, value in singles.items():  # single puts keep using version 1
                single.put(key, value)
            for key in range(0, 2000, 40):
                single.put(key, b"rewritten %d" % key)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=write_singles)
    thread.start()
    drifted = _json(2000, start=20_000)
    bulk.put_many(drifted)  # retrains version 2 meanwhile
    thread.join()
    assert not errors
    expected |= drifted
    assert bulk.packs.envelope.dictionary.version == 2  # type: ignore[union-attr]
    reader = open_store(pack_cache=0)
    assert dict(reader.range(0, 30_000)) == expected
