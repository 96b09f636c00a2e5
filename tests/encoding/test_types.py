"""Every encodable SQL type, with NULLs, through load, push-down and DML (a DuckDB source)."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest
import sqlglot

from tests.support.oracle import assert_same
from veil.load.loader import load
from veil.session.session import Session

SOURCE_SQL = """
CREATE TABLE things AS
SELECT
    i AS id,
    CASE WHEN i % 7 = 0 THEN NULL ELSE (i * 37) % 101 - 50 END::INTEGER AS small,
    CASE WHEN i % 5 = 0 THEN NULL ELSE i * 1000003 - 40000000 END::BIGINT AS big,
    CASE WHEN i % 6 = 0 THEN NULL ELSE ((i * 7919) % 20000 - 10000) / 100 END::DECIMAL(12,2) AS amount,
    CASE WHEN i % 4 = 0 THEN NULL ELSE (i * 0.731 - 20) END::DOUBLE AS ratio,
    CASE WHEN i % 9 = 0 THEN NULL ELSE i % 3 = 0 END AS flag,
    CASE WHEN i % 8 = 0 THEN NULL ELSE DATE '1970-01-01' + INTERVAL (i * 97 - 9000) DAY END::DATE AS day,
    CASE WHEN i % 10 = 0 THEN NULL ELSE TIMESTAMP '2001-02-03 04:05:06' + INTERVAL (i * 3601) SECOND END AS moment,
    CASE WHEN i % 11 = 0 THEN NULL ELSE ['alpha beta', 'Gamma', 'délta epsilon', '', 'zeta eta theta'][i % 5 + 1] END AS label
FROM range(1, 400) t(i)
"""
WORKLOAD = [
    "SELECT * FROM things WHERE small = 3 AND big = 5 AND amount = 1.5 AND ratio = 0.5 AND flag = true AND day = DATE '2000-01-01' AND moment = TIMESTAMP '2001-02-03 04:05:06' AND label = 'Gamma'",
    "SELECT * FROM things WHERE small < 0 AND big > 0 AND amount BETWEEN -10 AND 10 AND ratio < 1.5 AND day < DATE '1980-01-01' AND moment > TIMESTAMP '2001-03-01 00:00:00'",
    "SELECT * FROM things WHERE label LIKE '% beta'",
    "SELECT flag, COUNT(*), MIN(amount), MAX(ratio), MIN(day), MAX(moment) FROM things GROUP BY flag",
]
QUERIES = [
    *WORKLOAD,
    "SELECT * FROM things ORDER BY id",
    "SELECT COUNT(*) FROM things WHERE small IS NULL OR big IS NULL",
    "SELECT id FROM things WHERE ratio < -5.25 OR ratio > 200 ORDER BY id",
    "SELECT id FROM things WHERE ratio = 0 OR amount = -0.00 ORDER BY id",
    "SELECT id, day FROM things WHERE day BETWEEN DATE '1960-01-01' AND DATE '1975-12-31' ORDER BY id",
    "SELECT label, COUNT(*) FROM things WHERE label IN ('Gamma', '', 'délta epsilon') GROUP BY label",
    "SELECT COUNT(*) FROM things WHERE label LIKE 'alpha%' OR label = ''",
    "SELECT small, COUNT(*), SUM(amount) FROM things GROUP BY small ORDER BY small NULLS FIRST",
    "SELECT flag, MIN(small), MAX(big), MIN(amount), MAX(ratio) FROM things WHERE day IS NOT NULL GROUP BY flag",
    "SELECT COUNT(*) FROM things WHERE moment >= TIMESTAMP '2001-02-10 00:00:00' AND flag",
]


@pytest.fixture(scope="module")
def typed(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    root = tmp_path_factory.mktemp("types")
    database = root / "source.duckdb"
    with duckdb.connect(str(database)) as source:
        source.execute(SOURCE_SQL)
    load(
        str(database),
        f"duckdb:///{root}/server.duckdb",
        str(root / "client"),
        WORKLOAD,
        progress=lambda _: None,
    )
    plain = duckdb.connect()
    plain.execute(SOURCE_SQL)
    session = Session(root / "client")
    yield session, plain
    session.close()


def test_every_type_is_pushed_down_somewhere(
    typed: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, _ = typed
    schemes = {(e.source, e.scheme) for e in session.design.table("things").encryptions}
    for column in ("small", "big", "amount", "ratio", "day", "moment"):
        assert (column, "DET") in schemes and (column, "OPE") in schemes, column
    plan = session.plan(sqlglot.parse_one(WORKLOAD[1], read="duckdb"))
    assert len(plan.scans[0].predicates) == 6


@pytest.mark.parametrize("sql", QUERIES)
def test_types_match_plaintext(typed: tuple[Session, duckdb.DuckDBPyConnection], sql: str) -> None:
    session, plain = typed
    ordered = sqlglot.parse_one(sql, read="duckdb").args.get("order") is not None
    assert_same(session.run(sql).table, plain.execute(sql).fetchall(), ordered, sql)


def test_types_survive_dml(typed: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = typed
    for statement in (
        "INSERT INTO things VALUES (1000, NULL, -7, 12.34, -0.0, false, DATE '1999-12-31', NULL, 'omega')",
        "UPDATE things SET ratio = ratio * 2, label = upper(label) WHERE flag AND small > 0",
        "DELETE FROM things WHERE day < DATE '1965-01-01'",
    ):
        assert session.run(statement).rowcount == plain.execute(statement).fetchall()[0][0]
    sql = "SELECT * FROM things ORDER BY id"
    assert_same(session.run(sql).table, plain.execute(sql).fetchall(), True, sql)
