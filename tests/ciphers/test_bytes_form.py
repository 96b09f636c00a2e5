"""Integers of few distinct values stored as 8-byte binaries where the server compresses those.

On DuckDB a DET integer column with at most ``BYTES_FORM_MAX_DISTINCT_DET``
values is stored as BLOB (dictionary-compressed), and so is a join group
whose columns all have few values; PostgreSQL keeps BIGINT everywhere. Equality,
IN lists, GROUP BY, COUNT(DISTINCT), joins of the other columns, bind filters,
and INSERT/UPDATE/DELETE with values and NULLs the load never saw must give
plaintext DuckDB's answers on both backends. The same holds for OPE of at
most 32 bits (``v_day`` in ranges, MIN/MAX, ORDER BY): its binaries are
big-endian with the sign bit flipped, so they sort as the ciphertexts. An
OPE column that orders the table's rows (``v_n``) keeps int64.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import veil.load.loader as loader
from tests.support.oracle import check_query, load_tables
from veil.ciphers.columns import BYTES_FORM, as_bytes, as_int64
from veil.load.loader import load
from veil.session.session import Session

VISITS = """
SELECT i AS v_id, i % 7 AS v_site, DATE '2024-01-01' + (i % 40)::INT AS v_day,
       CASE WHEN i % 13 = 0 THEN NULL ELSE (i % 5) * 1000000007 END::BIGINT AS v_n,
       i % 2000 AS v_k
