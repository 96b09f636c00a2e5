"""The workload's queries planned at the load (issue 41: ``veil.session.workload_plans``):
a later process runs them without planning, gets the answers a first run plans for,
and never under another design; what a first run would not keep is not planned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from veil.design.model import PhysicalDesign
from veil.exec import server
from veil.load.loader import load
from veil.session import plan_cache, sealed_plans, workload_plans
from veil.session.sealed_plans import FILE_NAME
from veil.session.session import Session
from veil.session.workload_plans import plan_workload

pytestmark = pytest.mark.integration

BY_ID = "SELECT name, born FROM people WHERE id = 2 OR name = 'ann' ORDER BY name"
COUNT = "SELECT count(*) AS n FROM people WHERE born > DATE '1986-01-01'"
WORKLOAD = [BY_ID, COUNT]


def _people(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    source.mkdir()
    rows = "id,name,born\n1,ann,1990-01-02\n2,bob,1985-05-06\n3,cy,1999-12-31\n"
    (source / "people.csv").write_text(rows)
    return source


@pytest.fixture()
def client(tmp_path: Path) -> Path:
    source = _people(tmp_path)
    load(str(source), f"duckdb:///{tmp_path / 'srv.duckdb'}", str(tmp_path / "c"), WORKLOAD)
    return tmp_path / "c"


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget this process's plans, as a new process starts without them."""
    monkeypatch.setattr(plan_cache, "_SHARED", {})
    monkeypatch.setattr(sealed_plans, "_OPEN", {})


def _no_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("planned again")

    monkeypatch.setattr(Session, "plan", refuse)


def _answers(client: Path) -> list[list[dict[str, object]]]:
    session = Session(client)
    try:
        return [session.run(sql).table.to_pylist() for sql in WORKLOAD]
    finally:
        session.close()


