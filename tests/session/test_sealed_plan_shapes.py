"""A kept plan's statements with run-time filters (``Scan.shaped``) go to the next process
by place, never by the object ids they are keyed by in memory (issue 41,
``veil.session.sealed_plans``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.session.test_sealed_plans import ANSWER, SQL, _answer, _new_process, client
from veil.session.session import Session
from veil.sql.literals import normalized

pytestmark = pytest.mark.integration
__all__ = ["client"]  # the fixture, shared


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
        normal = normalized(SQL)
        assert normal is not None
        read = again.plans.get(again._plan_key(normal.text, normal.values))
        assert read is not None
        scan = read.plan.scans[0]
        assert scan.shaped == {((id(scan), (id(scan),), (1,)), ("k IN ?",)): ("SELECT 1", ["held"])}
        assert _answer(again) == ANSWER
    finally:
        again.close()
