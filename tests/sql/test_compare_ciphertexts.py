"""Keys the client only compares, groups or counts stay encrypted (``compare_ciphertexts``).

The answers must be plaintext DuckDB's on every backend, and a key whose
value the answer shows (an output, read through a derived table) or that
is compared with something else than a key of its key scope is decrypted,
together with the keys it is compared with.
"""

from __future__ import annotations

import duckdb
import pytest

from tests.support.oracle import check_query
from tests.support.tpch import tpch_queries
from veil.session.session import Session
from veil.sql.plan import SplitPlan

TPCH = dict(tpch_queries())
# (query, the columns kept encrypted)
CASES = [
    (TPCH["q13"], {"customer.c_custkey", "orders.o_custkey", "orders.o_orderkey"}),
    # the NULL-extended rows of an outer join: IS NULL on a ciphertext
    (
        "SELECT COUNT(*) FROM customer LEFT JOIN orders ON c_custkey = o_custkey "
        "AND o_comment LIKE '%pending%deposits%' WHERE o_orderkey IS NULL",
        {"customer.c_custkey", "orders.o_custkey", "orders.o_orderkey"},
    ),
    # COUNT(DISTINCT) of a key, grouped by a text column the answer shows
    (
        "SELECT c_mktsegment, COUNT(DISTINCT o_custkey), COUNT(o_orderkey) FROM customer, orders "
        "WHERE c_custkey = o_custkey AND o_comment LIKE '%furiously%' GROUP BY c_mktsegment "
        "ORDER BY c_mktsegment",
        {"customer.c_custkey", "orders.o_custkey", "orders.o_orderkey"},
    ),
    # the customer key is an output: it, and the key it is joined with, are decrypted
    (
        "SELECT c_custkey, COUNT(o_orderkey) FROM customer LEFT JOIN orders ON c_custkey = "
        "o_custkey AND o_comment LIKE '%pending%deposits%' GROUP BY c_custkey "
        "ORDER BY 2 DESC, 1 LIMIT 5",
        {"orders.o_orderkey"},
    ),
    # a derived table's key read by the outer query
    (
        "SELECT MAX(k), COUNT(*) FROM (SELECT c_custkey AS k, COUNT(o_orderkey) AS n FROM "
        "customer LEFT JOIN orders ON c_custkey = o_custkey AND o_comment LIKE '%pending%' "
        "GROUP BY c_custkey) AS t WHERE n > 2",
        {"orders.o_orderkey"},
    ),
    # ... and one it does not read
    (
        "SELECT MAX(n), COUNT(*) FROM (SELECT c_custkey AS k, COUNT(o_orderkey) AS n FROM "
        "customer LEFT JOIN orders ON c_custkey = o_custkey AND o_comment LIKE '%pending%' "
        "GROUP BY c_custkey) AS t",
        {"customer.c_custkey", "orders.o_custkey", "orders.o_orderkey"},
    ),
    # a key in an expression needs its value
    (
        "SELECT COUNT(*) FROM customer, orders WHERE c_custkey = o_custkey "
        "AND o_comment LIKE '%pending%deposits%' AND c_custkey % 7 = 3",
        set(),
    ),
]


