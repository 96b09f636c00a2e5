"""Clients deleting overlapping rows at once: each row is deleted once, and counted once."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from tests.concurrency.conftest import race, rows

ROWS = 120
CLIENTS = 3


def _deletes(seed: int) -> list[tuple[str, set[int]]]:
    """DELETE statements over rows other clients delete too, each with the ids it matches.

    Four of the six residues mod 6 below 90 (clients share some), then a range of 30.
    """
    rng = random.Random(seed)
    by_residue = [
        (f"DELETE FROM r WHERE id % 6 = {k} AND id < 90", {i for i in range(90) if i % 6 == k})
        for k in rng.sample(range(6), 4)
    ]
    low = rng.randrange(0, ROWS - 30)
    ranged = (f"DELETE FROM r WHERE id BETWEEN {low} AND {low + 29}", set(range(low, low + 30)))
    return [*by_residue[:2], ranged, *by_residue[2:]]


def test_concurrent_deletes_remove_each_row_once(
    load_tables: Callable[[dict[str, pa.Table]], Path],
) -> None:
    ids = pa.array(range(ROWS), pa.int64())
    client = load_tables({"r": pa.table({"id": ids, "v": pa.array([7] * ROWS, pa.int64())})})
    assert rows(client, "SELECT count(*) FROM r WHERE id BETWEEN 0 AND 5") == [(6,)]
    plans = [_deletes(seed) for seed in range(CLIENTS)]
    matches = {sql: matched for plan in plans for sql, matched in plan}
    done = race(client, [[sql for sql, _ in plan] for plan in plans])

    assert set(done.failures()) <= {"SerializationError"}, done.failures()
    deleted = done.succeeded()
    gone: set[int] = set().union(*(matches[d.sql] for d in deleted))
    remaining = [i for (i,) in rows(client, "SELECT id FROM r ORDER BY id")]
    assert remaining == sorted(set(range(ROWS)) - gone)
    assert sum(d.rowcount or 0 for d in deleted) == len(gone)  # no row counted twice
    assert rows(client, "SELECT count(*), count(DISTINCT id), sum(v) FROM r") == [
        (len(remaining), len(remaining), 7 * len(remaining) or None)
    ]
