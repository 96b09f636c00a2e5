"""Issue 8: every value a column's SQL type admits can be inserted, and queried on the server.

OPE and HOM widths come from the types (or from domains declared at load
time), not from the loaded data: INSERT and UPDATE of each type's boundary
values, then range predicates, MIN/MAX and SUM pushed to the server, must give
plaintext DuckDB's answers; a declared domain refuses an outside value and
writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.oracle import assert_same
from veil.design.domains import DeclaredDomainError, signed_bits, type_domain
from veil.design.model import OPE
from veil.encoding import SqlType
from veil.load.loader import load
from veil.session.session import Session
from veil.sql.errors import QueryError

TABLES = ("lineitem", "part", "customer", "orders")
EVENTS = pa.table(
    {
        "e_id": pa.array([1, 2, 3], pa.int32()),
        "e_small": pa.array([1, -2, 3], pa.int16()),
        "e_big": pa.array([10, 20, -30], pa.int64()),
        "e_day": pa.array([9000, 9100, 9200], pa.int32()).cast(pa.date32()),
        "e_at": pa.array([10**15, 2 * 10**15, 3 * 10**15], pa.int64()).cast(pa.timestamp("us")),
    }
)
WORKLOAD = [
    "SELECT SUM(l_extendedprice * (1 - l_discount)), SUM(l_quantity), MIN(l_shipdate), "
    "MAX(l_shipdate) FROM lineitem WHERE l_shipdate >= DATE '1994-01-01' AND l_quantity < 24",
    "SELECT l_returnflag, SUM(l_extendedprice * (1 - l_discount) * (1 + l_tax)), SUM(l_quantity) "
    "FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' GROUP BY 1",
    "SELECT COUNT(*), MIN(p_size), MAX(p_size) FROM part WHERE p_size BETWEEN 10 AND 20",
    "SELECT SUM(c_acctbal), MIN(c_acctbal), MAX(c_acctbal) FROM customer WHERE c_acctbal > 0",
    "SELECT o_orderstatus, SUM(o_totalprice), COUNT(*) FROM orders "
    "WHERE o_orderdate < DATE '1995-01-01' AND o_orderkey > 100 GROUP BY 1",
    "SELECT SUM(e_big), SUM(e_small), MIN(e_at), MAX(e_day) FROM events "
    "WHERE e_big > 0 AND e_small < 5 AND e_day > DATE '2000-01-01' "
    "AND e_at > TIMESTAMP '2000-01-01' AND e_id > 0",
]
I32, I64 = 2**31 - 1, 2**63 - 1
LINE = "'R', 'F', DATE '{day}', DATE '1995-01-01', DATE '1995-01-01', 'x', 'y', 'z'"
STATEMENTS = [
    f"INSERT INTO part VALUES (900001, 'a', 'b', 'c', 'd', {I32}, 'e', 1.00, 'f'), "
    f"(900002, 'a', 'b', 'c', 'd', -{I32}, 'e', 1.00, 'f')",
    "UPDATE part SET p_size = -2147483648 WHERE p_partkey = 1",
    "INSERT INTO customer VALUES (900001, 'a', 'b', 1, 'p', -9999999999999.99, 'm', 'c'), "
    "(900002, 'a', 'b', 1, 'p', 9999999999999.99, 'm', 'c')",
    "UPDATE customer SET c_acctbal = 9999999999999.99 WHERE c_custkey = 1",
    f"INSERT INTO orders VALUES ({I64}, 1, 'F', 9999999999999.99, DATE '9999-12-31', 'u', 'c', "
    f"{I32}, 'x'), (-{I64}, 1, 'O', -9999999999999.99, DATE '0001-01-01', 'u', 'c', -{I32}, 'x')",
    "INSERT INTO orders VALUES (900001, 1, 'P', 1.00, DATE '5877642-06-25 (BC)', 'u', 'c', 0, 'x'), "
    "(900002, 1, 'P', 2.00, DATE '5881580-07-10', 'u', 'c', 0, 'x'), "
    "(900003, 1, 'P', 3.00, 'infinity', 'u', 'c', 0, 'x'), "
    "(900004, 1, 'P', 4.00, '-infinity', 'u', 'c', 0, 'x')",
    "UPDATE orders SET o_orderdate = DATE '0001-01-01' WHERE o_orderkey = 1",
    # the largest values whose Q1 products DuckDB can still compute (DECIMAL(18,6))
    f"INSERT INTO lineitem VALUES (1, 1, 1, 9, 9999999999999.99, 99999.99, 0.00, 0.00, {LINE})".format(
        day="9999-12-31"
    ),
    f"INSERT INTO lineitem VALUES (1, 1, 1, 10, -9999999999999.99, -99999.99, 0.00, 0.00, {LINE})".format(
        day="0001-01-01"
    ),
    "UPDATE lineitem SET l_shipdate = 'infinity', l_quantity = 0.01 WHERE l_orderkey = 1 "
    "AND l_linenumber = 1",
    f"INSERT INTO events VALUES ({I32}, 32767, {I64}, DATE 'infinity', TIMESTAMP 'infinity'), "
    f"(-{I32}, -32768, -{I64}, DATE '-infinity', TIMESTAMP '-infinity'), "
    "(7, 0, 0, DATE '5881580-07-10', TIMESTAMP '294247-01-10 04:00:54.775806'), "
    "(8, 0, 0, DATE '5877642-06-25 (BC)', TIMESTAMP '290309-12-22 (BC) 00:00:00')",
    "UPDATE events SET e_big = -9223372036854775808 WHERE e_id = 1",
]
# dates and timestamps as text: Python's datetime cannot hold DuckDB's extremes
CHECKS = [
    *(
        q.replace(
            "MIN(l_shipdate), MAX(l_shipdate)", "MIN(l_shipdate)::VARCHAR, MAX(l_shipdate)::VARCHAR"
        ).replace("MIN(e_at), MAX(e_day)", "MIN(e_at)::VARCHAR, MAX(e_day)::VARCHAR")
        for q in WORKLOAD
    ),
    "SELECT COUNT(*), MIN(p_size), MAX(p_size) FROM part WHERE p_size > 2000000000",
    "SELECT COUNT(*) FROM part WHERE p_size < -2147483647",
    "SELECT MIN(c_acctbal), MAX(c_acctbal), SUM(c_acctbal) FROM customer",
    "SELECT COUNT(*) FROM customer WHERE c_acctbal >= 9999999999999.99",
    "SELECT MIN(o_orderdate)::VARCHAR, MAX(o_orderdate)::VARCHAR, COUNT(*) FROM orders "
    "WHERE o_orderdate > DATE '9000-01-01' OR o_orderdate < DATE '1000-01-01'",
    "SELECT COUNT(*), SUM(o_totalprice) FROM orders WHERE o_orderkey > 9000000000000000000",
    "SELECT SUM(l_quantity), SUM(l_extendedprice), MAX(l_shipdate)::VARCHAR FROM lineitem "
    "WHERE l_shipdate > DATE '1998-01-01'",
    "SELECT SUM(l_extendedprice * (1 - l_discount) * (1 + l_tax)) FROM lineitem "
    "WHERE l_quantity > 1000000",
    "SELECT MIN(e_big), MAX(e_big), MIN(e_small), MAX(e_small), MIN(e_at)::VARCHAR, "
    "MAX(e_at)::VARCHAR, MIN(e_day)::VARCHAR, MAX(e_day)::VARCHAR FROM events",
    "SELECT COUNT(*) FROM events WHERE e_at > TIMESTAMP '290000-01-01' OR e_day < DATE '0001-01-01'",
]


def _source(root: Path, tpch_dir: Path) -> tuple[Path, duckdb.DuckDBPyConnection]:
    source = root / "src"
    source.mkdir()
    plain = duckdb.connect()
    for name in TABLES:
        (source / f"{name}.parquet").symlink_to(tpch_dir / f"{name}.parquet")
    pq.write_table(EVENTS, source / "events.parquet")
    for file in sorted(source.iterdir()):
        plain.execute(f"CREATE TABLE {file.stem} AS SELECT * FROM read_parquet('{file}')")
    return source, plain


@pytest.fixture(scope="module")
def pair(
    tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    root = tmp_path_factory.mktemp("domains")
    source, plain = _source(root, tpch_dir)
    load(
        str(source), f"duckdb:///{root}/server.duckdb", str(root / "client"), WORKLOAD,
        progress=lambda _: None,
    )  # fmt: skip
    session = Session(root / "client")
    yield session, plain
    session.close()


def test_default_domains_cover_the_types(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, _ = pair
    design = session.design
    bits = {
        (t.name, e.source): e.params["bits"]
        for t in design.tables.values()
        for e in t.encryptions
        if e.scheme == OPE
    }
    assert bits[("part", "p_size")] == 32
    assert bits[("orders", "o_orderkey")] == 64
    assert bits[("lineitem", "l_shipdate")] == 32
    assert bits[("events", "e_at")] == 64
    assert bits[("events", "e_small")] == 16
    assert bits[("customer", "c_acctbal")] == signed_bits(*type_domain(SqlType("DECIMAL(15,2)")))
    sums = design.table("lineitem").sums
    # the words fit the loaded values (``veil.load.ashe_widths``), not the types: a
    # DECIMAL(18,s) product needs one word, not two; rows beyond them are flagged apart
    assert sums is not None and sums.flag_bit is None and sums.overflow_column is not None
    assert sums.limits is not None
    words = {
        source: len(columns) for source, columns in zip(sums.sources, sums.columns, strict=True)
    }
    assert words["l_quantity"] == 1
    assert words["l_extendedprice * (1 - l_discount)"] == 1


@pytest.mark.parametrize("pushdown", ["auto", "always"])
def test_boundary_values_round_trip(
    pair: tuple[Session, duckdb.DuckDBPyConnection], pushdown: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, plain = pair
    monkeypatch.setenv("VEIL_HOM_PUSHDOWN", pushdown)
    if pushdown == "auto":  # the statements run once, checked under both policies
        for statement in STATEMENTS:
            expected = plain.execute(statement).fetchall()[0][0]
            assert session.run(statement).rowcount == expected, statement
    for check in CHECKS:
        assert_same(session.run(check).table, plain.execute(check).fetchall(), False, check)


def test_infinite_date_constants(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = pair
    check = (
        "SELECT o_orderkey FROM orders WHERE o_orderdate = 'infinity' OR o_orderdate = '-infinity'"
    )
    assert_same(session.run(check).table, plain.execute(check).fetchall(), False, check)


def test_an_overflowing_product_is_stored_and_reported_like_duckdb(
    pair: tuple[Session, duckdb.DuckDBPyConnection], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB accepts the row but cannot compute its Q1 product: neither can Veil's queries."""
    session, plain = pair
    monkeypatch.setenv("VEIL_HOM_PUSHDOWN", "always")
    statement = (
        "INSERT INTO lineitem VALUES (2, 1, 1, 11, 1.00, 9999999999999.99, "
        f"-9999999999999.99, 0.00, {LINE})".format(day="1996-01-01")
    )
    plain.execute(statement)
    assert session.run(statement).rowcount == 1
    summed = "SELECT SUM(l_extendedprice * (1 - l_discount)) FROM lineitem WHERE l_orderkey = 2"
    with pytest.raises(duckdb.OutOfRangeException):
        plain.execute(summed)
    with pytest.raises(QueryError, match="Overflow"):
        session.run(summed)
    for check in [
        "SELECT l_returnflag, SUM(l_quantity) FROM lineitem WHERE l_shipdate <= "
        "DATE '1998-09-02' GROUP BY 1",
        "SELECT SUM(l_extendedprice), MAX(l_discount) FROM lineitem WHERE l_orderkey = 2",
        "SELECT COUNT(*) FROM lineitem WHERE l_shipdate = DATE '1996-01-01' AND l_quantity < 24",
    ]:
        assert_same(session.run(check).table, plain.execute(check).fetchall(), False, check)
    plain.execute("DELETE FROM lineitem WHERE l_orderkey = 2 AND l_linenumber = 11")
    session.run("DELETE FROM lineitem WHERE l_orderkey = 2 AND l_linenumber = 11")


