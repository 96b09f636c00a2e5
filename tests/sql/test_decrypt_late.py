"""An IN-subquery groups and filters its keys' ciphertexts; only the keys it keeps are decrypted.

``veil.sql.passes.decrypt_late``: the answers must be plaintext DuckDB's for
integer (narrow and bytes-form DET), text, date and decimal keys, with NULL
keys, on every backend; and the pass must stay away from a subquery whose
answer could depend on the ciphertexts (float keys, the key inside an
aggregate or a comparison, ORDER BY with LIMIT, a computed key, a
correlated subquery).
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.support.oracle import check_query, load_tables
from tests.support.tpch import tpch_queries
from veil.frontend.explain import explain
from veil.session.session import Session
from veil.sql.plan import SplitPlan

EVENTS = """
SELECT i AS e_id,
       CASE WHEN i % 50 = 0 THEN NULL ELSE i % 997 END AS e_key,
       CASE WHEN i % 37 = 0 THEN NULL ELSE 'k' || (i % 311) END AS e_tag,
       DATE '2024-01-01' + (i % 60)::INT AS e_day,
       ((i % 7) / 4)::DECIMAL(10, 2) AS e_amt,
       (i % 5)::DOUBLE / 2 AS e_score,
       i % 40 AS e_n,
       i % 6 AS e_few
FROM range(30000) t(i)
"""
ITEMS = """
SELECT i AS t_id, i % 1200 - 100 AS t_key, 'k' || (i % 400) AS t_tag,
       DATE '2024-01-01' + (i % 90)::INT AS t_day, ((i % 9) / 4)::DECIMAL(10, 2) AS t_amt,
       (i % 9)::DOUBLE / 2 AS t_score, i % 8 AS t_few
