"""One-row INSERTs over the wire meet their kept shape (``veil.session.point_inserts``).

pgbench ``-M simple`` writes its values into the INSERT's text, negative ones
as ``-2345``; ``-M prepared`` binds them. Both reach the session as parameters
of one shape, and the rows read back are the ones written, whatever the path.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from veil.serve import shapes
from veil.session import point_inserts
from veil.sql.literals import normalized
from veil_dev.bench.oltp import empty_client_dir, served

pytestmark = pytest.mark.integration

TABLE = "CREATE TABLE hist (tid INT, bid INT, aid BIGINT, delta INT, mtime TIMESTAMP, note CHAR(4))"


@pytest.fixture
def dsn(backend_url: str, tmp_path: Path) -> Iterator[str]:
    with served(empty_client_dir(tmp_path / "client", backend_url)) as port:
        yield f"host=127.0.0.1 port={port} user=bench dbname=veil"


def _kept_sources(table: str) -> list[list[point_inserts.Source]]:
    with point_inserts._KEPT.lock:
        kept = list(point_inserts._KEPT.entries.values())
    return [k.sources for k in kept if k is not None and k.table.name == table]


@pytest.mark.parametrize("prepare", [False, True])
def test_pgbench_history_rows(dsn: str, prepare: bool) -> None:
    rng = random.Random(41)
    rows = [
        (rng.randint(1, 10), 1, rng.randint(1, 10**6), rng.randint(-5000, 5000)) for _ in range(30)
    ]
    rows += [(1, 1, 2**40, -(2**31)), (2, 2, -(2**40), 2**31 - 1), (3, 3, 0, 0)]
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute(TABLE)
        before = con.execute("SELECT CAST(now() AS TIMESTAMP)").fetchone()
        assert before is not None
        for row in rows:
            if prepare:
                con.execute(
                    "INSERT INTO hist (tid, bid, aid, delta, mtime) "
                    "VALUES (%s, %s, %s, %s, CURRENT_TIMESTAMP)",
                    row,
                    prepare=True,
                )
            else:  # values written into the text, as pgbench -M simple sends them
                values = ", ".join(str(v) for v in row)
                con.execute(
                    f"INSERT INTO hist (tid, bid, aid, delta, mtime) "
                    f"VALUES ({values}, CURRENT_TIMESTAMP)"
                )
        got = con.execute("SELECT tid, bid, aid, delta, mtime, note FROM hist").fetchall()
    assert sorted(r[:4] for r in got) == sorted(rows)
    assert all(
        r[5] is None and dt.timedelta(0) <= r[4] - before[0] < dt.timedelta(minutes=5) for r in got
    )
    kept = _kept_sources("hist")
    assert kept, "no INSERT took the kept shape"
    if not prepare:  # negative deltas came as -?: their shape too
        assert any(s.negated for sources in kept for s in sources)


def test_insert_values_are_read_off_the_text() -> None:
    """``normalized`` takes an INSERT's VALUES, never its head."""
    found = normalized("INSERT INTO t2 (a1, b) VALUES (12, -3, 'x', CURRENT_TIMESTAMP)")
    assert found is not None
    assert found.text == "INSERT INTO t2 (a1, b) VALUES (?, -?, ?, CURRENT_TIMESTAMP)"
    assert [str(v) for v in found.values] == ["12", "3", "x"]
    assert [found.text[p] for p in found.places] == ["?", "?", "?"]
    assert normalized("INSERT INTO t SELECT 1") is None
    assert shapes.integers("INSERT INTO t VALUES (1, 'x')") is None  # a string: written in
