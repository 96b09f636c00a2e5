"""ReadyForQuery after ROLLBACK TO SAVEPOINT in a failed transaction: 'T', as PostgreSQL says.

psycopg reads the status from every ReadyForQuery (``info.transaction_status``);
its server cursor speaks the extended protocol, its client cursor the simple one.
Each is checked through ``veil serve`` on DuckDB and PostgreSQL servers, and the
same statements on plaintext PostgreSQL give the same statuses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from veil.load.loader import load

psycopg = pytest.importorskip("psycopg")
IDLE, INTRANS, INERROR = (
    psycopg.pq.TransactionStatus.IDLE,
    psycopg.pq.TransactionStatus.INTRANS,
    psycopg.pq.TransactionStatus.INERROR,
)


@pytest.fixture
def served(backend_url: str, tmp_path: Path) -> Iterator[str]:
    """A ``veil serve`` of a fresh client directory; yields its URL."""
    from veil._native import WireServer
    from veil.serve.engine import Engine

    source = tmp_path / "source"
    source.mkdir()
    pq.write_table(pa.table({"x": pa.array([1, 2], pa.int64())}), source / "t.parquet")
    load(str(source), backend_url, str(tmp_path / "client"), progress=lambda _: None)
    engine = Engine(tmp_path / "client")
    server = WireServer(engine, "127.0.0.1:0", None, None, True)
    try:
        yield f"postgresql://app@127.0.0.1:{server.address.rsplit(':', 1)[1]}/veil"
    finally:
        server.stop()
        engine.close()


def statuses(url: str, cursor_factory: Any) -> list[object]:
    """The transaction status after each statement of a savepoint's recovery."""
    seen = []
    with psycopg.connect(url, autocommit=True, cursor_factory=cursor_factory) as con:
        cur = con.cursor()
        for sql in (
            "BEGIN",
            "SAVEPOINT s",
            "SELECT no_such_column FROM t",
            "ROLLBACK TO SAVEPOINT s",
            "SELECT count(*) FROM t",
            "SELECT no_such_column FROM t",
            "ROLLBACK TO no_such_savepoint",
            "ROLLBACK TO s",
            "ROLLBACK WORK TO SAVEPOINT s",
            "COMMIT",
        ):
            with contextlib.suppress(psycopg.Error):
                cur.execute(sql)
            seen.append(con.info.transaction_status)
    return seen


EXPECTED = [INTRANS, INTRANS, INERROR, INTRANS, INTRANS, INERROR, INERROR, INTRANS, INTRANS, IDLE]


@pytest.mark.parametrize("protocol", ["extended", "simple"])
def test_rollback_to_savepoint_reports_in_transaction(served: str, protocol: str) -> None:
    factory = psycopg.Cursor if protocol == "extended" else psycopg.ClientCursor
    assert statuses(served, factory) == EXPECTED


@pytest.mark.postgres
def test_plaintext_postgresql_reports_the_same(postgres_cluster: Any) -> None:
    url = postgres_cluster.create_schema("plain_savepoint_status")
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TABLE t (x BIGINT)")
    assert statuses(url, psycopg.Cursor) == EXPECTED