# a key through the outputs of CTEs and derived tables (TPC-DS q01's, q30's, q81's
# per-customer totals joined with customer)
_TOTALS = (
    "WITH t AS (SELECT o_custkey AS k, o_totalprice AS s FROM orders "
    "WHERE o_comment LIKE '%pending%') "
)
CASES += [
    (
        _TOTALS + "SELECT c_mktsegment, SUM(s) FROM t, customer WHERE t.k = c_custkey "
        "GROUP BY c_mktsegment ORDER BY 1",
        {"customer.c_custkey", "orders.o_custkey"},
    ),
    # the CTE under two aliases, correlated on the key
    (
        _TOTALS + "SELECT c_mktsegment, COUNT(*) FROM t AS t1, customer WHERE t1.k = c_custkey "
        "AND t1.s >= (SELECT AVG(s) FROM t AS t2 WHERE t2.k = t1.k) GROUP BY 1 ORDER BY 1",
        {"customer.c_custkey", "orders.o_custkey"},
    ),
    # through a second CTE, and an output read by nobody
    (
        _TOTALS + ", u AS (SELECT k AS kk, s, k AS unread FROM t WHERE s > 1000) "
        "SELECT COUNT(*), SUM(s) FROM u, customer WHERE u.kk = c_custkey AND c_acctbal > 0",
        {"customer.c_custkey", "orders.o_custkey"},
    ),
    # a UNION ALL of two SELECTs (TPC-DS q04's year totals by channel), its outputs by position
    (
        "WITH t AS (SELECT o_custkey AS k, o_totalprice AS s FROM orders WHERE o_orderstatus = 'F' "
        "UNION ALL SELECT o_custkey, o_totalprice FROM orders WHERE o_orderstatus = 'P') "
        "SELECT c_mktsegment, COUNT(*) FROM t, customer WHERE t.k = c_custkey GROUP BY 1 ORDER BY 1",
        {"customer.c_custkey", "orders.o_custkey", "orders.o_totalprice"},
    ),
    # ... where one SELECT computes the output: plaintext
    (
        "WITH t AS (SELECT o_custkey AS k FROM orders WHERE o_orderstatus = 'F' "
        "UNION ALL SELECT o_custkey + 0 FROM orders WHERE o_orderstatus = 'P') "
        "SELECT COUNT(*) FROM t, customer WHERE t.k = c_custkey",
        set(),
    ),
    # outputs renamed by a column list, and a recursive CTE: not followed
    (
        "WITH t(a, b) AS (SELECT o_custkey, o_totalprice FROM orders "
        "WHERE o_comment LIKE '%pending%') "
        "SELECT COUNT(*) FROM t, customer WHERE t.a = c_custkey AND t.a < 100",
        {"orders.o_totalprice"},  # b: read by nobody
    ),
    (
        "SELECT COUNT(*) FROM (SELECT o_custkey, o_totalprice FROM orders "
        "WHERE o_comment LIKE '%pending%') AS t(a, b), customer WHERE t.a = c_custkey AND t.a < 100",
        {"orders.o_totalprice"},  # b: read by nobody
    ),
    (
        "WITH RECURSIVE r(k, depth) AS (SELECT n_nationkey AS k, 0 AS depth FROM nation "
        "WHERE n_regionkey = 1 UNION SELECT n.n_nationkey, 1 FROM nation AS n JOIN r "
        "ON n.n_regionkey = r.k % 5) SELECT COUNT(*) FROM r, supplier WHERE r.k = s_nationkey",
        set(),
    ),
    # the output the answer shows, compared with a constant, or read by a star
    (
        _TOTALS + "SELECT t.k, s FROM t, customer WHERE t.k = c_custkey ORDER BY s DESC, 1 LIMIT 5",
        set(),
    ),
    (  # the key computed with inside the CTE: its output is plaintext
        "WITH t AS (SELECT o_custkey AS k, o_totalprice AS s FROM orders "
        "WHERE o_comment LIKE '%pending%' AND o_custkey % 3 = 0) "
        "SELECT COUNT(*) FROM t, customer WHERE t.k = c_custkey",
        {"orders.o_totalprice"},  # an output nobody reads
    ),
    (
        _TOTALS + "SELECT COUNT(*) FROM t, customer WHERE t.k = c_custkey AND t.k < 100",
        {"orders.o_totalprice"},  # an output nobody reads
    ),
    (
        _TOTALS + "SELECT * FROM (SELECT t.k, t.s FROM t, customer WHERE t.k = c_custkey) AS x "
        "ORDER BY 2 DESC, 1 LIMIT 5",
        set(),
    ),
]


def _kept(plan: SplitPlan | None) -> set[str]:
    assert plan is not None and plan.pushdown  # a failed split plan would hide the pass
    return {f"{s.table.name}.{c}" for s in plan.scans for c in s.ciphertext}


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_answers_match_plaintext(
    any_session: Session, plain: duckdb.DuckDBPyConnection, case: tuple[str, set[str]]
) -> None:
    for _ in range(2):  # the second run reuses the cached plan
        check_query(any_session, plain, case[0])


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_which_keys_stay_encrypted(session: Session, case: tuple[str, set[str]]) -> None:
    sql, kept = case
    assert _kept(session.run(sql).plan) == kept
