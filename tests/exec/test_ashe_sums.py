"""SUM and AVG on the server under ASHE (Seabed), against plain DuckDB, on both backends.

``readings`` (the Paillier tests' table) has negative values, NULLs in summed
columns, a group with few rows, a group whose summed column is always NULL,
and ``w``: BIGINTs near the type's ends, stored as two words, whose sums
leave int64. Row ids: sequential at load, fresh for every row an INSERT or
UPDATE writes, disjoint between clients writing at once.
"""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest

from tests.exec.conftest import LoadOnServer
from tests.exec.test_hom import QUERIES as HOM_QUERIES
from tests.exec.test_hom import READINGS
from tests.support.oracle import check_query
from veil.backends import connect
from veil.session.row_ids import allocate
from veil.session.session import Session

WIDE = f"""
SELECT *, CASE WHEN id % 11 = 0 THEN NULL
               ELSE CAST(9223372036854775807 - id * 1000003 AS BIGINT) * (1 - 2 * (id % 3 = 0)::INT)
          END AS w
FROM ({READINGS})
"""
QUERIES = [
    *HOM_QUERIES,
    "SELECT g, SUM(w), AVG(w), COUNT(w) FROM readings GROUP BY g",
    "SELECT SUM(w), SUM(a), SUM(b) FROM readings WHERE id % 3 = 0",
    "SELECT SUM(w + b), AVG(-w) FROM readings WHERE b > 0",
]


@pytest.fixture(scope="module")
def wide_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("wide-readings")
    duckdb.sql(WIDE).write_parquet(str(source / "readings.parquet"))
    return source


@pytest.fixture(scope="module")
def plain(wide_dir: Path, ashe_session: Session) -> duckdb.DuckDBPyConnection:
    """Plaintext DuckDB with the same rows, one per backend (the tests write to both)."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE readings AS SELECT * FROM '{wide_dir / 'readings.parquet'}'")
    return con


@pytest.fixture(scope="module")
def ashe_session(load_on_server: LoadOnServer, wide_dir: Path) -> Session:
    return load_on_server(wide_dir, "ashe", QUERIES, batch_rows=700)  # ids continue across batches


def test_the_design_splits_wide_values_into_two_words(ashe_session: Session) -> None:
    table = ashe_session.design.table("readings")
    assert table.sums is not None and table.hom is None
    words = dict(zip(table.sums.sources, map(len, table.sums.columns), strict=True))
    assert words["w"] == 2 and words["b"] == 1 and words["a"] == 1


@pytest.mark.parametrize("sql", QUERIES)
def test_sums_match_plaintext(
    ashe_session: Session, plain: duckdb.DuckDBPyConnection, sql: str
) -> None:
    check_query(ashe_session, plain, sql)


@pytest.mark.parametrize("sql", HOM_QUERIES[:7] + QUERIES[-3:])
def test_sums_run_on_the_server_in_one_statement(ashe_session: Session, sql: str) -> None:
    result = ashe_session.run(sql)
    assert result.plan is not None and result.plan.scans[0].aggregation is not None
    assert len(result.stats.remote_sql) == 1 and "bit_or" in result.stats.remote_sql[0].lower()
    assert result.stats.bytes_received < 100_000  # a row per group and block, not 3000 rows


def test_explain_shows_the_ashe_step(ashe_session: Session) -> None:
    from veil.frontend.explain import explain

    assert "server ASHE: per group and block of 64 row ids" in explain(ashe_session, QUERIES[0])


def _row_ids(session: Session, where: str = "") -> list[int]:
    table = session.design.table("readings")
    sql = f'SELECT "{table.row_id}" FROM "{table.server_name}" {where} ORDER BY 1'
    return [int(v) for v in session.backend.execute(sql).column(0).to_pylist()]


def test_ids_are_sequential_and_writes_take_fresh_ones(
    ashe_session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    before = _row_ids(ashe_session)
    assert before == list(range(len(before)))  # load order, across batches
    statements = [
        "INSERT INTO readings VALUES (5000, 'even', 12.50, 3, 7, -9223372036854775000), "
        "(5001, 'new', NULL, -4, 1, 9223372036854775000)",
        "UPDATE readings SET b = b + 1, w = w // 2 WHERE id % 250 = 3 OR id = 5001",
        "DELETE FROM readings WHERE id = 4",
    ]
    for statement in statements:
        plain.execute(statement)
        ashe_session.run(statement)
    after = _row_ids(ashe_session)
    assert len(after) == len(set(after)) == len(before) + 1
    first = len(before)
    # ids first, first + 1 inserted; 13 rows updated (one of them first + 1) got fresh ids
    assert [i for i in after if i >= first] == [first, *list(range(first + 2, first + 15))]
    for sql in QUERIES:
        check_query(ashe_session, plain, sql)


def test_concurrent_writers_get_disjoint_ids(ashe_session: Session) -> None:
    """Several connections take ids at once: no id is handed out twice."""
    table = ashe_session.design.table("readings")
    taken: list[tuple[int, int]] = []
    failures: list[BaseException] = []

    def writer() -> None:
        backend = connect(ashe_session.backend.url)
        try:
            for count in (1, 7, 64, 3) * 5:
                taken.append((allocate(backend, table, count), count))
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            backend.close()

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    ids = [first + k for first, count in taken for k in range(count)]
    assert len(ids) == len(set(ids)) == 4 * 5 * 75
    assert min(ids) >= max(_row_ids(ashe_session)) + 1


def test_concurrent_sessions_insert_and_sum_exactly(
    ashe_session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    """Clients inserting into one table at once: every row lands once, sums stay exact."""
    url_client = ashe_session.client.path
    rows = [f"({6000 + i}, 'busy', {i}.25, {i}, 1, {i * 10**17})" for i in range(40)]
    failures: list[BaseException] = []

    def client(part: list[str]) -> None:
        session = Session(url_client)
        try:
            for row in part:
                session.run(f"INSERT INTO readings VALUES {row}")
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            session.close()

    parts = [rows[i::4] for i in range(4)]
    threads = [threading.Thread(target=client, args=(part,)) for part in parts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    for row in rows:
        plain.execute(f"INSERT INTO readings VALUES {row}")
    ids = _row_ids(ashe_session)
    assert len(ids) == len(set(ids))
    for sql in [*QUERIES[-3:], "SELECT g, SUM(a), SUM(w), COUNT(*) FROM readings GROUP BY g"]:
        check_query(ashe_session, plain, sql)


def test_words_fit_the_loaded_values(ashe_session: Session) -> None:
    """Words sized for 4x the data's largest |value| (b: |b| <= 60); 7-bit counters."""
    sums = ashe_session.design.table("readings").sums
    assert sums is not None and sums.limits is not None and sums.overflow_column is not None
    index = sums.sources.index("b")
    assert sums.limits[index] == 4 * 60
    assert sums.word_bits is not None and sums.word_bits[index] == [(64 * 240).bit_length() + 1]
    # a NULL counter for each source with NULLs at load; b had none (field 0: flagged)
    assert sums.null_fields is not None and sums.null_fields[index] == 0
    field = sums.null_fields[sums.sources.index("a")]  # a has NULLs
    if ashe_session.backend.compresses_repeated_bytes:  # bit-packed: a's columns are counted
        assert field is None
    else:
        assert field is not None and field >= 1
    counters = [f for f in sums.null_fields if f]
    assert sorted(counters) == list(range(1, len(counters) + 1))
    assert sums.overflow_bits == 7 * (1 + len(counters))


