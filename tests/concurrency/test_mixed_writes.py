"""INSERT, UPDATE and DELETE from several clients at once, on overlapping rows.

Accounts 0..9 hold money that UPDATEs move between pairs of them; rows from 1000 up
are inserted (each client its own ids), tagged by UPDATEs (client k tags the ids k mod 3)
and deleted by every client.
Afterwards: the money is all there, no id appears twice, the rows number those
inserted less those deleted (each counted once by its statement), and no row was
tagged more often than the statements tagging its residue succeeded.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from tests.concurrency.conftest import race, rows

ACCOUNTS = 10
OPENING = 50
CLIENTS = 3
ROUNDS = 4
BATCH = 5  # rows a client inserts per round


def _statements(client: int) -> list[str]:
    """Per round: insert a batch, move money, tag the new rows, delete some of them."""
    rng = random.Random(client)
    statements = []
    for round_ in range(ROUNDS):
        first = 1000 + 100 * client + BATCH * round_
        values = ", ".join(f"({i}, 0, 0)" for i in range(first, first + BATCH))
        a, b = rng.sample(range(ACCOUNTS), 2)
        statements += [
            f"INSERT INTO m VALUES {values}",
            f"UPDATE m SET bal = bal + CASE WHEN id = {a} THEN -3 ELSE 3 END WHERE id IN ({a}, {b})",
            f"UPDATE m SET tag = tag + 1 WHERE id >= 1000 AND id % {CLIENTS} = {client}",
            # rows of every client, the same residues from every client: deletes overlap
            f"DELETE FROM m WHERE id >= 1000 AND id % 4 = {rng.randrange(4)}",
        ]
    return statements


def test_concurrent_inserts_updates_and_deletes_keep_their_invariants(
    load_tables: Callable[[dict[str, pa.Table]], Path],
) -> None:
    ids = pa.array(range(ACCOUNTS), pa.int64())
    zeros = pa.array([0] * ACCOUNTS, pa.int64())
    opening = pa.array([OPENING] * ACCOUNTS, pa.int64())
    client = load_tables({"m": pa.table({"id": ids, "bal": opening, "tag": zeros})})
    rows(client, "SELECT count(*) FROM m WHERE id IN (1, 2) AND id >= 1 AND id % 4 = 1")
    done = race(client, [_statements(c) for c in range(CLIENTS)])

    assert set(done.failures()) <= {"SerializationError"}, done.failures()
    inserted = sum(d.rowcount or 0 for d in done.succeeded("INSERT"))
    deleted = sum(d.rowcount or 0 for d in done.succeeded("DELETE"))
    assert all(d.rowcount == 2 for d in done.succeeded("UPDATE m SET bal"))
    assert rows(client, "SELECT count(*), count(DISTINCT id), sum(bal) FROM m") == [
        (ACCOUNTS + inserted - deleted, ACCOUNTS + inserted - deleted, ACCOUNTS * OPENING)
    ]
    assert rows(client, "SELECT count(*) FROM m WHERE id >= 1000 AND bal <> 0") == [(0,)]
    tagged = rows(client, f"SELECT id % {CLIENTS}, max(tag) FROM m WHERE id >= 1000 GROUP BY 1")
    for number, most in tagged:
        tags = [d for d in done.succeeded("UPDATE m SET tag") if d.client == number]
        assert most <= len(tags)
