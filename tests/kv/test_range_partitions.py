"""Range queries over several hash partitions: concurrent scans, merged in key order."""

from __future__ import annotations

import threading

from conftest import StoreFactory
from veil.kv.packs import _merged


def test_merged_interleaves_ascending_runs_into_batches() -> None:
    parts = [([b"a", b"d", b"e"], [b"1", b"4", b"5"]), ([], []), ([b"b", b"c"], [b"2", b"3"])]
    batches = list(_merged(parts, 2))
    assert batches == [([b"a", b"b"], [b"1", b"2"]), ([b"c", b"d"], [b"3", b"4"]), ([b"e"], [b"5"])]


def _range_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("veil-kv-range")]


def test_close_stops_the_scan_threads(open_store: StoreFactory) -> None:
    before = len(_range_threads())
    store = open_store(pack_rows=4, partitions=5, table="scanthreads")
    data = {key: b"v%d" % key for key in range(300)}
    store.put_many(data)
    assert list(store.range(17, 260)) == [(k, data[k]) for k in range(17, 261)]
    iterator = store.range(0, 10)  # lazy: nothing runs until iterated
    assert next(iterator) == (0, b"v0")
    store.close()
    assert len(_range_threads()) == before
