"""The server's time from its operators: the work each kind does, with the planner's rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from veil.backends.base import Operator
from veil.backends.duckdb import DuckDBBackend
from veil.cost.server_time import (
    OperatorCosts,
    Work,
    column_rows,
    plan_work,
    spent_by_kind,
    spilled_share,
)

pytestmark = pytest.mark.unit


def _scan(table: str, rows: float, table_rows: float, expressions: int = 2) -> Operator:
    return Operator("scan", rows, expressions, table=table, table_rows=table_rows)


def test_a_scan_filters_every_row_it_reads_and_returns_the_kept_ones() -> None:
    scan = Operator("scan", 100, 3, table="t", table_rows=1000, columns=2)
    work = plan_work(scan, filtered={"t": 50}, read={"t": 0.25})
    # each row read through its first filter, the fifth it keeps through all three (each
    # keeping 0.2 ** (1/3) of what reaches it); two columns read for every row of a
    # vector that keeps one: each of these (2,048 rows, a fifth kept) keeps some
    each = 0.2 ** (1 / 3)
    assert work.filter == pytest.approx(250 * (1 + each + each**2))
    assert work.expression == 250 * 2


def test_a_scan_reads_its_columns_in_the_vectors_where_some_row_is_kept() -> None:
    assert column_rows(50, 250) == 250
    # 300 rows of 6M scattered: a vector keeps one with chance 1 - (1 - 1/20,000) ** 2048
    assert column_rows(300, 6_000_000) == pytest.approx(6e6 * (1 - (1 - 5e-5) ** 2048))
    assert column_rows(300, 6_000_000) < 0.1 * 6e6
    assert column_rows(10, 0) == 10


def test_filters_on_bytes_are_their_own_kind() -> None:
    scan = Operator("scan", 1000, 2, table="t", table_rows=1000, columns=1, byte_filters=1)
    work = plan_work(scan)
    assert work.filter == work.filter_bytes == 1000  # each of the two, on every row


def test_the_planners_rows_replace_the_optimizers_and_carry_up_the_joins() -> None:
    # the optimizer guessed a fifth of the fact table for a filter that keeps half
    fact = _scan("fact", 200, 1000)
    dimension = _scan("dim", 10, 10)
    join = Operator("join", 100, 1, (fact, dimension))  # one key: probes only matches
    group = Operator("group", 5, 1, (join,))
    work = plan_work(group, filtered={"fact": 500})
    assert work.build == 10
    assert work.probe == pytest.approx(250)  # the join's rows, 100 x (500 / 200)
    assert work.group_input == pytest.approx(250)
    assert work.group == pytest.approx(5 * 2.5)


def test_a_probe_scan_tests_its_rows_and_returns_the_matching_ones() -> None:
    fact = Operator("scan", 1000, 0, table="fact", table_rows=1000, columns=3)
    join = Operator("join", 40, 1, (fact, _scan("dim", 10, 10, expressions=0)))
    work = plan_work(join)
    # every row read, and tested against the built keys; the three columns read in the
    # vectors that keep one of the 40 (of 1,000: all); dim's read
    assert work.expression == 1000 + 1000 * 3 + 10
    assert work.filter == 1000
    assert work.probe == 40


def test_the_built_keys_test_the_rows_the_scans_own_filters_kept() -> None:
    fact = Operator("scan", 500_000, 1, table="fact", table_rows=6_000_000, columns=2)
    join = Operator("join", 100, 1, (fact, _scan("dim", 10, 10, expressions=0)))
    work = plan_work(join, filtered={"fact": 500_000})
    assert work.filter == 6_000_000 + 500_000  # its own filter on every row, keys on half
    # the two columns in the vectors where one of 100 scattered rows is kept, not all
    assert work.expression == pytest.approx(column_rows(100, 6e6) * 2 + 10)  # and dim's


def test_a_join_on_two_keys_probes_every_row_matched_or_not() -> None:
    join = Operator("join", 50, 2, (_scan("fact", 1000, 1000), _scan("dim", 10, 10)))
    assert plan_work(join).probe == pytest.approx(1000)


def test_a_mark_join_probes_every_row_and_returns_them() -> None:
    fact = _scan("fact", 1000, 1000)
    mark = Operator("join", 1000, 1, (fact, _scan("dim", 10, 10)), bounded=True, marks=True)
    work = plan_work(Operator("group", 1, 1, (mark,)))
    assert work.probe == 1000
    assert work.group_input == 1000


def test_the_planners_joined_rows_are_the_topmost_joins_and_the_filters_over_it() -> None:
    join = Operator("join", 100, 1, (_scan("a", 1000, 1000), _scan("b", 10, 10)))
    kept = Operator("other", 20, 1, (join,))  # the optimizer's guess for a filter
    group = Operator("group", 10, 1, (kept,))
    work = plan_work(group, joined_rows=400)
    assert work.group_input == 400
    assert work.group == pytest.approx(10 * 400 / 20)


def test_counted_rows_are_taken_as_they_are() -> None:
    join = Operator("join", 30, 1, (_scan("a", 300, 1000), _scan("b", 10, 10)))
    work = plan_work(join, filtered={"a": 900}, joined_rows=5, counted=True)
    assert (work.probe, work.build) == (300, 10)


def test_a_table_the_planner_does_not_know_is_at_least_a_third() -> None:
    join = Operator("join", 11, 1, (_scan("a", 100, 100), _scan("sub", 11, 3000)))
    assert plan_work(join).build == 1000


def test_costs_need_every_kind_measured() -> None:
    ns = {"expression": 1.0, "filter": 3.0, "probe": 20.0, "build": 20.0, "group_input": 2.0}
    ns["group"] = 150.0
    ns["group_spill"] = 100.0
    ns["probe_spill"] = 30.0
    ns["filter_bytes"] = 5.0
    costs = OperatorCosts.from_ns(ns)
    assert costs is not None
    work = Work(expression=1e9, filter=1e8, group=1e6, group_spill=1e6)
    assert work.seconds(costs) == pytest.approx(1.0 + 0.3 + 0.15 + 0.1)
    del ns["group"]
    assert OperatorCosts.from_ns(ns) is None


def test_duckdb_lists_its_operators_estimated_and_counted(tmp_path: Path) -> None:
    backend = DuckDBBackend(f"duckdb://{tmp_path / 'server.duckdb'}")
    try:
        backend.execute("CREATE TABLE f AS SELECT range AS k, range % 7 AS g FROM range(20000)")
        backend.execute("CREATE TABLE d AS SELECT range AS k FROM range(100)")
        sql = "SELECT f.g, count(*) FROM f JOIN d ON f.k = d.k WHERE f.g < 3 GROUP BY f.g"
        estimated = backend.estimate(sql).operators
        counted = backend.profile(sql)
        for root in (estimated, counted):
            assert root is not None
            kinds = _kinds(root)
            assert {"scan", "join", "group"} <= kinds
        scans = _scans(counted)
        assert {s.table: s.table_rows for s in scans} == {"f": 20000, "d": 100}
        assert plan_work(counted, counted=True).group == 3  # groups 0, 1, 2 of the 100 keys
    finally:
        backend.close()


def _kinds(op: Operator) -> set[str]:
    return {op.kind}.union(*(_kinds(c) for c in op.children))


def _scans(op: Operator) -> list[Operator]:
    return [op] if op.kind == "scan" else [s for c in op.children for s in _scans(c)]


def test_a_profiled_plans_time_is_split_by_kind() -> None:
    scan = Operator("scan", 100, 1, table="t", table_rows=1000, columns=1, seconds=0.002)
    build = Operator("scan", 10, 0, table="d", table_rows=10, seconds=0.001)
    join = Operator("join", 100, 1, (scan, build), seconds=0.003)
    group = Operator("group", 5, 1, (join,), seconds=0.004)
    spent = spent_by_kind(group)
    # the scans' filters and columns share their time (the calibration fits them apart);
    # t's column read in every vector that keeps one of its 100 rows (all 1,000)
    assert spent["expression"] == (pytest.approx(1000 + 10), pytest.approx(0.003))
    assert spent["filter"][0] == pytest.approx(1000)
    assert spent["join"] == (pytest.approx(110), pytest.approx(0.003))
    assert spent["group"] == (pytest.approx(100), pytest.approx(0.004))
    assert spent["groups"][0] == pytest.approx(5)


def test_a_group_costs_per_key() -> None:
    scan = _scan("t", 1000, 1000, expressions=0)
    group = Operator("group", 100, 1, (scan,), columns=3)
    assert plan_work(group).group == 300
    assert plan_work(group).group_spill == 0  # a small table stays in the caches


def test_a_large_hash_table_spills_out_of_the_caches_on_a_log_scale() -> None:
    assert spilled_share(16_384) == 0
    assert spilled_share(131_072) == pytest.approx(0.5)
    assert spilled_share(10_000_000) == 1
    scan = _scan("t", 4_000_000, 4_000_000, expressions=0)
    group = Operator("group", 1_048_576, 1, (scan,), columns=2)
    assert plan_work(group).group_spill == pytest.approx(2 * 1_048_576)


def test_a_hash_table_past_the_caches_and_a_nested_loops_lookups_are_counted() -> None:
    big = _scan("big", 2_000_000, 2_000_000, expressions=0)
    hashed = Operator("join", 2_000_000, 1, (_scan("f", 4e6, 4e6, expressions=0), big))
    work = plan_work(hashed)
    assert work.built_spill == 2_000_000  # all of it out of the caches past a million
    assert work.lookups == 0
    inner = Operator("scan", 1, 1, table="i", table_rows=1e6, per_loop=True)
    looped = Operator("join", 500, 1, (_scan("o", 500, 500, expressions=0), inner), hashed=False)
    work = plan_work(looped)
    assert work.lookups == 500 and work.built_spill == 0  # an index lookup per outer row