FROM range(3000) t(i)
"""
LATE = [
    # the Q18 shape: GROUP BY the key, HAVING on a sum of another column
    "SELECT COUNT(*) FROM items WHERE t_key IN "
    "(SELECT e_key FROM events GROUP BY e_key HAVING SUM(e_n) > 600)",
    # text keys, a NULL group among them
    "SELECT t_tag, COUNT(*) FROM items WHERE t_tag IN "
    "(SELECT e_tag FROM events GROUP BY e_tag HAVING MEDIAN(e_n) > 19) GROUP BY t_tag ORDER BY t_tag",
    # no GROUP BY: the kept rows' keys, each decrypted once
    "SELECT COUNT(*) FROM items WHERE t_day IN (SELECT e_day FROM events WHERE e_n > 30)",
    "SELECT COUNT(*) FROM items WHERE t_key IN (SELECT DISTINCT e_key FROM events WHERE e_n < 2)",
    # the NULL key's group passes: IN then gives NULL, not TRUE, for the other rows
    # (MEDIAN: an aggregate the server cannot compute, so the subquery runs on the client)
    "SELECT COUNT(*) FROM items WHERE t_key IN "
    "(SELECT e_key FROM events GROUP BY e_key HAVING MEDIAN(e_id) > 14000)",
    # grouped by two columns, HAVING on the other one
    "SELECT t_id FROM items WHERE t_key IN (SELECT e_key FROM events GROUP BY e_key, e_n "
    "HAVING MEDIAN(e_id) > 15000 AND e_n = 7) ORDER BY t_id LIMIT 10",
    "SELECT t_amt, COUNT(*) FROM items WHERE t_amt IN "
    "(SELECT e_amt FROM events GROUP BY e_amt HAVING MEDIAN(e_id) < 14990) GROUP BY t_amt "
    "ORDER BY t_amt",
    # few values (a bytes-form DET on DuckDB)
    "SELECT t_few, COUNT(*) FROM items WHERE t_few IN "
    "(SELECT e_few FROM events GROUP BY e_few HAVING MEDIAN(e_id) > 14998) GROUP BY 1 ORDER BY 1",
]
NOT_LATE = [
    "SELECT COUNT(*) FROM items WHERE t_score IN "
    "(SELECT e_score FROM events GROUP BY e_score HAVING MEDIAN(e_n) > 10)",
    "SELECT COUNT(*) FROM items WHERE t_key IN "
    "(SELECT e_key FROM events GROUP BY e_key HAVING MEDIAN(e_n) > 10 AND MAX(e_key) > 500)",
    "SELECT COUNT(*) FROM items WHERE t_key IN "
    "(SELECT e_key FROM events WHERE CAST(e_key AS VARCHAR) LIKE '%7%' GROUP BY e_key "
    "HAVING MEDIAN(e_n) > 9)",
    "SELECT COUNT(*) FROM items WHERE t_key IN "
    "(SELECT e_key FROM events WHERE e_n = 3 ORDER BY e_key LIMIT 5)",
    "SELECT COUNT(*) FROM items WHERE t_key IN (SELECT e_key + 1 FROM events WHERE e_n = 4)",
    "SELECT COUNT(*) FROM items WHERE t_key IN (SELECT e_key FROM events WHERE e_n = t_id % 40)",
]
# grouped derived tables and CTEs (MEDIAN: an aggregate the server cannot compute)
LATE_GROUPS = [
    # the Q15 shape: a CTE read twice, joined on its key and compared with its MAX
    "WITH r AS (SELECT e_key AS k, MEDIAN(e_n) AS m FROM events WHERE e_few < 4 GROUP BY e_key) "
    "SELECT t_id, t_key, m FROM items JOIN r ON t_key = k WHERE m = (SELECT MAX(m) FROM r) "
    "ORDER BY t_id",
    "SELECT g.tag, g.m FROM (SELECT e_tag AS tag, MEDIAN(e_n) AS m FROM events GROUP BY e_tag) "
    "AS g WHERE g.m > 19 ORDER BY g.tag NULLS FIRST",
    "SELECT d, m FROM (SELECT e_day AS d, MEDIAN(e_amt) AS m FROM events GROUP BY e_day "
    "HAVING MEDIAN(e_n) > 19) AS x ORDER BY d",
    "SELECT * FROM (SELECT e_key, e_n, MEDIAN(e_id) AS m FROM events GROUP BY e_key, e_n) AS x "
    "WHERE m > 29000 ORDER BY e_key NULLS FIRST, e_n",
    "SELECT f, m FROM (SELECT e_few AS f, MEDIAN(e_id) AS m FROM events GROUP BY e_few) AS x "
    "ORDER BY f",
    "SELECT a, m FROM (SELECT e_amt AS a, MEDIAN(e_id) AS m FROM events GROUP BY e_amt) AS x "
    "ORDER BY a",
    # an unnamed output keeps its name through the late table
    "SELECT * FROM (SELECT e_key, MEDIAN(e_id) FROM events GROUP BY e_key) AS x "
    "ORDER BY 1 NULLS FIRST LIMIT 5",
]
NOT_LATE_GROUPS = [
    "SELECT s, m FROM (SELECT e_score AS s, MEDIAN(e_id) AS m FROM events GROUP BY e_score) AS x "
    "ORDER BY s",
    "SELECT * FROM (SELECT e_key, MEDIAN(e_id) AS m, MAX(e_key) AS top FROM events "
    "GROUP BY e_key) AS x ORDER BY e_key NULLS FIRST LIMIT 5",
    "SELECT * FROM (SELECT e_key, MEDIAN(e_id) AS m FROM events GROUP BY e_key "
    "ORDER BY e_key LIMIT 5) AS x ORDER BY e_key",
]
OTHERS = [
    "SELECT COUNT(*) FROM items WHERE t_key NOT IN (SELECT e_key FROM events WHERE e_n = 3)",
]


@pytest.fixture(
    scope="module",
    params=[
        "duckdb",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("spark", marks=pytest.mark.spark),
    ],
)
def events(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(
        request,
        tmp_path_factory.mktemp("decrypt-late"),
        {"events": EVENTS, "items": ITEMS},
        LATE + NOT_LATE + LATE_GROUPS + NOT_LATE_GROUPS + OTHERS,
    )
    yield session, plain
    session.close()


def _late(plan: SplitPlan | None) -> int:
    assert plan is not None and plan.pushdown  # a failed split plan would hide the pass
    return sum(len(s.late) for s in plan.scans)


@pytest.mark.parametrize("sql", LATE + NOT_LATE + LATE_GROUPS + NOT_LATE_GROUPS + OTHERS)
def test_answers_match_plaintext(
    events: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, plain = events
    for _ in range(2):  # the second run reuses the cached plan
        check_query(session, plain, sql)


@pytest.mark.parametrize("sql", LATE)
def test_keys_are_grouped_as_ciphertexts(
    events: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, _ = events
    plan = session.run(sql).plan
    assert _late(plan) == 1
    assert plan is not None
    kept = [c for s in plan.scans for c in s.ciphertext]
    assert len(kept) == 1 and kept[0].startswith("e_")


@pytest.mark.parametrize("sql", LATE_GROUPS)
def test_derived_tables_group_their_keys_as_ciphertexts(
    events: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, plain = events
    result = session.run(sql)
    assert _late(result.plan) == 1
    assert result.plan is not None
    assert all(late.groups for s in result.plan.scans for late in s.late)
    assert result.table.column_names == [d[0] for d in plain.execute(sql).description]


@pytest.mark.parametrize("sql", NOT_LATE + NOT_LATE_GROUPS)
def test_keys_the_answer_could_depend_on_are_decrypted(
    events: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, _ = events
    assert _late(session.run(sql).plan) == 0


@pytest.mark.parametrize(
    ("query", "column", "decrypted"),
    [
        ("q18", "l_orderkey", "its distinct keys decrypted"),  # an IN-subquery's
        ("q15", "l_suppkey", "its rows, key decrypted"),  # a grouped CTE's
    ],
)
def test_tpch_decrypts_only_the_kept_keys(
    any_session: Session, query: str, column: str, decrypted: str
) -> None:
    sql = dict(tpch_queries())[query]
    plan = any_session.run(sql).plan
    assert _late(plan) == 1
    text = explain(any_session, sql)
    assert f"fetch {column} via DET (kept encrypted on the client)" in text
    assert f"{decrypted} -> __veil_late_0" in text
