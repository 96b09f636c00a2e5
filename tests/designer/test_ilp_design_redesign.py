"""Design evolution: ``veil design --from`` lists the change, ``veil redesign`` applies it
table by table from the server's own data, and a crash between tables leaves every table
whole (old or new design), the queries right, and a second run finishing the rest."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import veil.load.redesign as redesign_module
from tests.support.oracle import check_query
from tests.support.tpch import tpch_queries
from veil.design.model import PhysicalDesign
from veil.frontend.design import design_workload
from veil.frontend.design_report import format_changes
from veil.load.loader import load
from veil.load.redesign import _stored, design_changes, redesign
from veil.session.session import Session

QUERIES = [sql for _, sql in tpch_queries()]
NEW_WORKLOAD = [QUERIES[5], QUERIES[13]]  # Q6 and Q14 only: most DET columns are not needed


@pytest.fixture()
def client(tpch_dir: Path, tmp_path: Path) -> Path:
    """TPC-H SF 0.01 loaded for all 22 queries (greedy), in a directory of its own."""
    url = f"duckdb:///{tmp_path / 'server.duckdb'}"
    load(str(tpch_dir), url, str(tmp_path / "client"), QUERIES, lambda _: None)
    return tmp_path / "client"


def _target(session: Session) -> PhysicalDesign:
    return design_workload(session, NEW_WORKLOAD, None, current=session.design).design


def test_redesign_applies_the_change(client: Path, plain: duckdb.DuckDBPyConnection) -> None:
    session = Session(str(client))
    try:
        target = _target(session)
        listed = format_changes(session.design, target)
        changes = redesign(session, target)
        assert changes and f"{len(changes)} table(s) to rebuild" in listed
        assert design_changes(session.design, target) == []
        for sql in QUERIES:  # every query still runs right, designed for or not
            check_query(session, plain, sql)
    finally:
        session.close()


def test_a_crash_between_tables_leaves_each_table_whole(
    client: Path, plain: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = Session(str(client))
    try:
        target = _target(session)
        before = {n: _stored(t) for n, t in session.design.tables.items()}
        planned = design_changes(session.design, target)
        assert len(planned) >= 2
        real, calls = redesign_module.load_into, []

        def crashing(*args: object) -> object:
            calls.append(args)
            if len(calls) == 2:
                raise RuntimeError("the client died between two tables")
            return real(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(redesign_module, "load_into", crashing)
        with pytest.raises(RuntimeError):
            redesign(session, target)
        monkeypatch.undo()
    finally:
        session.close()
    reopened = Session(str(client))  # as a new client process would
    try:
        first, second = planned[0].table, planned[1].table
        assert _stored(reopened.design.tables[first]) == _stored(target.tables[first])
        assert _stored(reopened.design.tables[second]) == before[second]
        for sql in QUERIES:
            check_query(reopened, plain, sql)
        finished = redesign(reopened, target)
        assert [c.table for c in finished] == [c.table for c in planned[1:]]
        assert design_changes(reopened.design, target) == []
    finally:
        reopened.close()
