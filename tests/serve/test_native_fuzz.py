"""Point statements through ``veil serve`` against plaintext PostgreSQL, fresh values each time.

A seeded random sequence of the statements the wire server answers natively
(``veil.serve.native``): prepared point reads of random columns, counts, UPDATEs
that add to or set a column, one-row INSERTs, and the same reads with their key
written in, each with a fresh value (present and absent keys, NULLs, the
extremes of each type, values past them, unicode), now and then inside a
transaction that commits or rolls back. Each statement runs on both sides; the
answers must be equal, a statement must fail on both or on neither, and the
tables must be equal at the end. The native path must have answered most of
them, or the run proves nothing.

CI runs one seed; others: ``VEIL_NATIVE_FUZZ_SEEDS=1,2,3 pytest tests/serve/test_native_fuzz.py``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from veil_dev.bench.oltp import empty_client_dir
from veil_dev.servers.postgres import ThrowawayCluster

from .test_native_points import Served

pytestmark = pytest.mark.integration

SEEDS = [int(s) for s in os.environ.get("VEIL_NATIVE_FUZZ_SEEDS", "4242").split(",")]
STATEMENTS = int(os.environ.get("VEIL_NATIVE_FUZZ_STATEMENTS", "400"))

POINTS = (
    "CREATE TABLE pt (k INT NOT NULL PRIMARY KEY, a BIGINT, b SMALLINT, c INT, "
    "d DECIMAL(12,2), e DATE, f TEXT, g VARCHAR(20))"
)
COLUMNS = ["k", "a", "b", "c", "d", "e", "f", "g"]
LOG = "CREATE TABLE lg (x INT, y TEXT, z BIGINT)"
WORDS = ["", "a", "ünïcödé ✓", "O'Brien", "tab\there", "line\nbreak", "x" * 20, "%_\\"]
KEYS = 30
# the columns reads return: a few shapes, so that each is run natively again and again
READS = [COLUMNS, ["c"], ["f", "e", "d"], ["g", "a", "b", "k"]]


def _value(rng: random.Random, column: str) -> Any:
    """A value of ``column``'s type: often ordinary, sometimes an extreme or NULL."""
    if rng.random() < 0.08:
        return None
    pick = rng.random() < 0.2
    if column in ("k", "c"):
        return rng.choice([-(2**31), 2**31 - 1, 0]) if pick else rng.randint(-1000, 1000)
    if column == "a":
        return rng.choice([-(2**63), 2**63 - 1, 0]) if pick else rng.randint(-(10**12), 10**12)
    if column == "b":
        return rng.choice([-(2**15), 2**15 - 1]) if pick else rng.randint(-300, 300)
    if column == "d":
        cents = rng.choice([10**12 - 1, -(10**12) + 1]) if pick else rng.randint(-99999, 99999)
        return Decimal(cents) / 100
    if column == "e":
        if pick:
            return rng.choice([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2000, 2, 29)])
        return dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-20000, 30000))
    return rng.choice(WORDS) * (1 if column == "g" else rng.randint(1, 3))


def _key(rng: random.Random) -> Any:
    """A key to look for: mostly present, sometimes absent, past INT, negative or NULL."""
    return rng.choice(
        [rng.randint(1, KEYS)] * 6 + [KEYS + rng.randint(1, 50), -rng.randint(1, 9), 2**40, None]
    )


