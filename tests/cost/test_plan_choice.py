"""Plans chosen by cost (``veil.cost.choice``): every candidate answers right, the rules'
plan gives way only by a margin, never to a plan dearer than fetching everything."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from sqlglot import exp

import veil.cost.choice as plan_choice
from tests.support.oracle import assert_same
from tests.support.tpch import tpch_queries
from veil.cost.calibration import CALIBRATION_FILE, calibration_of
from veil.cost.choice import Candidate, _candidates, _cheapest, choose_plan
from veil.cost.model import estimate_plan
from veil.errors import ParameterError
from veil.exec.server import FetchStats
from veil.frontend.explain import explain
from veil.session.session import Session
from veil.sql.parse import parse_statement
from veil.sql.plan import SplitPlan

TPCH = dict(tpch_queries())
QUERIES = ["q3", "q5", "q7", "q10", "q13", "q16", "q17", "q18", "q19", "q20", "q21", "q22"]


@pytest.fixture()
def calibrated(session: Session, monkeypatch: pytest.MonkeyPatch) -> Iterator[Session]:
    """The shared TPC-H session, calibrated for this test only (other tests keep the rules)."""
    path = Path(session.client.path) / CALIBRATION_FILE
    had = path.exists()
    calibration_of(session)
    monkeypatch.setattr(plan_choice, "_WORTH_CHOOSING", 0.0)  # small data: price every plan
    session.plans.clear()
    try:
        yield session
    finally:
        if not had:
            path.unlink(missing_ok=True)
        session.plans.clear()


@pytest.mark.parametrize("name", QUERIES)
def test_every_candidate_answers_like_plaintext(
    calibrated: Session, plain: duckdb.DuckDBPyConnection, name: str
) -> None:
    sql = TPCH[name]
    tree = parse_statement(sql)
    assert isinstance(tree, exp.Query)
    rules = calibrated.plan(tree)
    calibration = calibration_of(calibrated)
    candidates = _candidates(calibrated, tree, calibrated.design, rules, calibration, 1.0)
    assert candidates[-1].name == "fetch everything"
    expected = plain.execute(sql).fetchall()
    ordered = "ORDER BY" in sql.upper()
    for candidate in candidates:
        table = calibrated.execute_plan(candidate.plan, FetchStats())
        assert_same(table, expected, ordered, f"{name}, {candidate.name}")


def test_explain_lists_the_candidates(calibrated: Session) -> None:
    text = explain(calibrated, TPCH["q3"])
    assert "plan chosen by cost" in text
    assert "rules:" in text and "fetch everything:" in text
    assert text.count("* ") >= 1


def _candidate(name: str, seconds: float | None) -> Candidate:
    return Candidate(name, SplitPlan([], exp.select("1"), pushdown=True), seconds)


def test_the_rules_give_way_only_by_a_margin() -> None:
    rules = _candidate("rules", 1.0)
    near, far = _candidate("near", 0.7), _candidate("far", 0.5)
    assert _cheapest([rules, near]) is rules
    assert _cheapest([rules, near, far]) is far
    assert _cheapest([_candidate("rules", None), far]).name == "rules"  # nothing to compare
    assert _cheapest([rules, _candidate("unpriced", None)]) is rules


def test_the_rules_alone_without_a_calibration_or_when_asked(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = parse_statement(TPCH["q3"])
    assert isinstance(tree, exp.Query)
    (Path(session.client.path) / CALIBRATION_FILE).unlink(missing_ok=True)
    assert choose_plan(session, tree, session.design).choice == []
    monkeypatch.setenv("VEIL_PLANNER", "rules")
    assert choose_plan(session, tree, session.design).choice == []
    monkeypatch.setenv("VEIL_PLANNER", "fastest")
    with pytest.raises(ParameterError, match="VEIL_PLANNER"):
        choose_plan(session, tree, session.design)


@pytest.mark.parametrize("name", QUERIES)
def test_the_choice_is_never_estimated_dearer_than_fetching_everything(
    calibrated: Session, name: str
) -> None:
    tree = parse_statement(TPCH[name])
    assert isinstance(tree, exp.Query)
    calibration = calibration_of(calibrated)
    rules = calibrated.plan(tree)
    candidates = _candidates(calibrated, tree, calibrated.design, rules, calibration, 1.0)
    candidates[0].seconds = estimate_plan(calibrated, rules, calibration).seconds
    chosen = _cheapest(candidates)
    everything = candidates[-1]
    assert chosen.seconds is not None and everything.seconds is not None
    assert chosen.seconds <= everything.seconds
