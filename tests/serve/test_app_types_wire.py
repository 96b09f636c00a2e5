"""The application types through the wire and the DB-API, beside a real PostgreSQL (issue 38, item 5).

Every test sends the same statements through the same client (psycopg) to a
plaintext PostgreSQL 15 and to ``veil serve``, and requires the same answers:
Python values, the raw fields of text and binary results byte for byte, their
type OIDs, COPY's lines, ParameterStatus and SQLSTATEs. The DB-API
(``veil.connect``) must give the Python values psycopg gives.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg.types.json import Jsonb

import veil
from veil._native import WireServer
from veil.load.loader import load
from veil.serve.engine import Engine
from veil.session.session import Session
from veil_dev.servers.postgres import find_bin_dir

pytestmark = pytest.mark.postgres

U1, U2 = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), uuid.UUID(int=2**128 - 1)
STAMP = dt.datetime(2024, 1, 2, 1, 4, 5, 123456, tzinfo=dt.UTC)
SUMMER = dt.datetime(2024, 7, 1, 22, 30, tzinfo=dt.UTC)
CANARY = "zq-canary-wire-51c"

COLUMNS = (
    "id bigint, ts timestamptz, u uuid, j jsonb, b bytea, iv interval, n numeric(30,5), "
    "f float8, au uuid[], aj jsonb[], ats timestamptz[], ab bytea[], an numeric(10,2)[], "
    "ai integer[], at text[], aiv interval[]"
)
ROWS = [
    (
        1, STAMP, U1, Jsonb({"b": 1, "a": [2, None], "zz": CANARY}), b"\x00\xff\\",
        dt.timedelta(days=1, hours=2, microseconds=5), decimal.Decimal("12345678901234567890.5"),
        1.5, [U1, None, U2], [Jsonb({"k": [1]}), None, Jsonb("x")], [STAMP, None, SUMMER],
        [b"", None, b"\x01,\x02"], [decimal.Decimal("1.5"), None, decimal.Decimal("-2")],
        [1, None, -3], ['a,"b', None, "", "NULL", "x y", CANARY, "{}", "back\\slash"],
        [dt.timedelta(minutes=5), None, dt.timedelta(days=-1, seconds=1)],
    ),
    (2, SUMMER, U2, Jsonb([]), b"", dt.timedelta(0), decimal.Decimal("-0.00001"), -0.25,
     [], [], [], [], [], [], [], []),
    (3,) + (None,) * 15,
]  # fmt: skip
NAMES = [c.split()[0] for c in COLUMNS.split(", ")]


@pytest.fixture
def plain(postgres_cluster: Any) -> Iterator[psycopg.Connection]:
    """A plaintext PostgreSQL connection, in a fresh schema, its TimeZone UTC as Veil's."""
    url = postgres_cluster.create_schema(f"plain_{uuid.uuid4().hex[:8]}")
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("SET TimeZone = 'UTC'")
        yield connection


@pytest.fixture
def served(tmp_path: Path, backend_url: str) -> Iterator[WireServer]:
    """veil serve over a client directory whose server is DuckDB or PostgreSQL."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "people.csv").write_text("id,name\n1,ann\n")
    load(str(source), backend_url, str(tmp_path / "c"), progress=print)
    engine = Engine(tmp_path / "c")
    server = WireServer(engine, "127.0.0.1:0", None, None, True)
    try:
        yield server
    finally:
        server.stop()
        engine.close()  # the pooled sessions' server connections


@pytest.fixture
def wire(served: WireServer) -> Iterator[psycopg.Connection]:
    port = served.address.rsplit(":", 1)[1]
    with psycopg.connect(f"host=127.0.0.1 port={port} user=a dbname=x", autocommit=True) as c:
        yield c


@pytest.fixture
def both(plain: psycopg.Connection, wire: psycopg.Connection) -> list[psycopg.Connection]:
    return [plain, wire]


def raw(
    connection: psycopg.Connection, sql: str, params: Any = None, *, binary: bool = False
) -> tuple[list[int], list[list[bytes | None]]]:
    """The result's type OIDs and its fields as they came off the wire."""
    cursor = connection.cursor(binary=binary)
    cursor.execute(sql, params)
    result = cursor.pgresult
    assert result is not None
    fields = [
        [result.get_value(r, c) for c in range(result.nfields)] for r in range(result.ntuples)
    ]
    return [result.ftype(c) for c in range(result.nfields)], fields