def _statement(rng: random.Random) -> tuple[str, list[Any], bool]:
    """A statement, its parameters, and whether it is sent with them written in."""
    roll = rng.random()
    if roll < 0.35:
        columns = rng.choice(READS)
        return f"SELECT {', '.join(columns)} FROM pt WHERE k = %s", [_key(rng)], False
    if roll < 0.45:
        key = rng.randint(-3, KEYS + 3)
        columns = rng.choice(READS)
        return f"SELECT {', '.join(columns)} FROM pt WHERE k = {key}", [], True
    if roll < 0.5:
        return "SELECT count(*) FROM pt WHERE k = %s", [_key(rng)], False
    if roll < 0.7:
        column = rng.choice(["a", "b", "c"])
        sign = rng.choice(["+", "-"])
        delta = rng.choice([rng.randint(-50, 50), 2**31 - 1, -(2**31) + 1, 2**40, 0])
        return (
            f"UPDATE pt SET {column} = {column} {sign} %s WHERE k = %s",
            [delta, _key(rng)],
            False,
        )
    if roll < 0.8:
        column = rng.choice(["c", "f", "g"])
        return f"UPDATE pt SET {column} = %s WHERE k = %s", [_value(rng, column), _key(rng)], False
    return (
        "INSERT INTO lg (x, y, z) VALUES (%s, %s, %s)",
        [_value(rng, "c"), _value(rng, "f"), _value(rng, "a")],
        False,
    )


Outcome = tuple[str, Any]


def _run(con: psycopg.Connection[Any], sql: str, params: list[Any], written: bool) -> Outcome:
    """What ``sql`` answered (its rows, or the rows it changed), or that it failed: in
    autocommit as it is, inside a transaction under a savepoint, undone to it if it fails
    (on both sides alike)."""
    inside = con.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    try:
        with con.transaction() if inside else _nothing():
            cursor = con.execute(sql) if written else con.execute(sql, params, prepare=True)
            return ("rows", cursor.fetchall()) if cursor.description else ("done", cursor.rowcount)
    except psycopg.Error:
        return ("failed", None)


def _nothing() -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def _table(con: psycopg.Connection[Any], name: str, order: str) -> list[tuple[Any, ...]]:
    return con.execute(f"SELECT * FROM {name} ORDER BY {order}").fetchall()


def _fill(con: psycopg.Connection[Any], rng: random.Random) -> None:
    con.execute(POINTS)
    con.execute(LOG)
    marks = ", ".join(["%s"] * len(COLUMNS))
    with con.transaction():
        for key in range(1, KEYS + 1):
            row = [key, *(_value(rng, c) for c in COLUMNS[1:])]
            con.execute(f"INSERT INTO pt VALUES ({marks})", row)


@pytest.mark.parametrize("seed", SEEDS)
def test_native_statements_answer_as_postgresql(
    seed: int,
    postgres_cluster: ThrowawayCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema = f"native_fuzz_{seed}_{os.getpid()}"
    plain_url = postgres_cluster.create_schema(f"{schema}_plain")
    client = empty_client_dir(tmp_path / "client", postgres_cluster.create_schema(schema))
    served = Served(client, monkeypatch, audit=True)  # veil serve's default
    try:
        with (
            psycopg.connect(served.dsn, autocommit=True) as veil,
            psycopg.connect(plain_url, autocommit=True) as plain,
        ):
            for con in (veil, plain):
                _fill(con, random.Random(seed))
            rng = random.Random(seed + 1)
            open_transaction = False
            for number in range(STATEMENTS):
                if not open_transaction and rng.random() < 0.1:
                    for con in (veil, plain):
                        con.execute("BEGIN")
                    open_transaction = True
                elif open_transaction and rng.random() < 0.1:
                    verb = rng.choice(["COMMIT", "ROLLBACK"])
                    for con in (veil, plain):
                        con.execute(verb)
                    open_transaction = False
                sql, params, written = _statement(rng)
                got = _run(veil, sql, params, written)
                want = _run(plain, sql, params, written)
                assert got == want, (seed, number, sql, params, got, want)
            if open_transaction:
                for con in (veil, plain):
                    con.execute("COMMIT")
            assert _table(veil, "pt", "k") == _table(plain, "pt", "k"), seed
            assert sorted(_table(veil, "lg", "x"), key=repr) == sorted(
                _table(plain, "lg", "x"), key=repr
            ), seed
    finally:
        served.stop()
    assert served.runs > STATEMENTS // 4, f"only {served.runs} statements ran natively"
