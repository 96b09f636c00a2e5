"""The types applications declare, as PostgreSQL spells them (issue 38, item 5).

FLOAT(p), REAL, DOUBLE PRECISION, NUMERIC(p, s) (wide ones too), timestamptz,
uuid, json/jsonb, bytea, interval and arrays: each round-trips through the
DB-API on both backends (CREATE TABLE, INSERT, SELECT with WHERE equality,
UPDATE), through ``veil load`` from Parquet, and through the wire in text and
binary formats, and no plaintext reaches the server.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from tests.load.test_ddl import con  # noqa: F401 (the fixture: a fresh client on each backend)
from veil._native import WireServer
from veil.design.model import DET
from veil.encoding import SqlType, canonical_json, decode, encode, normalize_type
from veil.load.loader import load
from veil.serve.engine import Engine

U1, U2 = uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)
STAMP = dt.datetime(2024, 1, 2, 1, 4, 5, 123456, tzinfo=dt.UTC)
CANARY = "zq-canary-7f3a"

TABLE = (
    "CREATE TABLE app (id BIGINT, f FLOAT(53), r FLOAT(10), d DOUBLE PRECISION, "
    "n NUMERIC(30,5), ts timestamptz, u uuid, j jsonb, b bytea, iv interval, "
    "a integer[], s text[]) WITH (det = 'id, n, ts, u, j, b')"
)


# -- encodings ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("UUID", [str(U1), None, str(U2).upper(), "{" + U2.hex + "}"]),
        ("BLOB", [b"", None, bytes(range(256)), b"\0" * 100_000]),
        ("JSON", ['{"b": 1, "a": [1.50, null]}', None, '"x"', "1e2", "[]"]),
        ("DECIMAL(38,10)", [decimal.Decimal("-" + "9" * 28 + "." + "9" * 10), None]),
        ("TIMESTAMPTZ", [STAMP, None]),
        ("INTERVAL", [pa.scalar((1, -3, 7000), pa.month_day_nano_interval()), None]),
        ("VARCHAR[]", [['a,"b', None, ""], None, []]),
        ("INTEGER[][]", [[[1], [2, None]], None]),
    ],
)
def test_every_value_round_trips(name: str, values: list[object]) -> None:
    sql_type = SqlType(normalize_type(name))
    plain = pa.array(values) if name in ("UUID", "JSON") else pa.array(values, _arrow(name))
    back = decode(encode(plain, sql_type), sql_type)
    want = encode(plain, sql_type)
    assert encode(back, sql_type).equals(want)
    assert back.null_count == plain.null_count


def _arrow(name: str) -> pa.DataType:
    return SqlType(normalize_type(name)).arrow_type()


def test_json_is_kept_as_jsonb_keeps_it() -> None:
    assert canonical_json('{"bb": 1, "a": {"y": 2, "x": 3}, "bb": 4}') == (
        '{"a": {"x": 3, "y": 2}, "bb": 4}'
    )
    assert canonical_json("1.50") == "1.50" and canonical_json("1e2") == "100"


def test_postgres_spellings() -> None:
    assert [normalize_type(t) for t in ("float8", "double precision", "bytea", "jsonb")] == [
        "DOUBLE", "DOUBLE", "BLOB", "JSON",
    ]  # fmt: skip
    assert normalize_type("TIMESTAMP WITH TIME ZONE") == "TIMESTAMPTZ"
    assert not SqlType("INTERVAL").has_equality and SqlType("UUID").has_equality


# -- DB-API, both backends -------------------------------------------------------


def test_dbapi_round_trip(con: veil.dbapi.Connection) -> None:  # noqa: F811
    con.execute(TABLE)
    con.execute(
        "INSERT INTO app VALUES (1, 1.5, 2.5, -0.25, 1234567890123456789012345.5, "
        "TIMESTAMPTZ '2024-01-02 03:04:05.123456+02', ?, ?, ?, "
        "INTERVAL '1 month 2 days 3 hours', [1, 2, NULL], ['x', ?])",
        [str(U1), '{"b": 1, "a": [2]}', b"\x00\xff", CANARY],
    )
    con.execute("INSERT INTO app (id, u, b, j) VALUES (2, ?, ?, '[]')", [U2, b""])
    con.execute("INSERT INTO app (id) VALUES (3)")
    rows = con.execute("SELECT * FROM app ORDER BY id").fetchall()
    assert rows[0] == (
        1, 1.5, 2.5, -0.25, decimal.Decimal("1234567890123456789012345.50000"), STAMP, U1,
        {"a": [2], "b": 1}, b"\x00\xff", dt.timedelta(days=32, hours=3), [1, 2, None],
        ["x", CANARY],
    )  # fmt: skip
    assert rows[1][6:9] == (U2, [], b"") and rows[2][1:] == (None,) * 11
    table = con.session.design.tables["app"]
    for column in ("n", "ts", "u", "j", "b"):
        assert table.find(column, DET) is not None, column
    for where, params in [
        ("u = ?", [str(U2)]),
        ("u = ?", [U2]),
        ("j = '[ ]'", []),
        ("b = ?", [b""]),
    ]:
        assert con.execute(f"SELECT id FROM app WHERE {where}", params).fetchall() == [(2,)]
    for where in [
        'j = \'{"a":[2], "b":1}\'',
        "ts = TIMESTAMPTZ '2024-01-02 01:04:05.123456+00'",
        "n = 1234567890123456789012345.5",
        "iv = INTERVAL '32 days 3 hours'",  # fetched and filtered on the client
        "a = [1, 2, NULL]",
        "list_contains(s, 'x')",
        "f = CAST(1.5 AS FLOAT(53))",
    ]:
        assert con.execute(f"SELECT id FROM app WHERE {where}").fetchall() == [(1,)], where
    con.execute(
        "UPDATE app SET j = '{\"z\": true}', u = NULL, iv = INTERVAL '5 minutes' WHERE id = 1"
    )
    assert con.execute("SELECT j, u, iv FROM app WHERE id = 1").fetchall() == [
        ({"z": True}, None, dt.timedelta(minutes=5))
    ]
    assert con.execute("SELECT id FROM app WHERE j = '{\"z\":true}'").fetchall() == [(1,)]


# -- veil load from Parquet ------------------------------------------------------


def test_load_from_parquet(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    table = pa.table(
        {
            "id": [1, 2],
            "u": pa.array([U1.bytes, None], pa.uuid()),
            "b": pa.array([b"\x01", b""]),
            "ts": pa.array([STAMP, None], pa.timestamp("us", tz="UTC")),
            "a": pa.array([[1.5], None], pa.list_(pa.float64())),
            "n": pa.array([decimal.Decimal("1" * 25), None], pa.decimal128(30, 0)),
        }
    )
    pq.write_table(table, source / "things.parquet")
    load(str(source), f"duckdb://{tmp_path / 's.duckdb'}", str(tmp_path / "c"), progress=print)
    with veil.connect(tmp_path / "c") as loaded:
        rows = loaded.execute("SELECT * FROM things ORDER BY id").fetchall()
    assert rows == [
        (1, U1, b"\x01", STAMP, [1.5], decimal.Decimal("1" * 25)),
        (2, None, b"", None, None, None),
    ]


# -- the wire: psycopg, text and binary ------------------------------------------


@pytest.fixture
def wire(tmp_path: Path) -> Iterator[psycopg.Connection]:
    source = tmp_path / "source"
    source.mkdir()
    (source / "people.csv").write_text("id,name\n1,ann\n")
    load(str(source), f"duckdb://{tmp_path / 's.duckdb'}", str(tmp_path / "c"), progress=print)
    server = WireServer(Engine(tmp_path / "c"), "127.0.0.1:0", None, None, True)
    port = server.address.rsplit(":", 1)[1]
    try:
        with psycopg.connect(f"host=127.0.0.1 port={port} user=a dbname=x", autocommit=True) as c:
            yield c
    finally:
        server.stop()


def test_wire_text_and_binary(wire: psycopg.Connection) -> None:
    wire.execute(
        "CREATE TABLE app (id bigint, f float(53), ts timestamptz, u uuid, j jsonb, "
        "b bytea, iv interval, n numeric(30,5), m numeric)"
    )
    wire.execute(
        "INSERT INTO app VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (1, 1.5, STAMP, U1, '{"b": 1, "a": [2]}', b"\x00\xff", dt.timedelta(days=1, hours=2),
         decimal.Decimal("12345678901234567890.5"), decimal.Decimal("3.25")),
    )  # fmt: skip
    want = (
        1, 1.5, STAMP, U1, {"a": [2], "b": 1}, b"\x00\xff", dt.timedelta(days=1, hours=2),
        decimal.Decimal("12345678901234567890.50000"), decimal.Decimal("3.2500000000"),
    )  # fmt: skip
    for binary in (False, True):
        cursor = wire.cursor(binary=binary)
        assert cursor.execute("SELECT * FROM app").fetchall() == [want], binary
    assert wire.execute("SELECT id FROM app WHERE u = %s", (U1,)).fetchall() == [(1,)]
    assert wire.execute("SELECT id FROM app WHERE b = %s", (b"\x00\xff",)).fetchall() == [(1,)]
    assert wire.execute("SELECT id FROM app WHERE ts = %s", (STAMP,)).fetchall() == [(1,)]
