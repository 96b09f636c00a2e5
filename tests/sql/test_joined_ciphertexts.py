"""A server join's DET columns stay ciphertexts on the client where a plain scan's would.

``compare_ciphertexts`` and ``decrypt_outputs`` over the rows of a server join
(``pushdown_joins``): TPC-DS q22 joined ``inventory`` to ``date_dim`` on the
server and decrypted 2.3M ``inv_item_sk`` values only to join them with
``item`` on the client. The answers must be plaintext DuckDB's on every
backend; a key the answer shows, or compared with something else than a key
of its key scope, is decrypted, and so is every key it is compared with; a
grouped server join's keys are decrypted as before.
"""

from __future__ import annotations

import duckdb
import pytest

from tests.support.oracle import check_query
from veil.session.session import Session
from veil.sql.plan import SplitPlan

_JOIN = (
    "FROM nation, supplier, lineitem, orders WHERE s_nationkey = n_nationkey "
    "AND l_suppkey = s_suppkey AND l_orderkey = o_orderkey "
)
# (query, the columns that must be decrypted, None: any)
CASES = [
    # the supplier key joined on the client to the suppliers fetched alone
    (
        f"SELECT n_name, SUM(l_quantity) AS q {_JOIN} AND o_orderdate < DATE '1992-03-01' "
        "GROUP BY n_name ORDER BY n_name",
        None,
    ),
    # outputs of the joined rows' scans, decrypted in the result's rows
    (
        f"SELECT n_name, o_orderpriority, l_quantity {_JOIN} "
        "AND o_orderdate < DATE '1992-03-01' AND l_quantity > 40",
        None,
    ),
    # a key the answer shows: it and the keys it is compared with are decrypted
    (
        f"SELECT s_nationkey, n_name, SUM(l_quantity) AS q {_JOIN} "
        "AND o_orderdate < DATE '1992-03-01' GROUP BY s_nationkey, n_name ORDER BY 1",
        {"supplier.s_nationkey", "nation.n_nationkey"},
    ),
    # a key in an expression needs its value
    (
        f"SELECT COUNT(*) {_JOIN} AND o_orderdate < DATE '1992-03-01' AND l_suppkey % 7 = 3",
        {"lineitem.l_suppkey", "supplier.s_suppkey"},
    ),
]


def _kept_joined(plan: SplitPlan | None) -> set[str]:
    """The key columns of server-joined scans kept encrypted (outputs decrypted late aside)."""
    assert plan is not None and plan.pushdown
    late = {(id(o.scan), o.column) for o in plan.late_outputs}
    return {
        f"{s.table.name}.{c}"
        for s in plan.scans
        if s.joined is not None
        for c in s.ciphertext
        if (id(s), c) not in late
    }


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_answers_match_plaintext(
    any_session: Session, plain: duckdb.DuckDBPyConnection, case: tuple[str, set[str] | None]
) -> None:
    for _ in range(2):  # the second run reuses the cached plan
        check_query(any_session, plain, case[0])


@pytest.mark.parametrize("case", [c for c in CASES if c[1] is not None])
def test_decrypted_where_the_value_is_read(
    fresh_session: Session, case: tuple[str, set[str] | None]
) -> None:
    plan = fresh_session.run(case[0]).plan
    assert plan is not None and plan.pushdown
    kept = {f"{s.table.name}.{c}" for s in plan.scans for c in s.ciphertext}
    assert case[1] is not None and not kept & case[1]


def test_a_joined_key_compared_on_the_client_stays_encrypted(fresh_session: Session) -> None:
    plan = fresh_session.run(CASES[0][0]).plan
    assert plan is not None
    assert _kept_joined(plan) & {"supplier.s_nationkey", "lineitem.l_suppkey"}


def test_joined_outputs_are_decrypted_late(fresh_session: Session) -> None:
    plan = fresh_session.run(CASES[1][0]).plan
    assert plan is not None
    joined = {id(s) for s in plan.scans if s.joined is not None}
    assert [o.column for o in plan.late_outputs if id(o.scan) in joined]
