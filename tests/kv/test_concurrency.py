"""Several client processes writing overlapping keys: nothing lost, nothing resurrected.

Each process logs every operation with its wall-clock start and end. For each
key, the final state must be the outcome of an operation that could have been
the last one: one that no other operation on the key started after it ended
(a linearizable final state). A lost update or a resurrected key breaks this.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clients import start_client

from conftest import StoreFactory
from veil.kv import Store
from veil.kv.append import AppendStore

PROCESSES = 4
OPERATIONS = 120
KEYS = 40

WORKER = """
import json, random, time
rng = random.Random({seed})
log = []
for number in range({operations}):
    key = rng.randrange({keys})
    value = None if rng.random() < 0.3 else b"p{seed}-%d" % number
    start = time.time()
    if value is None:
        store.delete(key)
    else:
        store.put(key, value)
    log.append([key, None if value is None else value.decode(), start, time.time()])
{after}
print(json.dumps(log))
"""


def possible_final_states(logs: list[list[list[Any]]]) -> dict[int, set[bytes | None]]:
    by_key: dict[int, list[tuple[float, float, bytes | None]]] = {}
    for log in logs:
        for key, value, start, end in log:
            outcome = None if value is None else str(value).encode()
            by_key.setdefault(int(key), []).append((float(start), float(end), outcome))
    finals: dict[int, set[bytes | None]] = {}
    for key, ops in by_key.items():
        finals[key] = {outcome for _, end, outcome in ops if not any(s > end for s, _, _ in ops)}
    return finals


def run_workers(
    url: str, key_file: Path, table: str, mode: str, after: str = ""
) -> list[list[list[Any]]]:
    workers = [
        start_client(
            url,
            key_file,
            table,
            WORKER.format(seed=seed, operations=OPERATIONS, keys=KEYS, after=after),
            mode=mode,
        )
        for seed in range(PROCESSES)
    ]
    logs = []
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err.decode()[-2000:]
        logs.append(json.loads(out))
    return logs


@pytest.mark.parametrize("pack_rows", [3, 50])
def test_concurrent_generic_writers(
    open_store: StoreFactory, kv_url: str, key_file: Path, kv_table: str, pack_rows: int
) -> None:
    store = open_store(pack_rows=pack_rows)
    logs = run_workers(kv_url, key_file, kv_table, "generic")
    finals = possible_final_states(logs)
    stored = dict(store.range(0, KEYS))
    for key in range(KEYS):
        assert stored.get(key) in finals.get(key, {None}), f"key {key}"
    # a put may leave its pack one key over max_keys; the pack's next write splits it first
    assert all(len(p) <= store.config.max_keys + 1 for p in _pack_sizes(store))


def _pack_sizes(store: Store) -> list[dict[bytes, bytes]]:
    sizes = []
    for partition in range(store.layout.partitions):
        for row in store.backend.scan(store.packs.table, partition):
            sizes.append(store.packs.open_pack(partition, row).items)
    return sizes


APPEND_WORKER = """
import json, random, time
store.close()
store = veil.kv.open(sys.argv[1], sys.argv[2], "append", table=sys.argv[4])
rng = random.Random({seed})
final = {{}}
for number in range(200):
    key = time.time_ns() // 1000 * 8 + {seed}  # roughly increasing, unique per process
    store.put(key, b"%d" % number)
    final[key] = number
    if rng.random() < 0.1:  # overwrite or delete a recent key (within T_delta)
        recent = max(final)
        if rng.random() < 0.5:
            store.delete(recent)
            final[recent] = None
        else:
            store.put(recent, b"again")
            final[recent] = "again"
    time.sleep(0.005)
store.close()
print(json.dumps(final))
"""


def test_concurrent_append_writers_with_background_merges(
    open_store: StoreFactory, kv_url: str, key_file: Path, kv_table: str
) -> None:
    store = open_store("append", epoch_seconds=0.2)
    workers = [
        start_client(kv_url, key_file, kv_table, APPEND_WORKER.format(seed=seed), mode="append")
        for seed in range(PROCESSES)
    ]
    expected: dict[int, bytes] = {}
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err.decode()[-2000:]
        for key, outcome in json.loads(out).items():
            if outcome is not None:
                expected[int(key)] = b"again" if outcome == "again" else b"%d" % outcome
    assert isinstance(store, AppendStore)
    merged_by_workers = sum(1 for s in store.em.stats() if s.status != "NOT_MERGED")
    low, high = min(expected) - 10, max(expected) + 10
    assert dict(store.range(low, high)) == expected
    store.settle()
    assert dict(store.range(low, high)) == expected
    assert merged_by_workers > 0  # the background threads did merge while writing
