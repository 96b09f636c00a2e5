"""SUM, AVG and COUNT come back typed as plaintext DuckDB types them, on every path.

Plaintext DuckDB sums TINYINT..BIGINT into a HUGEINT (a Python int), DECIMAL(p, s)
into DECIMAL(38, s) and DOUBLE into DOUBLE. Veil's sums are finished in several
places: on the server under ASHE (``veil.exec.ashe_sums``) or packed Paillier
(``veil.exec.hom_fetch``), over a server join (``veil.exec.joined_sums``), or by
the client's DuckDB over decrypted rows; the local plan casts the server's
decimals back (``pushdown_aggregates``). Each must give plaintext's type: the local
plan's ``typeof``, and the Python values of the rows the DB-API gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from veil.dbapi import Connection
from veil.exec.rows import table_rows
from veil.load.loader import load
from veil.session.session import Session

pytestmark = pytest.mark.integration

FACTS = """
SELECT i AS id, (i % 5)::VARCHAR AS g, (i % 7)::INTEGER AS k,
       (i % 100 - 50)::TINYINT AS t8, (i * 3 % 1000 - 500)::SMALLINT AS t16,
       (i * 7 - 10000)::INTEGER AS t32, (i * 1000003 - 5)::BIGINT AS t64,
       ((i % 1000) / 100.0)::DECIMAL(9, 2) AS d, (i / 7.0)::DOUBLE AS f
FROM range(3000) r(i)
"""
DIMENSION = "SELECT k, 'x' || k::VARCHAR AS label FROM range(7) r(k)"
COLUMNS = ["t8", "t16", "t32", "t64", "d", "f"]
SHAPES = {
    "grouped": "SELECT g, SUM({c}) AS s, AVG({c}) AS a, COUNT({c}) AS n FROM m GROUP BY g",
    "whole": "SELECT SUM({c}) AS s, AVG({c}) AS a, COUNT(*) AS n FROM m WHERE id > 10",
    "joined": "SELECT label, SUM(m.{c}) AS s FROM m JOIN dim ON m.k = dim.k GROUP BY label",
    "window": "SELECT id, SUM({c}) OVER (PARTITION BY g) AS s FROM m WHERE id < 20",
}
WORKLOAD = [shape.format(c=c) for shape in SHAPES.values() for c in COLUMNS]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("typed-sums")
    duckdb.sql(FACTS).write_parquet(str(folder / "m.parquet"))
    duckdb.sql(DIMENSION).write_parquet(str(folder / "dim.parquet"))
    return folder


@pytest.fixture(scope="module")
def plain(source: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    for name in ("m", "dim"):
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM '{source / name}.parquet'")
    yield con
    con.close()


@pytest.fixture(scope="module", params=["ashe", "paillier"])
def session(
    request: pytest.FixtureRequest, source: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    """The sums stored under ASHE, or packed Paillier summed on the server whatever the cost."""
    root = tmp_path_factory.mktemp(f"typed-{request.param}")
    options = {"sums": "paillier"} if request.param == "paillier" else {}
    url = f"duckdb:///{root / 'server.duckdb'}"
    load(str(source), url, str(root / "client"), WORKLOAD, lambda _: None, **options)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VEIL_HOM_PUSHDOWN", "always")
        opened = Session(root / "client")
    yield opened
    opened.close()


def _typeof(sql: str) -> str:
    """The types of ``sql``'s aggregates, as the engine running it types them."""
    items = [f"typeof({c})" for c in ("s", "a", "n") if f" AS {c}" in sql]
    return f"SELECT DISTINCT {', '.join(items)} FROM ({sql}) AS q"


def _value_types(rows: list[tuple[object, ...]]) -> list[set[str]]:
    width = len(rows[0]) if rows else 0
    return [{type(r[i]).__name__ for r in rows if r[i] is not None} for i in range(width)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("column", COLUMNS)
def test_aggregates_are_typed_as_plaintext(
    session: Session, plain: duckdb.DuckDBPyConnection, shape: str, column: str
) -> None:
    sql = SHAPES[shape].format(c=column)
    typed = session.run(_typeof(sql)).table
    assert table_rows(typed) == plain.sql(_typeof(sql)).fetchall()
    got = Connection(session).cursor().execute(sql).fetchall()  # as the DB-API gives them
    assert _value_types(got) == _value_types(plain.sql(sql).fetchall())


@pytest.mark.parametrize("column", ["t8", "t64", "d"])
def test_the_server_sums(session: Session, column: str) -> None:
    """The grouped and whole sums of integers and decimals are the server's (ASHE or HOM;
    ASHE's over the join too), so the cases above cover the server-summed paths, the
    window (and Paillier's join) the client's."""
    for shape in ("grouped", "whole"):
        plan = session.run(SHAPES[shape].format(c=column)).plan
        assert plan is not None and plan.scans[0].aggregation is not None
    if session.design.table("m").sums is not None:  # ASHE: over the server join too
        plan = session.run(SHAPES["joined"].format(c=column)).plan
        assert plan is not None
        assert any(s.joined is not None and s.joined.groups is not None for s in plan.scans)
