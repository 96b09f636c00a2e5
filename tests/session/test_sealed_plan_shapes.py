"""A kept plan's statements with run-time filters (``Scan.shaped``) go to the next process
by place, never by the object ids they are keyed by in memory (issue 41,
``veil.session.sealed_plans``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from veil.load.loader import load
from veil.session import plan_cache, sealed_plans
from veil.session.session import Session

pytestmark = pytest.mark.integration

SQL = "SELECT name FROM people WHERE id = 2"


@pytest.fixture()
def client(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    source.mkdir()
    (source / "people.csv").write_text("id,name\n1,ann\n2,bob\n")
    load(str(source), f"duckdb:///{tmp_path / 'srv.duckdb'}", str(tmp_path / "c"), [SQL])
    return tmp_path / "c"


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_cache, "_SHARED", {})
    monkeypatch.setattr(sealed_plans, "_OPEN", {})


def test_shaped_statements_are_kept_by_place(client: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = Session(client)
    try:
        plan = session.run(SQL).plan
        assert plan is not None and plan.scans
        scan = plan.scans[0]
        # as run_filtered keeps one: (this scan, the scans whose filters it took, their
        # filter counts), the filters' shape -> (text, parameters)
        scan.shaped[(id(scan), (id(scan),), (1,)), ("k IN ?",)] = ("SELECT 1", ["held"])
        scan.shaped[(id(scan), (12345,), (1,)), ("k IN ?",)] = ("SELECT 2", [])  # not in it
    finally:
        session.close()
    _new_process(monkeypatch)
    again = Session(client)
    try:
        read = again.plans.get(_key(again))
        assert read is not None
        scan = read.plan.scans[0]
        assert scan.shaped == {((id(scan), (id(scan),), (1,)), ("k IN ?",)): ("SELECT 1", ["held"])}
        assert again.run(SQL).table.to_pylist() == [{"name": "bob"}]
    finally:
        again.close()


def _key(session: Session) -> tuple[object, ...]:
    """The key the session's plan of SQL is kept under (its literal as a parameter)."""
    from veil.sql.literals import normalized

    normal = normalized(SQL)
    assert normal is not None
    return session._plan_key(normal.text, normal.values)
