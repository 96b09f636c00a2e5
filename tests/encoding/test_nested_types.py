"""LIST, STRUCT, MAP, fixed-size ARRAY, HUGEINT, UHUGEINT, UBIGINT, DECIMAL(38, s) and BIT
columns (issue 40): each type's whole domain round-trips through its encoding, through
``veil load`` (a DuckDB database and Parquet), INSERT, UPDATE and SELECT with WHERE
equality and NULLs, answers as plaintext DuckDB does, and no plaintext reaches the server.

HUGEINT, UHUGEINT, UBIGINT and BIT are stored as DuckDB's text of each value (one text per
value: DET answers ``=`` on the server, ranges run on the client); nested values as their
DuckDB text, which DuckDB casts back exactly (RND: the client evaluates anything over them).
"""

from __future__ import annotations

import decimal
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from tests.support.oracle import assert_same
from veil.design.model import DET
from veil.encoding import EncodingError, SqlType, decode, encode, normalize_type
from veil.load.loader import load
from veil.session.session import Session

CANARY = "zq-nested-canary-31c"
HUGE_MAX = 2**127 - 1

EXTREMES = {
    "HUGEINT": [f"{HUGE_MAX}::HUGEINT", f"(-{HUGE_MAX}::HUGEINT - 1)", "0::HUGEINT", "NULL"],
    "UHUGEINT": [f"{2**128 - 1}::UHUGEINT", "0::UHUGEINT", "NULL"],
    "UBIGINT": [f"{2**64 - 1}::UBIGINT", "0::UBIGINT", "NULL"],
    "BIT": ["'0'::BIT", "'1100110011001100110011'::BIT", "NULL"],
    'STRUCT("x" INTEGER, "Y" VARCHAR)': [
        "{'x': 1, 'Y': 'q\"''x,}{[]\\'}",
        "{'x': NULL, 'Y': NULL}",
    ],
    "MAP(INTEGER, DOUBLE[])": [
        "MAP {1: [1.5, 'inf'::DOUBLE, 'nan'::DOUBLE], 2: NULL}",
        "MAP {}",
        "NULL",
    ],
    "INTEGER[3]": ["[1, NULL, -2147483648]", "NULL"],
    'STRUCT("a" HUGEINT)[]': [f"[{{'a': {HUGE_MAX}}}, NULL]", "[]"],
    "BIT[]": ["['1'::BIT, NULL]"],
    'STRUCT("t" TIMESTAMPTZ, "i" INTERVAL)': [
        "{'t': TIMESTAMPTZ '2020-01-01 05:00:00+05', 'i': INTERVAL 1 month}"
    ],
    'STRUCT("d" DOUBLE, "b" BLOB, "s" VARCHAR[])': [
        "{'d': -0.0, 'b': '\\x00\\xff'::BLOB, 's': ['NULL', NULL, '', 'a''b']}"
    ],
}


@pytest.mark.unit
@pytest.mark.parametrize("name", list(EXTREMES))
def test_every_value_round_trips(name: str) -> None:
    """decode(encode(v)) is v for the type's extremes, compared by DuckDB itself."""
    sql_type = SqlType(normalize_type(name))
    values = ", ".join(f"({v})" for v in EXTREMES[name])
    with duckdb.connect() as con:
        con.execute("SET arrow_lossless_conversion = true")
        plain = con.sql(f"SELECT CAST(v AS {sql_type.name}) AS v FROM (VALUES {values}) t(v)")
        table = plain.to_arrow_table()
        back = decode(encode(table.column(0), sql_type), sql_type)
        con.register("back", pa.table({"b": back}))
        con.register("plain", table)
        same = con.sql(
            "SELECT bool_and(v IS NOT DISTINCT FROM b) FROM "
            "(SELECT v, row_number() OVER () AS i FROM plain) "
            "JOIN (SELECT b, row_number() OVER () AS i FROM back) USING (i)"
        ).fetchall()
    assert same == [(True,)], name


@pytest.mark.unit
def test_type_names() -> None:
    assert normalize_type('struct(x int, "Y z" varchar)') == 'STRUCT("x" INTEGER, "Y z" VARCHAR)'
    assert normalize_type("int128") == "HUGEINT" and normalize_type("uint64") == "UBIGINT"
    assert SqlType("HUGEINT").has_equality and SqlType("BIT").has_equality
    assert not SqlType('STRUCT("x" INTEGER)').has_equality  # -0.0 and 0.0: on the client
    with pytest.raises(EncodingError, match="not a type DuckDB knows"):
        normalize_type("STRUCT(x NOSUCHTYPE)")
    with pytest.raises(EncodingError, match="no Veil encoding"):
        normalize_type("UNION(a INTEGER, b VARCHAR)")


