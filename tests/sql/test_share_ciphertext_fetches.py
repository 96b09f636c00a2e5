"""Fetches of the same rows that keep the same columns as ciphertexts are one statement.

TPC-DS q75's UNION ALL branches each fetched all of date_dim and the Books
items with their keys left encrypted (``compare_ciphertexts``), and q83's
CTEs each fetched item: ``share_fetches`` left every scan with a ciphertext
column alone. A column's ciphertext is its table's one fetchable encryption,
whichever scan fetches it, so scans keeping the same columns encrypted read
one local table; scans keeping others still fetch their own.
"""

from __future__ import annotations

import duckdb

from tests.support.oracle import check_query
from veil.session.session import Session

# the branches' part scans: the same filter, p_partkey only compared; the outer joins
# keep each branch's scans apart (no server join), as in q75
SHARED = (
    "SELECT COUNT(*), SUM(x), COUNT(y) FROM (SELECT l_quantity AS x, o_orderkey AS y "
    "FROM lineitem JOIN part ON l_partkey = p_partkey LEFT JOIN orders "
    "ON l_orderkey = o_orderkey AND o_totalprice < 5000 "
    "WHERE p_brand = 'Brand#12' AND l_shipdate < DATE '1992-03-01' "
    "UNION ALL SELECT ps_availqty, s_suppkey FROM partsupp JOIN part ON ps_partkey = p_partkey "
    "LEFT JOIN supplier ON ps_suppkey = s_suppkey AND s_acctbal < 0 "
    "WHERE p_brand = 'Brand#12' AND ps_availqty < 50) t"
)


def test_answers_match_plaintext(any_session: Session, plain: duckdb.DuckDBPyConnection) -> None:
    for _ in range(2):  # the second run reuses the cached plan
        check_query(any_session, plain, SHARED)


def test_scans_share_only_the_same_ciphertexts(session: Session) -> None:
    plan = session.run(SHARED).plan
    assert plan is not None
    for scan in plan.scans:
        if scan.same_rows is not None:
            assert scan.ciphertext == scan.same_rows.ciphertext