def test_values_beyond_the_loaded_range_are_summed_exactly(
    ashe_session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    """A later value past a word's range is flagged: sums over it run on the client."""
    statements = [
        "INSERT INTO readings VALUES (8000, 'even', 9999.99, 2000000000, 5, 1)",
        "UPDATE readings SET b = -2000000000 WHERE id = 17",
    ]
    for statement in statements:
        plain.execute(statement)
        ashe_session.run(statement)
    for sql in QUERIES:
        check_query(ashe_session, plain, sql)
    # sums that do not reach the flagged rows stay on the server
    result = ashe_session.run("SELECT SUM(b) FROM readings WHERE g = 'rare'")
    assert result.plan is not None and result.plan.scans[0].aggregation is not None


def test_the_server_counts_rows_and_the_flags_word_counts_nulls(ashe_session: Session) -> None:
    """On PostgreSQL no column of a summed expression is tested for NULL on the server:
    COUNT(*) only, the flags word counting the NULLs. Where the server bit-packs the flags
    word (DuckDB, Spark's Parquet) a source with per-row columns has no counter there: the
    server tests them."""
    sql = "SELECT g, SUM(a), AVG(a * b), COUNT(*) FROM readings WHERE g = 'rare' GROUP BY g"
    result = ashe_session.run(sql)
    (statement,) = result.stats.remote_sql
    tested = "is null" in statement.lower()
    assert tested == ashe_session.backend.compresses_repeated_bytes
    assert "count(*)" in statement.lower()


def test_a_null_where_the_load_had_none_is_summed_exactly(
    ashe_session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    """``b`` had no NULL at load: a later one is flagged, and sums over it run on the client."""
    statement = "INSERT INTO readings VALUES (8100, 'rare', 1.00, NULL, 5, 2)"
    plain.execute(statement)
    ashe_session.run(statement)
    for sql in [*QUERIES, "SELECT g, SUM(b), AVG(b), COUNT(b) FROM readings GROUP BY g"]:
        check_query(ashe_session, plain, sql)
    result = ashe_session.run("SELECT g, SUM(b), AVG(b) FROM readings WHERE g = 'nulls' GROUP BY g")
    assert result.plan is not None and result.plan.scans[0].aggregation is not None


def test_a_column_only_summed_under_ashe_is_stored_in_blocks() -> None:
    """TPC-H's l_tax: read only inside a sum the server adds, it never comes back per row."""
    from veil.ciphers.columns import available_schemes
    from veil.design.model import BLOCKS, RND, Column
    from veil.designer.greedy import greedy_design

    schema = {
        "t": [Column("k", "INTEGER"), Column("x", "DECIMAL(15,2)"), Column("y", "DECIMAL(15,2)")]
    }
    workload = ["SELECT k, SUM(x * (1 + y)) FROM t GROUP BY k", "SELECT SUM(x) / 2 FROM t"]

    def schemes(sums: str) -> dict[str, set[str]]:
        design = greedy_design(schema, workload, available_schemes(), "", sums=sums)
        table = design.tables["t"]
        return {c.name: {e.scheme for e in table.encryptions_of(c.name)} for c in schema["t"]}

    assert schemes("ashe")["y"] == {BLOCKS} and schemes("ashe")["x"] == {BLOCKS}
    assert schemes("none")["y"] == {RND}  # summed by the client: fetched per row