def same(both: list[psycopg.Connection], sql: str, params: Any = None) -> list[Any]:
    """The rows of ``sql`` from PostgreSQL, required to be Veil's in values and raw fields."""
    answers = []
    for binary in (False, True):
        plain, veiled = (raw(c, sql, params, binary=binary) for c in both)
        assert veiled[0] == plain[0], (sql, binary)
        differ = [
            (r, c, want, got)
            for r, (row_want, row_got) in enumerate(zip(plain[1], veiled[1], strict=True))
            for c, (want, got) in enumerate(zip(row_want, row_got, strict=True))
            if want != got
        ]
        assert not differ, (sql, binary, differ)
        rows = [c.cursor(binary=binary).execute(sql, params).fetchall() for c in both]
        assert rows[1] == rows[0], (sql, binary)
        answers.append(rows[0])
    assert answers[0] == answers[1]
    return answers[0]


def _create(both: list[psycopg.Connection], binary: bool = False) -> None:
    marks = ", ".join(["%s"] * len(NAMES))
    for connection in both:
        connection.execute(f"CREATE TABLE app ({COLUMNS})")
        connection.cursor(binary=binary).executemany(f"INSERT INTO app VALUES ({marks})", ROWS)


# -- values, text and binary, both directions --------------------------------------


@pytest.mark.parametrize("binary", [False, True], ids=["text-params", "binary-params"])
def test_every_column_as_postgres_gives_it(
    both: list[psycopg.Connection], binary: bool, tmp_path: Path
) -> None:
    _create(both, binary)
    rows = same(both, "SELECT * FROM app ORDER BY id")
    assert rows[0][2] == U1 and rows[0][8] == [U1, None, U2] and rows[1][8] == []
    for name in NAMES[1:]:
        same(both, f"SELECT id, {name} FROM app WHERE {name} IS NOT NULL ORDER BY id")
    for where in ["u = %s", "au = %s", "b = %s"]:
        value = {"u": U1, "au": [U1, None, U2], "b": b"\x00\xff\\"}[where.split()[0]]
        assert same(both, f"SELECT id FROM app WHERE {where}", (value,)) == [(1,)]
    assert_no_plaintext(tmp_path / "c")


def assert_no_plaintext(client_dir: Path) -> None:
    """The server's tables hold no value sent through the wire in any recognisable form."""
    session = Session(str(client_dir))
    try:
        backend = session.backend
        needles = [CANARY.encode(), str(U1).encode(), U1.bytes, U1.hex.encode()]
        seen = 0
        for name in backend.table_names():
            table = backend.execute(f'SELECT * FROM "{name}"')
            for column in table.columns:
                values = [v for v in column.to_pylist() if v is not None]
                if pa.types.is_string(column.type):  # Veil's own names (c_..., t_...)
                    values = [v.encode() for v in values]
                if values and isinstance(values[0], bytes):
                    blob = b"".join(values)
                    seen += len(blob)
                    assert not any(n in blob for n in needles), name
        assert seen > 0, "no ciphertexts were read"
    finally:
        session.close()


def test_array_parameters_binary(both: list[psycopg.Connection]) -> None:
    _create(both)
    for value, cast in [
        ([U2, None], "uuid[]"),
        ([STAMP], "timestamptz[]"),
        ([decimal.Decimal("1.25"), None], "numeric(10,2)[]"),
        ([b"\x00", b""], "bytea[]"),
        ([1, 2, None], "int8[]"),
        (["a b", None, ""], "text[]"),
        ([dt.timedelta(hours=1)], "interval[]"),
        ([Jsonb({"a": 1})], "jsonb[]"),
    ]:
        same(both, f"SELECT CAST(%s AS {cast}) AS v", (value,))
        for connection in both:
            connection.cursor(binary=True).execute(
                "UPDATE app SET au = %s WHERE id = 3", ([U2, None],)
            )
    assert same(both, "SELECT au FROM app WHERE id = 3") == [([U2, None],)]


