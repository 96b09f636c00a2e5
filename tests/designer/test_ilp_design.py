"""The ILP designer's pure parts: the ILP on hand-solvable workloads, query units, policy."""

from __future__ import annotations

import pytest

from veil.design.model import DET, OPE, RND, Column, Encryption, PhysicalDesign, TableDesign
from veil.design.policy import Policy
from veil.designer.candidates import collect_candidates, policy_violations
from veil.designer.enumerate import (
    EXHAUSTIVE_UNITS,
    FETCH_ALL,
    Alternative,
    query_units,
    unit_subsets,
)
from veil.designer.ilp import BudgetError, Change, Problem, solve

pytestmark = pytest.mark.unit


def plan(seconds: float, *needs: str) -> Alternative:
    return Alternative(frozenset(needs), seconds, FETCH_ALL if not needs else "pushed")


def problem(**changes: object) -> Problem:
    """Two queries over three candidates; 10 bytes of plaintext, 10 fixed.

    q1: fetch all 5 s, or 1 s with DET a; q2: fetch all 8 s, 2 s with OPE b,
    or 1.5 s with DET a and OPE b. DET a (10 bytes) or RND a (4 bytes) is stored.
    """
    found = Problem(
        sizes={"DET a": 10.0, "RND a": 4.0, "OPE b": 30.0},
        plans=[
            [plan(5.0), plan(1.0, "DET a")],
            [plan(8.0), plan(2.0, "OPE b"), plan(1.5, "DET a", "OPE b")],
        ],
        weights=[1.0, 1.0],
        fetch_pairs={"DET a": "RND a"},
        fixed_bytes=10.0,
        plain_bytes=10.0,
    )
    for name, value in changes.items():
        setattr(found, name, value)
    return found


@pytest.mark.parametrize(
    ("budget", "chosen", "enabled", "seconds"),
    [
        (None, [1, 2], {"DET a", "OPE b"}, 2.5),  # unbounded: every gain; RND a not stored
        (5.0, [1, 2], {"DET a", "OPE b"}, 2.5),  # 10 + 40 = 50 bytes fit exactly
        (4.9, [0, 1], {"RND a", "OPE b"}, 7.0),  # 44 bytes: OPE b alone gains more than DET a
        (2.0, [1, 0], {"DET a"}, 9.0),  # 20 bytes: DET a replaces RND a
        (1.4, [0, 0], {"RND a"}, 13.0),  # 14 bytes: nothing but what every query can fetch
    ],
)
def test_known_optimum(
    budget: float | None, chosen: list[int], enabled: set[str], seconds: float
) -> None:
    solution = solve(problem(), budget)
    assert (solution.chosen, solution.enabled) == (chosen, enabled)
    assert solution.seconds == pytest.approx(seconds)
    assert solution.space_bytes <= (budget or 99) * 10.0


def test_weights_change_the_choice() -> None:
    # at 44 bytes one of DET a / OPE b fits; q1 ten times as frequent makes DET a worth more
    solution = solve(problem(weights=[10.0, 1.0]), 4.9)
    assert solution.enabled == {"DET a"}
    assert solution.chosen == [1, 0]


def test_infeasible_budget_names_the_smallest() -> None:
    with pytest.raises(BudgetError, match=r"takes 1\.400 x; give --budget 1\.40 or more"):
        solve(problem(), 1.2)


def test_a_chosen_plan_is_never_estimated_worse_than_fetching_all() -> None:
    for budget in (None, 5.0, 4.9, 2.0, 1.4):
        solution = solve(problem(), budget)
        for alternatives, chosen in zip(problem().plans, solution.plans, strict=True):
            fetch_all = next(a for a in alternatives if a.summary == FETCH_ALL)
            assert chosen.seconds <= fetch_all.seconds


def change(kept: set[str], seconds_per_byte: float, forced: frozenset[str] = frozenset()) -> Change:
    """DET a and RND a live in table t1, OPE b in t2 (100 bytes each to rebuild)."""
    tables = {"DET a": "t1", "RND a": "t1", "OPE b": "t2"}
    return Change(frozenset(kept), tables, {"t1": 100.0, "t2": 100.0}, forced, seconds_per_byte)


@pytest.mark.parametrize(
    ("kept", "per_byte", "forced", "chosen", "enabled", "rebuilt"),
    [
        # free rebuilds: the fastest design; t1 already has what it needs, only t2 changes
        ({"DET a"}, 0.0, frozenset(), [1, 2], {"DET a", "OPE b"}, {"t2"}),
        # 100 s to rebuild t2 against 6.5 s of gain: t2 is left alone, q2 fetches
        ({"DET a"}, 1.0, frozenset(), [1, 0], {"DET a"}, set()),
        # t2 is rebuilt anyway (its fixed part changes): OPE b comes for free
        ({"DET a"}, 1.0, frozenset({"t2"}), [1, 2], {"DET a", "OPE b"}, {"t2"}),
        # a table left alone keeps what it stores, even what no chosen plan reads
        ({"DET a", "RND a"}, 1.0, frozenset(), [1, 0], {"DET a", "RND a"}, set()),
    ],
)
def test_design_evolution_prices_rebuilt_tables(
    kept: set[str],
    per_byte: float,
    forced: frozenset[str],
    chosen: list[int],
    enabled: set[str],
    rebuilt: set[str],
) -> None:
    solution = solve(problem(change=change(kept, per_byte, forced)), None)
    assert (solution.chosen, solution.enabled, solution.rebuilt) == (chosen, enabled, rebuilt)