SOURCE = f"""
CREATE TABLE t AS SELECT i AS id,
 CASE WHEN i % 4 = 0 THEN NULL ELSE [i, i + 1]::INTEGER[] END AS li,
 CASE WHEN i % 4 = 1 THEN NULL ELSE {{'x': i, 'Y': 'v''' || i || '{CANARY}'}} END AS st,
 CASE WHEN i % 4 = 2 THEN NULL ELSE MAP {{'k' || (i % 3): i}} END AS mp,
 CASE WHEN i % 5 = 0 THEN NULL WHEN i = 1 THEN {HUGE_MAX}::HUGEINT
      WHEN i = 2 THEN -{HUGE_MAX}::HUGEINT - 1 ELSE (i % 4) * 12345678901234567890123::HUGEINT
 END AS hu,
 CASE WHEN i % 5 = 1 THEN NULL WHEN i = 2 THEN {2**64 - 1}::UBIGINT ELSE (i % 3)::UBIGINT END AS ub,
 CASE WHEN i % 5 = 2 THEN NULL WHEN i = 3 THEN {2**128 - 1}::UHUGEINT
      ELSE (i % 3)::UHUGEINT END AS uh,
 CASE WHEN i % 5 = 3 THEN NULL
      ELSE ((i % 4) * 1.25 + 99999999999999999999999999999999.99 * (i % 2))::DECIMAL(38,2)
 END AS d38,
 CASE WHEN i % 6 = 0 THEN NULL ELSE ['0101', '1', '110011001100110011'][i % 3 + 1]::BIT END AS bt,
 CASE WHEN i % 6 = 1 THEN NULL ELSE [i, i % 2]::INTEGER[2] END AS ar
FROM range(1, 40) t(i)
"""
QUERIES = [
    "SELECT * FROM t ORDER BY id",
    "SELECT id, len(li), st.x, hu + 1, mp['k1'] FROM t WHERE st.x > 3 AND len(li) = 2 ORDER BY id",
    "SELECT sum(hu), sum(ub), count(bt) FROM t WHERE hu = 5 AND ub = 2 AND bt = '1'::BIT",
    "SELECT id FROM t WHERE hu = 12345678901234567890123 ORDER BY id",
    f"SELECT id FROM t WHERE hu = {HUGE_MAX}",
    f"SELECT id FROM t WHERE ub = {2**64 - 1}",
    f"SELECT id FROM t WHERE uh = {2**128 - 1}",
    "SELECT id FROM t WHERE bt = '0101'::BIT ORDER BY id",
    "SELECT id FROM t WHERE d38 = 1.25 ORDER BY id",
    f"SELECT id FROM t WHERE st = {{'x': 3, 'Y': 'v''3{CANARY}'}}",
    "SELECT id FROM t WHERE mp['k1'] = 4",
    "SELECT count(*), count(hu), count(st), count(bt), count(uh), count(ar) FROM t",
    "SELECT id FROM t WHERE hu > 0 OR uh > 1 ORDER BY id",
    "SELECT hu, count(*) FROM t GROUP BY hu ORDER BY hu NULLS FIRST",
    "SELECT max(uh), min(hu), sum(ub), max(bt), min(d38) FROM t",
    "SELECT id, st.x, ar[2], li[1] FROM t WHERE ar[1] > 30 ORDER BY id",
    "SELECT id FROM t WHERE hu IS NULL OR st IS NULL ORDER BY id",
]


WORKLOAD = [  # per-row expressions over the nested and wide columns, stored at load
    "SELECT id, len(li), st.x, hu + 1, mp['k1'] FROM t WHERE st.x > 3 AND len(li) = 2",
    "SELECT sum(hu), sum(ub), count(bt) FROM t WHERE hu = 5 AND ub = 2 AND bt = '1'::BIT",
]


@pytest.fixture(scope="module", params=["onions", "workload"])
def loaded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, Path]]:
    root = tmp_path_factory.mktemp("nested")
    with duckdb.connect(str(root / "source.duckdb")) as source:
        source.execute(SOURCE)
    server = root / "server.duckdb"
    workload = WORKLOAD if request.param == "workload" else None
    load(
        str(root / "source.duckdb"),
        f"duckdb:///{server}",
        str(root / "client"),
        workload,
        lambda _: None,
    )
    session = Session(root / "client")
    yield session, server
    session.close()


@pytest.mark.integration
@pytest.mark.parametrize("sql", QUERIES)
def test_answers_as_duckdb(loaded: tuple[Session, Path], sql: str) -> None:
    session, _ = loaded
    with duckdb.connect() as plain:
        plain.execute(SOURCE)
        expected = plain.execute(sql).fetchall()
    assert_same(session.run(sql).table, expected, "ORDER BY" in sql, sql)