# -- TimeZone ----------------------------------------------------------------------


def test_timezone_set_show_and_reported(both: list[psycopg.Connection]) -> None:
    _create(both)
    for setting, shown in [
        ("SET TimeZone = 'Asia/Kolkata'", "Asia/Kolkata"),
        ("SET TIME ZONE 'America/St_Johns'", "America/St_Johns"),
        ("SET timezone TO 'Europe/Paris'", "Europe/Paris"),
        ("SET TIME ZONE 'UTC'", "UTC"),
        ("set time zone 'Pacific/Chatham'", "Pacific/Chatham"),
    ]:
        for connection in both:
            connection.execute(setting)
            assert connection.info.parameter_status("TimeZone") == shown, setting
        assert same(both, "SHOW TimeZone") == [(shown,)]
        assert same(both, "SHOW TIME ZONE") == [(shown,)]
        assert same(both, "SELECT current_setting('TimeZone') AS tz") == [(shown,)]
        rows = same(both, "SELECT id, ts, ats FROM app ORDER BY id")
        assert rows[0][1] == STAMP and str(rows[0][1].tzinfo) == shown
        # a time without an offset is the session's local time, stored as its instant
        for connection in both:
            connection.execute(
                "INSERT INTO app (id, ts) VALUES (10, '2024-03-31 02:30:00'), "
                "(11, TIMESTAMPTZ '2024-10-27 02:30:00'), (12, CAST(%s AS timestamptz))",
                ("2024-01-01 00:00:00",),
            )
        same(both, "SELECT id, ts FROM app WHERE id >= 10 ORDER BY id")
        for connection in both:
            connection.execute("DELETE FROM app WHERE id >= 10")
    for connection in both:  # each server's own default: Etc/UTC here, UTC for Veil
        connection.execute("RESET TimeZone")
        shown = connection.execute("SHOW TimeZone").fetchone()
        assert shown is not None and shown[0] in ("UTC", "Etc/UTC")
        assert connection.info.parameter_status("TimeZone") == shown[0]


def test_bad_timezone_is_refused(both: list[psycopg.Connection]) -> None:
    assert both[1].info.parameter_status("TimeZone") == "UTC"  # as SHOW says, from the start
    assert both[1].info.parameter_status("DateStyle") == "ISO, MDY"
    for connection in both:
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            connection.execute("SET TimeZone = 'Mars/Olympus'")
        assert connection.execute("SHOW TimeZone").fetchone() == ("UTC",)


PSQL_SCRIPT = r"""
SET TIME ZONE 'America/St_Johns';
SHOW TimeZone;
CREATE TABLE t (id int, ts timestamptz, au uuid[], iv interval, j jsonb, b bytea, ab bytea[]);
\copy t FROM stdin
1\t2024-01-02 01:04:05.123456+00\t{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11,NULL}\t-1 days +00:00:01\t{"b": 1.0, "a": 1e3, "ab": [-0.0]}\t\\x00ff\t{"\\\\x01",NULL}
2\t2024-07-01 12:00:00\t{}\t1 year 2 mons -3 days -00:00:00.0015\t[]\t\N\t\N
\.
SELECT * FROM t ORDER BY id;
\copy (SELECT * FROM t ORDER BY id) TO stdout (FORMAT csv, HEADER)
UPDATE t SET ts = '2024-11-03 01:30:00', iv = iv * 2 WHERE id = 2;
RESET TimeZone;
SET TimeZone = 'UTC';
SELECT id, ts, iv FROM t ORDER BY id;
"""


