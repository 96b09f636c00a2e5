"""Plans kept for later processes in the client directory, sealed (issue 41:
``veil.session.sealed_plans``): read back, never under another design or key."""

from __future__ import annotations

import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from veil.crypto.keys import MasterKey
from veil.load.loader import load
from veil.session import plan_cache, sealed_plans
from veil.session.sealed_plans import FILE_NAME, SealedPlans
from veil.session.session import Session
from veil.statements import run

pytestmark = pytest.mark.integration

SQL = "SELECT name, born FROM people WHERE id = 2 OR name = 'ann' ORDER BY name"
ANSWER = [("ann", "1990-01-02"), ("bob", "1985-05-06")]


@pytest.fixture()
def client(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    source.mkdir()
    (source / "people.csv").write_text("id,name,born\n1,ann,1990-01-02\n2,bob,1985-05-06\n")
    load(str(source), f"duckdb:///{tmp_path / 'srv.duckdb'}", str(tmp_path / "c"), [SQL])
    return tmp_path / "c"


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget this process's plans, as a new process starts without them."""
    monkeypatch.setattr(plan_cache, "_SHARED", {})
    monkeypatch.setattr(sealed_plans, "_OPEN", {})


def _answer(session: Session, sql: str = SQL) -> list[tuple[str, str]]:
    rows = session.run(sql).table.to_pylist()
    return [(r["name"], str(r["born"])) for r in rows]


def _run_once(client: Path, **options: bool) -> None:
    session = Session(client, **options)
    try:
        assert _answer(session) == ANSWER
    finally:
        session.close()


def _no_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("planned again")

    monkeypatch.setattr(Session, "plan", refuse)


def _planned_afresh(client: Path, monkeypatch: pytest.MonkeyPatch, **options: bool) -> None:
    """A new process's session answers, having found no plan kept."""
    _new_process(monkeypatch)
    session = Session(client, **options)
    try:
        assert _answer(session) == ANSWER and session.plans.hits == 0
    finally:
        session.close()


def test_a_later_process_runs_the_plan_without_planning(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_once(client)
    sealed = client / FILE_NAME
    assert stat.S_IMODE(sealed.stat().st_mode) == 0o600
    body = sealed.read_bytes()
    assert body[0] == 1 and b"people" not in body and b"ann" not in body  # sealed
    _new_process(monkeypatch)
    _no_planning(monkeypatch)
    session = Session(client)
    try:
        assert _answer(session) == ANSWER and _answer(session) == ANSWER
        assert session.plans.hits == 2
        assert session._catalog is None  # no binder needed: the plan was checked when made
    finally:
        session.close()


def test_a_design_change_plans_again(client: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _run_once(client)
    _new_process(monkeypatch)
    session = Session(client)
    try:
        run(session, "CREATE TABLE notes (id INTEGER, body VARCHAR)")
        _new_process(monkeypatch)
        again = Session(client)
        assert _answer(again) == ANSWER and again.plans.hits == 0
        again.close()
    finally:
        session.close()


def test_a_cleared_cache_reads_no_sealed_plan(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``plans.clear()`` (DDL, keys that repeat since the load, a test's patched planner) is
    not undone by the sealed plans: the next run plans again, and keeps only its new plan."""
    _run_once(client)
    _new_process(monkeypatch)
    session = Session(client)
    try:
        session.plans.clear()
        planned = []
        plan = Session.plan
        monkeypatch.setattr(
            Session, "plan", lambda s, *a, **k: planned.append(1) or plan(s, *a, **k)
        )
        assert _answer(session) == ANSWER and planned and session.plans.hits == 0
    finally:
        session.close()
    monkeypatch.undo()
    _new_process(monkeypatch)
    _no_planning(monkeypatch)
    again = Session(client)
    try:
        assert _answer(again) == ANSWER and again.plans.hits == 1  # the new plan was kept
    finally:
        again.close()


def test_another_server_setting_plans_again(client: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``veil config`` may point the directory at another engine: its SQL differs."""
    _run_once(client)
    server = client / "server.json"
    server.write_text(server.read_text() + "\n")  # the same server, but another file
    _planned_afresh(client, monkeypatch)


def test_a_tampered_file_is_ignored(client: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _run_once(client)
    sealed = client / FILE_NAME
    body = bytearray(sealed.read_bytes())
    body[-1] ^= 1
    sealed.write_bytes(bytes(body))
    _planned_afresh(client, monkeypatch)
    assert sealed.read_bytes() != bytes(body)  # replaced by a good one


def test_another_key_reads_nothing(client: Path) -> None:
    _run_once(client)
    session = Session(client)
    try:
        _answer(session)
        entries = session.plans._plans.entries.items()
        (key,) = [k for k, cached in entries if cached.template is None]
    finally:
        session.close()
    settings = (client / "design.json", client / "server.json")
    assert SealedPlans(client, session.master, settings).get(key) is not None
    assert SealedPlans(client, MasterKey.generate(), settings).get(key) is None


def test_sessions_reading_files_keep_no_plans(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_once(client, external_access=True)
    assert not (client / FILE_NAME).exists()
    _run_once(client)
    assert (client / FILE_NAME).exists()
    _planned_afresh(client, monkeypatch, external_access=True)


def test_the_veil_command_keeps_its_plan_for_the_next(client: Path) -> None:
    """Two real processes: the second answers from the first one's plan, without loading
    the planner, the cost model or sqlglot's DuckDB dialect (their ~50 ms, issue 41), nor
    the workload's analysis, the planner passes and sqlglot's optimizer (qualify)."""
    code = textwrap.dedent(
        f"""
        import sys
        from veil.session.session import Session
        session = Session({str(client)!r})
        rows = session.run({SQL!r}).table.to_pylist()
        loaded = ("veil.sql.planner", "veil.cost.choice", "sqlglot.dialects.duckdb",
                  "veil.sql.workload", "veil.sql.passes", "sqlglot.optimizer.qualify")
        print(session.plans.hits, [r["name"] for r in rows])
        print(*[name in sys.modules for name in loaded])
        session.close()
        """
    )
    outs = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
        for _ in range(2)
    ]
    assert outs[0][0] == "0" and outs[1][0] == "1"
    assert outs[0][1:3] == outs[1][1:3] == ["['ann',", "'bob']"]
    assert outs[0][3:6] == ["True"] * 3 and outs[1][3:] == ["False"] * 6