def test_query_units_keep_join_sides_and_a_tables_sums_together() -> None:
    design = _design()
    found = collect_candidates(design, None, Policy())
    keys = set(found.candidates) - {k for k in found.candidates if k.startswith(RND)}
    units = query_units(keys, found)
    assert frozenset({"DET a.k", "DET b.k"}) in units  # one key scope: an equi-join
    assert frozenset({"OPE a.v"}) in units


def test_unit_subsets_exhaustive_then_pruned() -> None:
    few = [frozenset({str(i)}) for i in range(3)]
    assert len(list(unit_subsets(few))) == 2**3
    many = [frozenset({str(i)}) for i in range(EXHAUSTIVE_UNITS + 2)]
    subsets = list(unit_subsets(many))
    assert len(subsets) == 2 + 2 * len(many)
    assert set() in subsets and set().union(*many) in subsets


def test_policy_drops_candidates_and_keeps_the_column_fetchable() -> None:
    policy = Policy({"a.v": RND, "a.k": DET})
    found = collect_candidates(_design(), None, policy)
    assert "OPE a.v" not in found.candidates and "DET a.v" not in found.candidates
    assert "DET a.k" in found.candidates
    kept = found.restrict(set(found.candidates))
    assert [e.scheme for e in kept.tables["a"].encryptions_of("v")] == [RND]
    assert policy_violations(kept, policy) == []
    assert policy_violations(_design(), policy) == ["DET a.v", "OPE a.v"]


def test_restrict_fetches_a_column_without_its_det_from_rnd() -> None:
    found = collect_candidates(_design(), None, Policy())
    assert found.fetch_pairs["DET a.k"] == "RND a.k"
    restricted = found.restrict(set())
    assert [e.scheme for e in restricted.tables["a"].encryptions_of("k")] == [RND]
    assert found.restrict({"DET a.k"}).tables["a"].encryptions_of("k")[0].scheme == DET


def test_sizes_come_from_rows_and_widths() -> None:
    found = collect_candidates(_design(), None, Policy())
    assert found.candidates["DET a.k"].bytes == 100 * 8
    assert found.candidates["DET a.s"].bytes == 100 * (10 + 17)  # mean length + expansion
    assert found.plain_bytes == 100 * (8 + 8 + 10) + 50 * 8


def test_sizes_on_disk_where_the_server_measured_them() -> None:
    design = _design()
    design.tables["a"].plain_bytes, design.tables["b"].plain_bytes = 300.0, 60.0
    # the server's columns on disk: a bit-packed DET of k, the row ids nearly free
    stored = {("c_DET_k", DET): 25.0, ("c_id", "row id"): 10.0, ("c_id2", "row id"): 5.0}
    found = collect_candidates(design, design, Policy(), stored)
    assert found.on_disk
    assert found.plain_bytes == 360.0  # the plaintext as measured at load
    assert found.candidates["DET a.k"].bytes == 25.0
    assert found.candidates["RND a.k"].bytes == 100 * 8  # not stored: its values' widths
    assert found.fixed_bytes == 15.0
    # without the plaintext measured for every table, values' widths throughout
    design.tables["b"].plain_bytes = 0.0
    assert not collect_candidates(design, design, Policy(), stored).on_disk


def test_a_fetch_form_is_the_one_the_solver_stored() -> None:
    # DET a (bit-packed) is smaller than RND a: no plan gains by it, but it is the cheaper
    # fetch form, and the design keeps it rather than the RND the budget has no room for
    plans = [[plan(5.0)], [plan(8.0), plan(2.0, "OPE b")]]
    sizes = {"DET a": 2.0, "RND a": 4.0, "OPE b": 30.0}
    solution = solve(problem(sizes=sizes, plans=plans), 1.25)
    assert solution.enabled == {"DET a"}
    assert solution.space_bytes == pytest.approx(12.0)


def _design() -> PhysicalDesign:
    """a(k BIGINT, v BIGINT, s VARCHAR) joined to b(k BIGINT) on k; v ranged; 100 and 50 rows."""

    def enc(source: str, scheme: str, scope: str, sql_type: str = "BIGINT") -> Encryption:
        params: dict[str, object] = {"mean_bytes": 10.0} if sql_type == "VARCHAR" else {}
        if scheme == OPE:
            params["bits"] = 64
        return Encryption(f"c_{scheme}_{source}", source, scheme, sql_type, scope, params)

    columns = [Column("k", "BIGINT"), Column("v", "BIGINT"), Column("s", "VARCHAR")]
    a = TableDesign(
        "a",
        "t_a",
        "c_id",
        columns,
        [
            enc("k", DET, "det:a.k"),
            enc("v", DET, "det:a.v"),
            enc("v", OPE, "ope:a.v"),
            enc("s", DET, "det:a.s", "VARCHAR"),
        ],
        row_count=100,
    )
    b = TableDesign("b", "t_b", "c_id2", [Column("k", "BIGINT")], [enc("k", DET, "det:a.k")])
    b.row_count = 50
    b.encryptions[0].name = "c_DET_bk"
    return PhysicalDesign("fp", {"a": a, "b": b})