@pytest.mark.integration
def test_equality_is_answered_on_the_server_and_no_plaintext_is_stored(
    loaded: tuple[Session, Path],
) -> None:
    session, server = loaded
    for sql in QUERIES:
        session.run(sql)  # the onions peel to DET where a query asks for equality
    table = session.design.table("t")
    for column in ("hu", "ub", "bt"):  # (uh too under onions; no workload query asks)
        assert table.find(column, DET) is not None, column
    for column in ("li", "st", "mp", "ar"):
        assert table.find(column, DET) is None, column  # fetched: the client evaluates
    stored = server.read_bytes()
    for plaintext in (CANARY, str(HUGE_MAX), str(2**128 - 1), "110011001100110011"):
        assert plaintext.encode() not in stored, plaintext


@pytest.mark.integration
def test_load_from_parquet(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    table = pa.table(
        {
            "id": [1, 2, 3],
            "l": pa.array([[1, None], None, []], pa.list_(pa.int32())),
            "s": pa.array([{"a": 1, "B": CANARY}, None, {"a": None, "B": ""}]),
            "m": pa.array([[("k", 1)], None, []], pa.map_(pa.string(), pa.int64())),
            "u": pa.array([2**64 - 1, None, 0], pa.uint64()),
            "d": pa.array([decimal.Decimal("9" * 36 + ".99"), None, 0], pa.decimal128(38, 2)),
        }
    )
    pq.write_table(table, source / "things.parquet")
    server = tmp_path / "s.duckdb"
    load(str(source), f"duckdb://{server}", str(tmp_path / "c"), progress=lambda _: None)
    with duckdb.connect() as plain, veil.connect(tmp_path / "c") as loaded:
        plain.execute(f"CREATE TABLE things AS FROM '{source / 'things.parquet'}'")
        for sql in [
            "SELECT * FROM things ORDER BY id",
            f"SELECT id FROM things WHERE u = {2**64 - 1}",
            f"SELECT id FROM things WHERE s.B = '{CANARY}'",
            "SELECT id FROM things WHERE m['k'] = 1 OR l IS NULL ORDER BY id",
        ]:
            assert loaded.execute(sql).fetchall() == plain.execute(sql).fetchall(), sql
    assert CANARY.encode() not in server.read_bytes()


DDL = (
    'CREATE TABLE n (id INT, hu HUGEINT, ub UBIGINT, uh UHUGEINT, bt BIT, st STRUCT(x INT, "Y" '
    "VARCHAR), mp MAP(INT, VARCHAR), ar INT[2], ls STRUCT(a INT)[], d DECIMAL(38,3))"
)
INSERTS: list[tuple[str, list[object] | None]] = [
    (
        f"INSERT INTO n VALUES (1, {HUGE_MAX}, {2**64 - 1}, {2**128 - 1}, '0101', "
        f"{{'x': 1, 'Y': '{CANARY}'}}, MAP {{1: '{CANARY}-m'}}, [1, 2], [{{'a': 5}}], "
        "12345678901234567890123456789012345.678)",
        None,
    ),
    (f"INSERT INTO n VALUES (2, -{HUGE_MAX} - 1, 0, 0, '1', NULL, NULL, NULL, NULL, NULL)", None),
    ("INSERT INTO n (id) VALUES (3)", None),
    (
        "INSERT INTO n VALUES (4, ?, ?, ?, ?, NULL, NULL, NULL, NULL, ?)",
        [2**100, 2**64 - 1, 2**128 - 1, "0101", decimal.Decimal("1.5")],
    ),
    ("UPDATE n SET hu = hu - 1, st = {'x': 9, 'Y': 'u'} WHERE id = 1", None),
]
DML_QUERIES = [
    "SELECT * FROM n ORDER BY id",
    f"SELECT id FROM n WHERE hu = {HUGE_MAX - 1}",
    f"SELECT id FROM n WHERE uh = {2**128 - 1} ORDER BY id",
    "SELECT id FROM n WHERE bt = '0101' ORDER BY id",
    "SELECT id FROM n WHERE st.\"Y\" = 'u'",
    "SELECT id FROM n WHERE hu IS NULL",
    f"SELECT id FROM n WHERE ub = {2**64 - 1} ORDER BY id",
    "SELECT id FROM n WHERE d = 1.5",
]


@pytest.mark.integration
def test_create_insert_update(backend_url: str, tmp_path: Path) -> None:
    """On each backend: the values are bytes (DET or RND) to the server."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "people.csv").write_text("id,name\n1,ann\n")
    load(str(tmp_path / "src"), backend_url, str(tmp_path / "c"), progress=lambda _: None)
    with duckdb.connect() as plain, veil.connect(tmp_path / "c") as con:
        for sql in (DDL, *(s for s, _ in INSERTS)):
            params = dict(INSERTS).get(sql)
            con.execute(sql, params)
            plain.execute(sql, params)
        for sql in DML_QUERIES:
            assert con.execute(sql).fetchall() == plain.execute(sql).fetchall(), sql
    if backend_url.startswith("duckdb:"):
        server = Path(backend_url.removeprefix("duckdb://"))
        assert CANARY.encode() not in server.read_bytes()