def test_psql_script(both: list[psycopg.Connection]) -> None:
    """psql (the simple protocol, \\copy, aligned text output) prints the same."""
    outputs = []
    for connection in both:
        info = connection.info
        options = "-c search_path=" + connection.execute("SHOW search_path").fetchone()[0]
        environment = {
            "PGHOST": info.host, "PGPORT": str(info.port), "PGUSER": info.user,
            "PGDATABASE": info.dbname, "PGOPTIONS": options, "PATH": "/usr/bin:/bin",
        }  # fmt: skip
        done = subprocess.run(
            [str(find_bin_dir() / "psql"), "-X", "-v", "ON_ERROR_STOP=1"],
            input=PSQL_SCRIPT.replace("\\t", "\t"),
            capture_output=True, text=True, env=environment, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[1] == outputs[0]


def test_array_literals_in_sql_text(both: list[psycopg.Connection]) -> None:
    for connection in both:
        connection.execute(f"CREATE TABLE app ({COLUMNS})")
        connection.execute(
            r"""INSERT INTO app (id, au, ab, ai, at, aiv, ats, an) VALUES (1,
            '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11, NULL}', '{"\\x01",NULL,"\\x"}',
            '{1,NULL,-3}', '{"a b",NULL,"",\"q}', '{"1 day",NULL}',
            '{"2024-01-01 00:00:00+00"}', '{1.5}')"""
        )
        connection.execute("UPDATE app SET ai = '{}', at = CAST('{x,\"y\"}' AS text[])")
    same(both, "SELECT * FROM app")
    assert same(both, "SELECT id FROM app WHERE ai = '{}' AND 'x' = ANY(at)") == [(1,)]


# -- UPDATE, COPY ------------------------------------------------------------------


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_update_every_column(both: list[psycopg.Connection], binary: bool) -> None:
    _create(both)
    names = NAMES[1:]
    sets = ", ".join(f"{n} = %s" for n in names)
    for connection in both:
        cursor = connection.cursor(binary=binary)
        cursor.execute(f"UPDATE app SET {sets} WHERE id = 3", ROWS[0][1:])
        cursor.execute(f"UPDATE app SET {sets} WHERE id = 1", ROWS[2][1:])
        cursor.execute("UPDATE app SET j = j, n = n + 1, ts = ts + INTERVAL '1 day' WHERE id = 2")
    same(both, "SELECT * FROM app ORDER BY id")


@pytest.mark.parametrize("form", ["", " (FORMAT csv)", " (FORMAT csv, HEADER)"])
def test_copy_out_and_in(both: list[psycopg.Connection], form: str) -> None:
    _create(both)
    outs = []
    for connection in both:
        with connection.cursor().copy(f"COPY app TO STDOUT{form}") as copy:
            outs.append(b"".join(bytes(chunk) for chunk in copy))
    assert outs[1] == outs[0]
    for connection in both:
        connection.execute("DELETE FROM app")
        with connection.cursor().copy(f"COPY app FROM STDIN{form}") as copy:
            copy.write(outs[0])
    same(both, "SELECT * FROM app ORDER BY id")
    for connection in both:
        with connection.cursor().copy(f"COPY (SELECT j, au, iv FROM app) TO STDOUT{form}") as c:
            outs.append(b"".join(bytes(chunk) for chunk in c))
    assert outs[3] == outs[2]


def test_copy_bad_value_sqlstate(both: list[psycopg.Connection]) -> None:
    _create(both)
    for line in [
        b"9\t\\N\tnot-a-uuid\t\\N\n",
        b"9\t\\N\t\\N\t{bad json\n",
        b"9\tnot a time\t\\N\t\\N\n",
    ]:
        codes = []
        for connection in both:
            with (
                pytest.raises(psycopg.Error) as error,
                connection.cursor().copy("COPY app (id, ts, u, j) FROM STDIN") as copy,
            ):
                copy.write(line)
            codes.append(error.value.sqlstate)
        assert codes[1] == codes[0], line


# -- jsonb as PostgreSQL spells it ---------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"b": 1.0, "a": 1e3, "aa": [1.50, -0, 1E-7, 2.5e+2], "": null, "ab": {"y": 1, "x": 2}}',
        '{"dup": 1, "dup": 2, "é": "\\u00e9\\n\\t\\"\\\\", "esc": "\\u0001\\u001f"}',
        "12345678901234567890.0000000001",
        '"a\\u0000b"',
        "[true, false, null, -0.0, 0e5, 1.0e-3]",
        "  [ ]  ",
    ],
)
def test_jsonb_spelled_as_postgres(both: list[psycopg.Connection], text: str) -> None:
    for connection in both:
        connection.execute("CREATE TABLE js (id int, j jsonb)")
    codes = []
    for connection in both:
        try:
            connection.execute("INSERT INTO js VALUES (1, %s)", (text,))
            codes.append(None)
        except psycopg.Error as error:
            codes.append(error.sqlstate)
    assert codes[1] == codes[0]
    same(both, "SELECT j FROM js")