def test_a_later_process_runs_the_planned_workload_without_planning(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _new_process(monkeypatch)
    expected = _answers(client)  # planned by their first runs
    (client / FILE_NAME).unlink()
    _new_process(monkeypatch)
    assert set(plan_workload(client, WORKLOAD)) == set(WORKLOAD)
    assert (client / FILE_NAME).exists()
    _new_process(monkeypatch)
    _no_planning(monkeypatch)
    assert _answers(client) == expected


def _no_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("rendered again")

    monkeypatch.setattr(server, "render", refuse)
    monkeypatch.setattr(server, "render_sent", refuse)


def _answered_as_kept(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> list[list[dict[str, object]]]:
    """The workload's answers in a new process that may neither plan nor render."""
    _new_process(monkeypatch)
    _no_planning(monkeypatch)
    _no_rendering(monkeypatch)
    return _answers(client)


def test_a_plan_without_bind_filters_is_kept_with_its_statements_rendered(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _new_process(monkeypatch)
    expected = _answers(client)  # planned and rendered by their first runs
    (client / FILE_NAME).unlink()
    _new_process(monkeypatch)
    plan_workload(client, WORKLOAD)
    assert _answered_as_kept(client, monkeypatch) == expected


def test_statements_rendered_for_a_planned_workload_are_kept_for_the_next_process(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _new_process(monkeypatch)
    monkeypatch.setattr(workload_plans, "render_statements", lambda plan, backend: None)
    plan_workload(client, WORKLOAD)  # (as a plan with bind filters: nothing rendered ahead)
    _new_process(monkeypatch)
    expected = _answers(client)  # its runs render the plans' statements, then close: saved
    assert _answered_as_kept(client, monkeypatch) == expected


def test_a_statement_read_from_a_file_finds_its_plan_sent_bare(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _new_process(monkeypatch)
    plan_workload(client, [f"\n  {BY_ID}\n;\n"])
    _new_process(monkeypatch)
    _no_planning(monkeypatch)
    session = Session(client)
    try:
        assert [r["name"] for r in session.run(BY_ID).table.to_pylist()] == ["ann", "bob"]
    finally:
        session.close()


def test_no_plan_is_read_under_another_design(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _new_process(monkeypatch)
    plan_workload(client, WORKLOAD)
    path = client / "design.json"
    design = PhysicalDesign.load(path)
    design.save(path)  # the same design saved again: another file stamp
    _new_process(monkeypatch)
    session = Session(client)
    try:
        assert session.run(COUNT).table.to_pylist() == [{"n": 2}]
        assert session.plans.hits == 0
    finally:
        session.close()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT name FROM people WHERE id = ?",  # its values come at run time
        "SELECT name, random() AS r FROM people",  # planned every run
        "UPDATE people SET name = 'x' WHERE id = 1",  # not a query
        "SHOW TABLES",  # the catalogue's
        "SELECT nothing FROM people",  # a mistake: its first run reports it
    ],
)
def test_what_a_first_run_would_not_keep_is_not_planned(
    client: Path, monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    _new_process(monkeypatch)
    assert plan_workload(client, [sql]) == {}
    session = Session(client)
    try:
        assert [r["name"] for r in session.run(BY_ID).table.to_pylist()] == ["ann", "bob"]
    finally:
        session.close()


def test_a_planner_defect_leaves_the_query_to_its_first_run(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _new_process(monkeypatch)
    real = Session.plan

    def defect(self: Session, *args: object, **kwargs: object) -> object:
        raise KeyError("a planner's defect")

    monkeypatch.setattr(Session, "plan", defect)
    assert plan_workload(client, WORKLOAD) == {}  # the load is done: nothing raised
    monkeypatch.setattr(Session, "plan", real)
    session = Session(client)
    try:
        assert session.run(COUNT).table.to_pylist() == [{"n": 2}]
    finally:
        session.close()


@pytest.mark.fallback_expected
def test_a_planned_workload_plan_that_falls_back_is_forgotten(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _new_process(monkeypatch)
    plan_workload(client, [COUNT])
    _new_process(monkeypatch)
    session = Session(client)
    try:
        real = Session.execute_plan
        failed: list[bool] = []

        def fail_once(self: Session, plan: object, stats: object) -> object:
            if not failed and getattr(plan, "pushdown", False):
                failed.append(True)
                raise RuntimeError("a split plan that does not run")
            return real(self, plan, stats)  # type: ignore[arg-type]

        monkeypatch.setattr(Session, "execute_plan", fail_once)
        assert session.run(COUNT).table.to_pylist() == [{"n": 2}]  # the fallback's answer
        assert failed
        monkeypatch.setattr(Session, "execute_plan", real)
        hits = session.plans.hits
        assert session.run(COUNT).table.to_pylist() == [{"n": 2}]
        assert session.plans.hits == hits  # planned again, not run from the forgotten plan
    finally:
        session.close()


def test_veil_load_with_a_workload_plans_its_queries(tmp_path: Path) -> None:
    source = _people(tmp_path)
    workload = tmp_path / "workload.sql"
    workload.write_text(f"{BY_ID};\n{COUNT};\n")
    client = tmp_path / "c"
    done = subprocess.run(
        [sys.executable, "-m", "veil", "load", "--source", str(source),
         "--server", f"duckdb:///{tmp_path / 's.duckdb'}", "--client-dir", str(client),
         "--workload", str(workload)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "planned 2 of the workload's queries ahead" in done.stderr
    assert (client / FILE_NAME).exists()


def test_a_script_that_never_closes_its_connection_keeps_its_plans(client: Path) -> None:
    script = (
        "import sys, veil\n"
        "cursor = veil.connect(sys.argv[1]).cursor()\n"
        "cursor.execute(sys.argv[2])\n"
        "print(cursor.fetchall())\n"
    )
    (client / FILE_NAME).unlink(missing_ok=True)
    first = subprocess.run(
        [sys.executable, "-c", script, str(client), COUNT], capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    assert (client / FILE_NAME).exists()  # saved when the process exited
    check = (
        "import sys\n"
        "from veil.session.session import Session\n"
        "def refuse(*args, **kwargs): raise AssertionError('planned again')\n"
        "Session.plan = refuse\n" + script
    )
    second = subprocess.run(
        [sys.executable, "-c", check, str(client), COUNT], capture_output=True, text=True
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout == "[(2,)]\n"