FROM range(20000) t(i)
"""
SITES = "SELECT i AS s_id, 'site ' || i AS s_name FROM range(7) t(i)"
QUERIES = [
    "SELECT COUNT(*) FROM visits WHERE v_day = DATE '2024-01-05'",
    "SELECT v_day, COUNT(*), COUNT(v_n) FROM visits GROUP BY v_day ORDER BY v_day",
    "SELECT v_n, COUNT(*) FROM visits WHERE v_n IN (0, 2000000014, 42) GROUP BY v_n",
    "SELECT COUNT(DISTINCT v_n), COUNT(DISTINCT v_day) FROM visits",
    "SELECT COUNT(*) FROM visits WHERE v_k IN (5, 1999, 4000)",
    "SELECT s_name, COUNT(*) FROM visits JOIN sites ON v_site = s_id "
    "WHERE v_day = DATE '2024-01-09' GROUP BY s_name ORDER BY s_name",
    "SELECT v_id, v_day, v_n FROM visits WHERE v_n = 3000000021 AND v_day <> DATE '2024-01-02' "
    "ORDER BY v_id LIMIT 20",
    "SELECT v_day, MAX(v_n) FROM visits WHERE v_n > 1000000007 GROUP BY v_day ORDER BY v_day",
    "SELECT COUNT(*) FROM visits WHERE v_day IN (SELECT v_day FROM visits WHERE v_id = 17)",
    "SELECT COUNT(*), MIN(v_day), MAX(v_day) FROM visits "
    "WHERE v_day >= DATE '2024-01-10' AND v_day < DATE '2024-01-20'",
    "SELECT v_id, v_day FROM visits WHERE v_day BETWEEN DATE '2023-12-01' AND DATE '2024-01-03' "
    "ORDER BY v_day DESC, v_id LIMIT 15",
    "SELECT v_site, MIN(v_day), MAX(v_day) FROM visits WHERE v_day > DATE '2024-02-01' "
    "GROUP BY v_site ORDER BY v_site",
    # v_n's five range filters against v_day's four: v_n orders the rows (veil.load.clusters)
    "SELECT COUNT(*) FROM visits WHERE v_n >= 2000000014",
    "SELECT COUNT(*), MIN(v_n) FROM visits WHERE v_n < 3000000021 AND v_n > 0",
    "SELECT v_k, COUNT(*) FROM visits WHERE v_n BETWEEN 1 AND 2000000014 "
    "GROUP BY v_k ORDER BY v_k LIMIT 5",
]
STATEMENTS = [
    "INSERT INTO visits VALUES (5000, 3, DATE '2030-06-01', 77, 4000), "
    "(5001, 3, DATE '2024-01-05', NULL, 5)",
    "UPDATE visits SET v_day = DATE '2031-01-01', v_n = -5 WHERE v_id % 100 = 1",
    "DELETE FROM visits WHERE v_day = DATE '2024-01-07'",
    "INSERT INTO visits VALUES (5002, NULL, NULL, NULL, NULL)",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def visits(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(
        request, tmp_path_factory.mktemp("bytes-form"), {"visits": VISITS, "sites": SITES}, QUERIES
    )
    yield session, plain
    session.close()


def _forms(session: Session) -> dict[str, str | None]:
    table = session.design.table("visits")
    return {
        e.source: e.params.get("form")  # type: ignore[misc]
        for e in table.encryptions
        if e.scheme == "DET"
    }


def test_few_valued_columns_and_join_groups_are_bytes_on_duckdb(
    visits: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, _ = visits
    forms = _forms(session)
    if session.backend.dialect == "duckdb":
        assert forms["v_day"] == forms["v_n"] == BYTES_FORM
        table = session.design.table("visits")
        day = next(e for e in table.encryptions if e.source == "v_day" and e.scheme == "DET")
        stored = session.backend.execute(f"SELECT {day.name} FROM {table.server_name} LIMIT 1")
        assert stored.schema.field(0).type == pa.binary()
        sites = session.design.table("sites").find("s_id", "DET")
        assert forms["v_site"] == BYTES_FORM  # joined with sites.s_id: one form for the group
        assert sites is not None and sites.params.get("form") == BYTES_FORM
        many = session.design.table("visits").find("v_id", "DET")
        assert many is None or many.params.get("form") is None  # 20,000 values: BIGINT
        assert forms["v_k"] is None  # 2,000 values, DET only: narrow BIGINT, faster to join
        ordered = table.find("v_day", "OPE")
        assert ordered is not None and ordered.params.get("form") == BYTES_FORM
        assert ordered.ope_binary  # compared, MIN/MAX-ed and sorted as binaries
        assert table.sort_by == "v_n"  # in row order its integers come in runs: int64
        runs = table.find("v_n", "OPE")
        assert runs is not None and runs.params.get("form") is None
    else:
        assert forms["v_day"] is None and forms["v_n"] is None and forms["v_site"] is None


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_match_plaintext(
    visits: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, plain = visits
    check_query(session, plain, sql)


def test_writes_of_unseen_values_and_nulls_then_queries(
    visits: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = visits
    for statement in STATEMENTS:
        session.run(statement)
        plain.execute(statement)
        for sql in QUERIES:
            check_query(session, plain, sql)


def test_small_tables_keep_bigint_keys(tmp_path: Path) -> None:
    """Below ``BYTES_FORM_MIN_ROWS`` rows a scope stays BIGINT (the suite lowers it to 0)."""
    source = tmp_path / "source"
    source.mkdir()
    for name, sql in {"visits": VISITS, "sites": SITES}.items():
        duckdb.sql(sql).write_parquet(str(source / f"{name}.parquet"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loader, "BYTES_FORM_MIN_ROWS", 20_008)  # the two tables hold 20,007
        load(str(source), f"duckdb:///{tmp_path}/server.duckdb", str(tmp_path / "c"), QUERIES)
    plain = duckdb.connect()
    for name in ("visits", "sites"):
        plain.execute(f"CREATE TABLE {name} AS SELECT * FROM '{source / name}.parquet'")
    session = Session(tmp_path / "c")
    try:
        forms = _forms(session)
        assert forms["v_day"] is None and forms["v_n"] is None and forms["v_site"] is None
        for sql in QUERIES:
            check_query(session, plain, sql)
    finally:
        session.close()


def test_bytes_round_trip_int64_with_nulls_and_offsets() -> None:
    values = pa.array([0, -1, None, 2**63 - 1, -(2**63), 12345], pa.int64())
    for start in (0, 1, 2):
        sliced = values.slice(start)
        assert as_int64(as_bytes(sliced)).to_pylist() == sliced.to_pylist()
    assert as_bytes(pa.array([1], pa.int64())).to_pylist() == [b"\x01" + b"\x00" * 7]


def test_ordered_bytes_sort_as_the_integers() -> None:
    values = pa.array([5, -(2**63), -1, None, 0, 2**63 - 1, 1, -7], pa.int64())
    stored = as_bytes(values, ordered=True)
    assert as_int64(stored, ordered=True).to_pylist() == values.to_pylist()
    pairs = [
        (v, b) for v, b in zip(values.to_pylist(), stored.to_pylist(), strict=True) if v is not None
    ]
    assert [v for v, _ in sorted(pairs, key=lambda p: p[1])] == sorted(v for v, _ in pairs)


@pytest.mark.parametrize("ordered", [False, True])
def test_bytes_read_in_place_match_the_cast(ordered: bool) -> None:
    """Without NULLs the values are read from the data buffer (slices, large binaries);
    a value of another width is still refused."""
    values = pa.array([0, -1, 2**63 - 1, -(2**63), 12345, 7], pa.int64())
    stored = as_bytes(values, ordered=ordered)
    for start in (0, 1, 3):
        for form in (stored, stored.cast(pa.large_binary())):
            sliced = form.slice(start)
            assert as_int64(sliced, ordered=ordered).to_pylist() == values.slice(start).to_pylist()
    with pytest.raises(pa.ArrowInvalid):
        as_int64(pa.array([b"\x00" * 8, b"\x00" * 7, b"\x00" * 9]), ordered=ordered)
