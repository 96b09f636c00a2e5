"""``veil load --source postgresql://...``: a live PostgreSQL database moved into Veil.

The source is a real PostgreSQL schema with the types applications use; Veil's
answers over the loaded copy equal PostgreSQL's own, and a load taken while the
application writes sees one snapshot (every table at the same moment).
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import psycopg
import pytest

from veil.dbapi import connect
from veil.errors import VeilError
from veil.load.loader import load

SOURCE_TABLES = """
CREATE TABLE customers (id integer PRIMARY KEY, "Name" text NOT NULL, since date,
    balance numeric(12, 2), ratio numeric, active boolean, tag uuid, profile jsonb,
    seen timestamptz, note varchar(40));
CREATE TABLE orders (id bigint PRIMARY KEY, customer integer REFERENCES customers(id),
    amount double precision, placed timestamp, payload bytea);
INSERT INTO customers
SELECT i, 'customer ' || i, DATE '2020-01-01' + i, (i * 3.25)::numeric(12, 2), i / 7.0,
       i % 2 = 0, md5(i::text)::uuid, jsonb_build_object('n', i), TIMESTAMPTZ '2024-01-01 00:00+00' + i * INTERVAL '1 hour',
       CASE WHEN i % 5 = 0 THEN NULL ELSE 'note ' || i END
FROM generate_series(1, 300) AS i;
INSERT INTO orders
SELECT i, 1 + i % 300, i * 1.5, TIMESTAMP '2024-02-01' + i * INTERVAL '1 minute', decode(md5(i::text), 'hex')
FROM generate_series(1, 2000) AS i;
"""


@pytest.fixture
def source_url(postgres_url: str) -> str:
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(SOURCE_TABLES)
    return postgres_url


def test_a_postgres_database_loads_and_answers_as_postgres_does(
    source_url: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "veil", "load", "--source", source_url,
         "--server", f"duckdb:///{tmp_path / 'server.duckdb'}",
         "--client-dir", str(tmp_path / "client")],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "customers.ratio" in done.stderr and "DOUBLE" in done.stderr  # said, not silent
    query = (
        'SELECT c.id, c."Name", c.since, c.balance, c.active, c.tag, c.seen, c.note, '
        "count(o.id), sum(o.amount) FROM customers c LEFT JOIN orders o ON o.customer = c.id "
        "WHERE c.id % 37 = 1 GROUP BY ALL ORDER BY c.id"
    )
    with psycopg.connect(source_url) as con:
        want = con.execute(query.replace("GROUP BY ALL", "GROUP BY c.id")).fetchall()
    with connect(str(tmp_path / "client")) as con:
        got = con.execute(query).fetchall()
        assert con.execute("SELECT sum(ratio), min(profile::VARCHAR) FROM customers").fetchone()
        payload = con.execute("SELECT payload FROM orders WHERE id = 7").fetchone()
    assert payload is not None and bytes(payload[0]) == hashlib.md5(b"7").digest()
    assert len(got) == len(want) and got
    for mine, theirs in zip(got, want, strict=True):
        assert mine[:3] == theirs[:3] and mine[4:8] == theirs[4:8]
        assert decimal.Decimal(mine[3]) == theirs[3]
        assert mine[8] == theirs[8] and float(mine[9] or 0) == pytest.approx(float(theirs[9] or 0))
    assert isinstance(got[0][5], uuid.UUID) and isinstance(got[0][6], dt.datetime)
    server_bytes = (tmp_path / "server.duckdb").read_bytes()
    assert b"customer 37" not in server_bytes and b"note 38" not in server_bytes


def test_a_load_during_writes_sees_one_snapshot(source_url: str, tmp_path: Path) -> None:
    stop, failures = threading.Event(), []

    def write() -> None:  # each transaction adds a customer and an order of theirs
        try:
            with psycopg.connect(source_url, autocommit=False) as con:
                i = 10_000
                while not stop.is_set():
                    con.execute("INSERT INTO customers (id, \"Name\") VALUES (%s, 'w')", [i])
                    con.execute("INSERT INTO orders (id, customer) VALUES (%s, %s)", [i, i])
                    con.commit()
                    i += 1
        except Exception as exc:
            failures.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        load(source_url, f"duckdb:///{tmp_path / 's.duckdb'}", str(tmp_path / "c"),
             progress=lambda _: None)  # fmt: skip
    finally:
        stop.set()
        writer.join()
    assert not failures, failures
    with connect(str(tmp_path / "c")) as con:
        customers = con.execute("SELECT count(*) FROM customers WHERE id >= 10000").fetchone()
        orders = con.execute("SELECT count(*) FROM orders WHERE id >= 10000").fetchone()
    assert customers == orders  # one snapshot: every new customer's order is there too


def test_an_unreachable_source_is_refused_in_words(tmp_path: Path) -> None:
    with pytest.raises(VeilError, match="cannot read the source database"):
        load("postgresql://nobody@127.0.0.1:1/none", f"duckdb:///{tmp_path / 's.duckdb'}",
             str(tmp_path / "c"), progress=lambda _: None)  # fmt: skip
    assert not (tmp_path / "c").exists()