# -- bad input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("u", "not-a-uuid"),
        ("u", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1"),
        ("j", "{bad"),
        ("j", "NaN"),
        ("ts", "not a time"),
        ("iv", "3 fortnights"),
        ("n", "12.3.4"),
        ("b", "\\xzz"),
        ("ai", "{1,x}"),
        ("au", "{not-a-uuid}"),
        ("ai", "{{1},{2,3}}"),
    ],
)
def test_bad_input_sqlstate(both: list[psycopg.Connection], column: str, value: str) -> None:
    for connection in both:
        connection.execute(f"CREATE TABLE app ({COLUMNS})")
    for sql in (
        f"INSERT INTO app (id, {column}) VALUES (1, %s)",
        f"INSERT INTO app (id, {column}) VALUES (1, '{value}')",
    ):
        codes = []
        for connection in both:
            with pytest.raises(psycopg.Error) as error:
                connection.execute(sql, (value,) if "%s" in sql else None)
            codes.append(error.value.sqlstate)
        assert codes[1] == codes[0], sql


# -- the DB-API gives the values psycopg gives -------------------------------------


def test_dbapi_values_as_psycopg(plain: psycopg.Connection, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "people.csv").write_text("id,name\n1,ann\n")
    load(str(tmp_path / "src"), f"duckdb://{tmp_path / 's.duckdb'}", str(tmp_path / "c"))
    plain.execute(f"CREATE TABLE app ({COLUMNS})")
    plain.cursor().executemany(f"INSERT INTO app VALUES ({', '.join(['%s'] * len(NAMES))})", ROWS)
    with veil.connect(tmp_path / "c") as connection:
        connection.execute(f"CREATE TABLE app ({COLUMNS})")
        # JSON as its text (psycopg's Jsonb wrapper is psycopg's own)
        values = [
            tuple([_text(w) for w in v] if isinstance(v, list) else _text(v) for v in row)
            for row in ROWS
        ]
        marks = ", ".join(["?"] * len(NAMES))
        for row in values:
            connection.execute(f"INSERT INTO app VALUES ({marks})", row)
        for query in [
            "SELECT * FROM app ORDER BY id",
            "SELECT id, u, j, au FROM app WHERE id < 3 ORDER BY id",  # through the local plan
            "SELECT u, count(*) AS c FROM app GROUP BY u ORDER BY u NULLS LAST",
        ]:
            want = plain.execute(query).fetchall()
            got = connection.execute(query).fetchall()
            assert len(got) == len(want), query
            differ = [
                (r, c, w, g)
                for r, (row_got, row_want) in enumerate(zip(got, want, strict=True))
                for c, (g, w) in enumerate(zip(row_got, row_want, strict=True))
                if g != w or type(g) is not type(w)
            ]
            assert not differ, (query, differ)
        connection.execute("SET TimeZone = 'Asia/Kolkata'")
        assert connection.execute("SHOW TimeZone").fetchall() == [("Asia/Kolkata",)]
        stamp = connection.execute("SELECT ts FROM app WHERE id = 1").fetchone()
        assert stamp is not None and stamp[0] == STAMP and str(stamp[0].tzinfo) == "Asia/Kolkata"
        connection.execute("INSERT INTO app (id, ts) VALUES (9, '2024-01-01 05:30:00')")
        nine = connection.execute("SELECT ts FROM app WHERE id = 9").fetchone()
        assert nine is not None and nine[0] == dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def _text(value: object) -> object:
    return json.dumps(value.obj) if isinstance(value, Jsonb) else value
