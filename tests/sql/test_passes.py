"""Each planner pass alone: the plan before and after it, in SQL text.

The state is built by the passes before the one under test; ``shape`` then
writes the local plan and every scan's RemoteSQL with readable names
(``det_l_returnflag`` for the DET column of ``l_returnflag``, the table's
plaintext name for its server table, ``?`` for a ciphertext parameter).
The end-to-end oracle (test_oracle.py, tests/fuzz) checks the answers.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sqlglot import exp

import veil.sql.planner as planner
from tests.support.oracle import without
from tests.support.tpch import tpch_queries
from veil.session.session import Session
from veil.sql.parse import parse_statement, qualify_query
from veil.sql.passes import PASSES
from veil.sql.passes.compare_ciphertexts import compare_ciphertexts
from veil.sql.passes.count_repeats import count_repeats
from veil.sql.passes.decrypt_late import decrypt_late
from veil.sql.passes.decrypt_outputs import decrypt_outputs
from veil.sql.passes.drop_pushed_filters import drop_pushed_filters
from veil.sql.passes.estimate_rows import estimate_rows
from veil.sql.passes.fetch_expressions import fetch_expressions
from veil.sql.passes.find_scans import find_scans
from veil.sql.passes.plan_bind_filters import plan_bind_filters
from veil.sql.passes.plan_key_ranges import plan_key_ranges
from veil.sql.passes.prune_exists_projections import prune_exists_projections
from veil.sql.passes.pushdown_aggregates import pushdown_aggregates
from veil.sql.passes.pushdown_join_aggregates import _key_encryption, pushdown_join_aggregates
from veil.sql.passes.pushdown_joined_subqueries import pushdown_joined_subqueries
from veil.sql.passes.pushdown_joins import pushdown_joins
from veil.sql.passes.pushdown_predicates import pushdown_predicates
from veil.sql.passes.pushdown_subqueries import pushdown_subqueries
from veil.sql.passes.reduce_joins import reduce_joins
from veil.sql.passes.reduce_outer_joins import reduce_outer_joins
from veil.sql.passes.rename_scans import rename_scans
from veil.sql.passes.share_aggregates import share_aggregates
from veil.sql.passes.share_fetches import share_fetches
from veil.sql.passes.simplify_outer_joins import simplify_outer_joins
from veil.sql.passes.trim_reductions import trim_reductions
from veil.sql.remote import scan_statement
from veil.sql.state import Pass, PlanState

TPCH = dict(tpch_queries())


def state_before(session: Session, sql: str, target: Pass) -> PlanState:
    """The state the passes before ``target`` leave for ``sql``."""
    qualified = qualify_query(parse_statement(sql), session.design.plaintext_schema())
    assert qualified is not None
    state = PlanState(qualified, session.design, session)
    for planner_pass in PASSES[: PASSES.index(target)]:
        state = planner_pass(state)
    return state


def readable(session: Session, statement: exp.Expr) -> str:
    names: dict[str, str] = {}
    for table in session.design.tables.values():
        names[table.server_name] = table.name
        names[table.row_id] = "rid"
        for enc in table.encryptions:
            names[enc.name] = f"{enc.scheme.lower()}_{enc.source}"
        if table.hom is not None:
            names[table.hom.server_name] = f"{table.name}_hom"
            names[table.hom.slot_column] = "slot"

    def rename(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Identifier) and node.name in names:
            return exp.to_identifier(names[node.name], quoted='"' in names[node.name])
        if isinstance(node, exp.Placeholder):
            return exp.var("?")
        return node

    return statement.transform(rename).sql(dialect="duckdb")


def shape(session: Session, state: PlanState) -> list[str]:
    lines = [f"local: {state.query.sql(dialect='duckdb')}"]
    for scan in state.scans.values():
        if scan.joined is None:
            lines.append(f"{scan.alias}: {readable(session, scan_statement(scan))}")
    return lines


def apply(session: Session, sql: str, target: Pass) -> tuple[list[str], list[str]]:
    state = state_before(session, sql, target)
    before = shape(session, state)
    return before, shape(session, target(state))


def test_passes_are_in_order() -> None:
    assert (
        prune_exists_projections,
        simplify_outer_joins,
        find_scans,
        pushdown_predicates,
        pushdown_subqueries,
        reduce_joins,
        reduce_outer_joins,
        pushdown_aggregates,
        pushdown_join_aggregates,
        pushdown_joins,
        pushdown_joined_subqueries,
        trim_reductions,
        estimate_rows,
        drop_pushed_filters,
        plan_bind_filters,
        plan_key_ranges,
        decrypt_late,
        compare_ciphertexts,
        decrypt_outputs,
        fetch_expressions,
        share_fetches,
        share_aggregates,
        count_repeats,
        rename_scans,
    ) == PASSES


def test_estimate_rows_from_the_load_statistics(session: Session) -> None:
    """A range over an OPE column keeps its share of the table (from the recorded quantiles);
    a scan without filters, the whole table; an aggregated scan is left to the server."""
    sql = "SELECT l_orderkey FROM lineitem WHERE l_shipdate < DATE '1993-01-01'"
    state = estimate_rows(state_before(session, sql, estimate_rows))
    (scan,) = state.scans.values()
    rows = scan.table.row_count
    assert scan.estimated_rows is not None and 0.05 * rows < scan.estimated_rows < 0.3 * rows
    state = estimate_rows(state_before(session, "SELECT o_orderkey FROM orders", estimate_rows))
    (scan,) = state.scans.values()
    assert scan.estimated_rows == scan.table.row_count
    grouped = "SELECT l_returnflag, count(*) FROM lineitem GROUP BY l_returnflag"
    state = estimate_rows(state_before(session, grouped, estimate_rows))
    assert all(s.estimated_rows is None for s in state.scans.values())


def test_prune_exists_projections(session: Session) -> None:
    sql = "SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey)"
    before, after = apply(session, sql, prune_exists_projections)
    assert "SELECT lineitem.l_orderkey AS l_orderkey" in before[0]
    assert "EXISTS(SELECT 1 AS one FROM lineitem AS lineitem" in after[0]


def test_find_scans_one_scan_per_reference(session: Session) -> None:
    sql = "SELECT a.n_name, b.n_name FROM nation a JOIN nation b ON a.n_regionkey = b.n_nationkey"
    _, after = apply(session, sql, find_scans)
    assert after[1:] == [
        "a: SELECT det_n_name, det_n_regionkey FROM nation",
        "b: SELECT det_n_nationkey, det_n_name FROM nation",
    ]


def test_pushdown_predicates_sends_exact_filters(session: Session) -> None:
    sql = (
        "SELECT l_orderkey FROM lineitem WHERE l_shipdate < DATE '1995-01-01' "
        "AND l_returnflag = 'R' AND l_comment LIKE '%fox%'"
    )
    before, after = apply(session, sql, pushdown_predicates)
    assert "WHERE" not in before[1]
    assert "ope_l_shipdate < ?" in after[1] and "det_l_returnflag = ?" in after[1]
    assert "fox" not in after[1]  # a plaintext constant never reaches RemoteSQL
    assert after[0] == before[0]  # the local plan still filters (drop_pushed_filters decides)


def test_pushdown_predicates_keeps_outer_join_nullable_side(session: Session) -> None:
    sql = (
        "SELECT c_name, o_orderkey FROM customer LEFT JOIN orders ON c_custkey = o_custkey "
        "WHERE o_orderdate < DATE '1995-01-01' OR o_orderdate IS NULL"
    )  # (without the OR, the WHERE drops NULL-extended rows: an inner join)
    _, after = apply(session, sql, pushdown_predicates)
    orders = next(line for line in after if line.startswith("orders:"))
    assert "WHERE" not in orders  # pre-filtering orders would NULL-extend customers instead


def test_pushdown_subqueries_exists_on_the_server(session: Session) -> None:
    # TPC-H Q21's shape: EXISTS and NOT EXISTS correlated on a DET key and a DET <>
    sql = (
        "SELECT COUNT(*) FROM lineitem l1 WHERE l1.l_receiptdate > l1.l_commitdate "
        "AND EXISTS (SELECT * FROM lineitem l2 WHERE l2.l_orderkey = l1.l_orderkey "
        "AND l2.l_suppkey <> l1.l_suppkey) AND NOT EXISTS (SELECT * FROM lineitem l3 "
        "WHERE l3.l_orderkey = l1.l_orderkey AND l3.l_suppkey <> l1.l_suppkey "
        "AND l3.l_receiptdate > l3.l_commitdate)"
    )
    before, after = apply(session, sql, pushdown_subqueries)
    assert [line.split(":")[0] for line in before[1:]] == ["l2", "l3", "l1"]
    assert [line.split(":")[0] for line in after[1:]] == ["l1"]  # l2, l3: not fetched
    assert (
        "EXISTS(SELECT 1 FROM lineitem AS s1 WHERE s1.det_l_orderkey = lineitem.det_l_orderkey "
        "AND s1.det_l_suppkey <> lineitem.det_l_suppkey)" in after[1]
    )
    assert "NOT EXISTS(SELECT 1 FROM lineitem AS s2" in after[1]
    # the comparison of two columns of one row: the boolean the design precomputed
    assert "s2.det_l_commitdate < l_receiptdate = ?" in after[1]


@pytest.mark.parametrize(
    "subquery",
    [
        # a client-side filter inside
        "EXISTS (SELECT 1 FROM lineitem WHERE l_orderkey = o_orderkey AND l_comment LIKE '%x%')",
        # a correlation the schemes cannot compare (no OPE on the order key)
        "EXISTS (SELECT 1 FROM lineitem WHERE l_orderkey < o_orderkey)",
        # grouping inside
        "o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP BY l_orderkey HAVING COUNT(*) > 6)",
        # LIMIT changes which rows the subquery has
        "o_orderkey IN (SELECT l_orderkey FROM lineitem ORDER BY l_orderkey LIMIT 3)",
        # a derived table inside
        "EXISTS (SELECT 1 FROM (SELECT l_orderkey FROM lineitem) d WHERE d.l_orderkey = o_orderkey)",
    ],
)
def test_pushdown_subqueries_leaves_what_is_not_exact(session: Session, subquery: str) -> None:
    sql = f"SELECT COUNT(*) FROM orders WHERE {subquery}"
    before, after = apply(session, sql, pushdown_subqueries)
    assert after == before


def test_reduce_joins_semi_join(session: Session) -> None:
    sql = (
        "SELECT o_orderkey FROM customer, orders WHERE c_custkey = o_custkey "
        "AND c_mktsegment = 'BUILDING'"
    )
    before, after = apply(session, sql, reduce_joins)
    orders_before = next(line for line in before if line.startswith("orders:"))
    orders_after = next(line for line in after if line.startswith("orders:"))
    assert " IN (SELECT" not in orders_before
    # a key semi-join, with the other scan's filter inside
    semi = "det_o_custkey IN (SELECT r1.det_c_custkey FROM customer AS r1 WHERE r1.det_c_mktsegment = ?)"
    assert semi in orders_after


def test_pushdown_aggregates_group_on_the_server(session: Session) -> None:
    sql = "SELECT l_returnflag, COUNT(*) FROM lineitem WHERE l_shipdate < DATE '1998-01-01' GROUP BY l_returnflag"
    before, after = apply(session, sql, pushdown_aggregates)
    assert "GROUP BY" not in before[1]
    assert "COUNT(*)" in after[1] and "GROUP BY det_l_returnflag" in after[1]
    assert "ANY_VALUE(lineitem.__veil_agg_0)" in after[0]


@pytest.mark.parametrize(
    "aggregate",
    [
        "COUNT(DISTINCT l_partkey)",
        "median(l_quantity)",
        "histogram(l_returnflag)",
        "product(l_tax)",
    ],
)
def test_pushdown_aggregates_commits_whole_or_not_at_all(session: Session, aggregate: str) -> None:
    """An aggregate the server cannot compute leaves the whole block unchanged (no stray n^2)."""
    sql = f"SELECT SUM(l_quantity), SUM(l_tax), {aggregate} FROM lineitem"
    session.hom_pushdown = "always"
    try:
        before, after = apply(session, sql, pushdown_aggregates)
    finally:
        session.hom_pushdown = "auto"
    assert after == before


def test_pushdown_joins_one_statement(session: Session) -> None:
    sql = (
        "SELECT l_shipmode, SUM(l_quantity) FROM orders, lineitem WHERE o_orderkey = l_orderkey "
        "AND l_receiptdate >= DATE '1994-01-01' GROUP BY l_shipmode"
    )  # a SUM kept off the server (else ``pushdown_join_aggregates`` adds it there): joined
    session.hom_pushdown = "never"
    try:
        state = state_before(session, sql, pushdown_joins)
    finally:
        session.hom_pushdown = "auto"
    assert all(s.joined is None for s in state.scans.values())
    state = pushdown_joins(state)
    joined = {id(s.joined) for s in state.scans.values() if s.joined is not None}
    assert len(joined) == 1
    # orders is read for nothing but the join: it leaves the local plan
    assert [s.unread for s in state.scans.values()] == [True, False]
    assert "orders" not in state.query.sql()


def test_keys_are_recorded_at_load(session: Session) -> None:
    """Exactly counted, where the approximate count makes a column a candidate."""
    orders, lineitem = session.design.table("orders"), session.design.table("lineitem")
    assert orders.find("o_orderkey", "DET").params.get("unique") is True  # type: ignore[union-attr]
    assert "unique" not in lineitem.find("l_orderkey", "DET").params  # type: ignore[union-attr]


REGION_SUMS = (
    "SELECT {key}, SUM(l_extendedprice) FROM lineitem, orders, customer, nation, region "
    "WHERE l_orderkey = o_orderkey AND o_custkey = c_custkey AND c_nationkey = n_nationkey "
    "AND n_regionkey = r_regionkey GROUP BY {key}"
)


@pytest.mark.parametrize(("key", "summed"), [("r_name", True), ("o_custkey", False)])
def test_pushdown_join_aggregates_sums_where_blocks_pay(
    session: Session, key: str, summed: bool
) -> None:
    """Five regions: a (region, block) row gathers ~13 lineitems; a customer's lines are
    spread over the blocks, one per row (the server would return every joined row)."""
    state = pushdown_join_aggregates(
        state_before(session, REGION_SUMS.format(key=key), pushdown_join_aggregates)
    )
    fetches = {id(s.joined): s.joined for s in state.scans.values() if s.joined is not None}
    groups = [f.groups for f in fetches.values() if f.groups is not None]
    assert [g.summed is not None and g.summed.alias == "lineitem" for g in groups] == (
        [True] if summed else []
    )


@pytest.mark.parametrize(
    ("sql", "keys"),
    [
        (
            "SELECT p_brand, p_type FROM part, partsupp, supplier WHERE p_partkey = ps_partkey "
            "AND ps_suppkey = s_suppkey AND s_nationkey = 7 GROUP BY p_brand, p_type",
            ["p_brand", "p_type"],
        ),
        (
            "SELECT DISTINCT c_name, o_orderdate FROM customer, orders "
            "WHERE c_custkey = o_custkey AND c_nationkey = 7",
            ["c_name", "o_orderdate"],
        ),
        (
            "SELECT DISTINCT UPPER(c_name), o_orderdate FROM customer, orders "
            "WHERE c_custkey = o_custkey AND c_nationkey = 7",
            None,
        ),
    ],
)
def test_pushdown_join_aggregates_groups_without_aggregates(
    session: Session, sql: str, keys: list[str] | None
) -> None:
    """A GROUP BY over a join with no aggregate (TPC-DS q82's items with stock and sales),
    or a ``SELECT DISTINCT`` of columns (q38's customers and days), is the set of distinct
    key tuples: one server statement, one row per group. DISTINCT of an expression stays
    on the client."""
    state = pushdown_join_aggregates(state_before(session, sql, pushdown_join_aggregates))
    fetches = {id(s.joined): s.joined for s in state.scans.values() if s.joined is not None}
    if keys is None:
        assert not fetches
        return
    (fetch,) = fetches.values()
    assert fetch is not None and fetch.groups is not None and not fetch.groups.items
    assert [c for _, c, _ in fetch.groups.keys] == keys


def test_join_group_keys_without_det_group_by_a_one_to_one_ope(session: Session) -> None:
    """A date's OPE is one int64 per value: equal ciphertexts are equal dates. A string's
    OPE is not taken (its encoding is bytes)."""
    lineitem = session.design.table("lineitem")
    ope = lineitem.find("l_shipdate", "OPE")
    assert ope is not None

    def only_ope(column: str, scheme: str) -> object:
        return lineitem.find(column, scheme) if scheme == "OPE" else None

    scan = SimpleNamespace(table=SimpleNamespace(find=only_ope))
    assert _key_encryption(scan, "l_shipdate") is ope  # type: ignore[arg-type]
    text = SimpleNamespace(sql_type=SimpleNamespace(is_integral=False, has_equality=True))
    scan = SimpleNamespace(table=SimpleNamespace(find=lambda c, s: text if s == "OPE" else None))
    assert _key_encryption(scan, "l_comment") is None  # type: ignore[arg-type]


def test_pushdown_join_aggregates_never_sums_what_a_join_repeats(session: Session) -> None:
    # an order's price once per line item: lineitem's l_orderkey is no key
    sql = (
        "SELECT o_orderpriority, SUM(o_totalprice) FROM orders, lineitem "
        "WHERE o_orderkey = l_orderkey GROUP BY o_orderpriority"
    )
    session.hom_pushdown = "always"
    try:
        state = pushdown_join_aggregates(state_before(session, sql, pushdown_join_aggregates))
    finally:
        session.hom_pushdown = "auto"
    assert all(s.joined is None for s in state.scans.values())


def test_trim_reductions_keeps_what_the_server_join_does_not(session: Session) -> None:
    # TPC-H Q10 with a filter on customer: lineitem and orders joined on the server;
    # customer (its text would repeat on every joined row) and its nation outside
    sql = TPCH["q10"].replace(
        "l_returnflag = 'R'", "l_returnflag = 'R' AND c_mktsegment = 'BUILDING'"
    )
    assert sql != TPCH["q10"]
    state = state_before(session, sql, trim_reductions)
    scans = {s.alias: s for s in state.scans.values()}
    assert scans["lineitem"].joined is not None and scans["orders"].joined is not None
    assert scans["customer"].joined is None and scans["nation"].joined is None
    assert all(len(s.reduction.scans) == 4 for s in scans.values() if s.reduction)
    trim_reductions(state)

    def reduced_by(alias: str) -> list[str] | None:
        reduction = scans[alias].reduction
        return None if reduction is None else [s.alias for s in reduction.scans]

    assert reduced_by("orders") == ["customer", "orders", "nation"]  # what the join does not do
    joined = {id(s) for s in scans["lineitem"].joined.scans}  # type: ignore[union-attr]
    for scan in scans.values():  # a joined scan keeps only partners outside its join
        if scan.joined is not None and scan.reduction is not None:
            assert all(id(s) not in joined for s in scan.reduction.scans if s is not scan)
    assert reduced_by("lineitem") is None  # its one partner is inside the join
    assert reduced_by("customer") is not None  # outside: reduced as before
    assert reduced_by("nation") is None  # 25 rows: not worth the join


def test_trim_reductions_drops_what_keeps_every_row(session: Session) -> None:
    # TPC-H Q10 as written: every order has its customer and nation, unfiltered
    state = trim_reductions(state_before(session, TPCH["q10"], trim_reductions))
    orders = next(s for s in state.scans.values() if s.alias == "orders")
    assert orders.reduction is None


def test_trim_reductions_fetches_a_small_filtered_scan_alone(session: Session) -> None:
    # TPC-H Q3's customers of one segment (not joined on the server here): a fifth of
    # the table, one key column, fewer bytes than half the rows of orders and
    # lineitem, which a semi-join would scan on the server to thin them
    state = state_before(session, TPCH["q3"], pushdown_joins)
    scans = {s.alias: s for s in state.scans.values()}
    assert all(s.reduction is not None for s in scans.values())
    trim_reductions(state)
    assert scans["customer"].reduction is None
    assert scans["orders"].reduction is not None  # wide enough to keep theirs
    assert scans["lineitem"].reduction is not None


def test_q19_and_q7_join_on_the_server_whole(session: Session) -> None:
    # every filter of Q19 (and Q7's nation names) is inside one OR: the implied
    # conjuncts' shares price the join (priced as keeping every row, it lost)
    for name, aliases in (("q19", {"lineitem", "part"}), ("q7", {"n1", "n2", "lineitem"})):
        state = state_before(session, TPCH[name], trim_reductions)
        scans = {s.alias: s for s in state.scans.values()}
        assert all(scans[a].joined is not None for a in aliases), name
        assert len({id(s.joined) for s in scans.values()}) == 1, name


def test_a_reduction_splits_into_one_semi_join_per_branch(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    # TPC-H Q21's l1 joins supplier (and its nation) on l_suppkey and orders on
    # l_orderkey: two key semi-joins instead of the row ids of a four-table join
    # (when the block is neither grouped nor joined on the server)
    passes = without(without(planner.PASSES, pushdown_join_aggregates), pushdown_joins)
    monkeypatch.setattr(planner, "PASSES", passes)
    plan = session.plan(parse_statement(TPCH["q21"]))
    l1 = next(s for s in plan.scans if s.alias == "l1")
    assert l1.reduction is not None and len(l1.reduction.scans) == 4
    text = readable(session, scan_statement(l1))
    assert "rid" not in text
    assert "det_l_suppkey IN (SELECT r1.det_s_suppkey FROM supplier AS r1, nation AS r2" in text
    assert "det_l_orderkey IN (SELECT r1.det_o_orderkey FROM orders AS r1 WHERE" in text


def test_drop_pushed_filters(session: Session) -> None:
    sql = "SELECT o_orderkey FROM orders WHERE o_orderdate < DATE '1995-01-01'"
    before, after = apply(session, sql, drop_pushed_filters)
    assert before[1:] == [
        "orders: SELECT det_o_orderkey, det_o_orderdate FROM orders WHERE ope_o_orderdate < ?"
    ]
    assert after == [
        "local: SELECT orders.o_orderkey AS o_orderkey FROM orders AS orders",
        "orders: SELECT det_o_orderkey FROM orders WHERE ope_o_orderdate < ?",  # no longer fetched
    ]


def test_plan_bind_filters_from_uncorrelated_subquery(session: Session) -> None:
    sql = (
        "SELECT COUNT(*) FROM orders WHERE o_orderkey IN "
        "(SELECT l_orderkey FROM lineitem GROUP BY l_orderkey HAVING SUM(l_quantity) > 300)"
    )
    state = plan_bind_filters(state_before(session, sql, plan_bind_filters))
    orders = next(s for s in state.scans.values() if s.table.name == "orders")
    assert [b.description for b in orders.binds] == ["its IN-subquery"]


@pytest.mark.parametrize(
    "sql",
    [
        # the subquery reads a CTE of the outer WITH: it cannot run alone
        "WITH big AS (SELECT o_orderkey AS k FROM orders WHERE o_totalprice > 300000) "
        "SELECT COUNT(*) FROM lineitem WHERE l_orderkey IN (SELECT k FROM big)",
        # correlated with the outer row
        "SELECT COUNT(*) FROM orders o WHERE o_orderkey IN "
        "(SELECT l_orderkey FROM lineitem WHERE l_suppkey = o.o_custkey)",
    ],
)
def test_plan_bind_filters_skips_subqueries_that_cannot_run_alone(
    session: Session, sql: str
) -> None:
    state = plan_bind_filters(state_before(session, sql, plan_bind_filters))
    assert not any(
        b.description == "its IN-subquery" for s in state.scans.values() for b in s.binds
    )


def test_rename_scans(session: Session) -> None:
    before, after = apply(session, "SELECT n_name FROM nation", rename_scans)
    assert "FROM nation AS nation" in before[0]
    assert "FROM __veil_scan_0 AS nation" in after[0]