@pytest.fixture(scope="module")
def narrow(tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    root = tmp_path_factory.mktemp("narrow")
    source, _ = _source(root, tpch_dir)
    load(
        str(source), f"duckdb:///{root}/server.duckdb", str(root / "client"), WORKLOAD,
        progress=lambda _: None,
        domains=["part.p_size=1..50", "lineitem.l_quantity=0..100",
                 "lineitem.l_shipdate=1992-01-01..1998-12-31"],
    )  # fmt: skip
    session = Session(root / "client")
    yield session
    session.close()


def test_a_declared_domain_narrows_the_design(narrow: Session) -> None:
    part = narrow.design.table("part")
    assert part.column("p_size").domain == ["1", "50"]  # type: ignore[union-attr]
    assert part.find("p_size", OPE).params["bits"] == 7  # type: ignore[union-attr]
    ship = narrow.design.table("lineitem").find("l_shipdate", OPE)
    assert ship is not None and ship.params["bits"] == 15


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO part VALUES (900001, 'a', 'b', 'c', 'd', 51, 'e', 1.00, 'f')",
        "UPDATE part SET p_size = p_size + 100 WHERE p_partkey < 10",
        "INSERT INTO lineitem VALUES (1, 1, 1, 9, 100.01, 1.00, 0.00, 0.00, "
        "'R', 'F', DATE '1995-01-01', DATE '1995-01-01', DATE '1995-01-01', 'x', 'y', 'z')",
        "UPDATE lineitem SET l_shipdate = DATE '1999-01-01' WHERE l_orderkey = 1",
    ],
)
def test_a_declared_domain_refuses_outside_values(narrow: Session, statement: str) -> None:
    checks = [
        "SELECT COUNT(*), SUM(p_size), MAX(p_size) FROM part",
        "SELECT COUNT(*), SUM(l_quantity), MAX(l_shipdate)::VARCHAR FROM lineitem",
    ]
    before = [narrow.run(c).table.to_pylist() for c in checks]
    with pytest.raises(DeclaredDomainError, match=r"(p_size|l_quantity|l_shipdate).*declared"):
        narrow.run(statement)
    assert [narrow.run(c).table.to_pylist() for c in checks] == before


def test_a_source_outside_a_declared_domain_loads_nothing(tpch_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "part.parquet").symlink_to(tpch_dir / "part.parquet")
    with pytest.raises(DeclaredDomainError, match=r"part\.p_size.*1\.\.40"):
        load(
            str(source), f"duckdb:///{tmp_path}/server.duckdb", str(tmp_path / "client"),
            [], progress=lambda _: None, domains={"part.p_size": (1, 40)},
        )  # fmt: skip
    assert not (tmp_path / "client").exists()
