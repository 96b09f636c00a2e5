"""The sessions of one process share their plans of a client directory (``PlanCache.shared``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.support.oracle import assert_same
from veil.load.loader import load
from veil.session.session import Session
from veil.statements import run

pytestmark = pytest.mark.integration

SQL = "SELECT n_name, n_regionkey FROM nation WHERE n_regionkey = 2 ORDER BY n_name"


@pytest.fixture()
def client_dir(tpch_dir: Path, tmp_path: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    (source / "nation.parquet").symlink_to(tpch_dir / "nation.parquet")
    url = f"duckdb:///{tmp_path}/s.duckdb"
    load(str(source), url, str(tmp_path / "c"), [SQL], progress=lambda _: None)
    return tmp_path / "c"


@pytest.fixture()
def sessions(client_dir: Path) -> Iterator[list[Session]]:
    opened: list[Session] = []
    yield opened
    for session in opened:
        session.close()


def _open(sessions: list[Session], client_dir: Path, **options: bool) -> Session:
    sessions.append(Session(client_dir, **options))  # type: ignore[arg-type]
    return sessions[-1]


def test_a_second_session_runs_the_first_ones_plan(
    client_dir: Path, sessions: list[Session], plain: duckdb.DuckDBPyConnection
) -> None:
    first = _open(sessions, client_dir).run(SQL)
    second = _open(sessions, client_dir)
    again = second.run(SQL)
    assert second.plans.hits == 1 and again.plan is first.plan
    assert_same(again.table, plain.execute(SQL).fetchall(), True, SQL)


def test_a_design_change_is_a_new_plan(client_dir: Path, sessions: list[Session]) -> None:
    """DDL in one session: the other follows the design and plans again."""
    one, other = _open(sessions, client_dir), _open(sessions, client_dir)
    planned = one.run(SQL).plan
    run(one, "CREATE TABLE notes (id INTEGER, body VARCHAR)")
    result = other.run(SQL)
    assert result.plan is not planned and other.plans.hits == 0
    assert other.run(SQL).plan is result.plan  # and shares that one from now on
    assert one.run(SQL).plan is result.plan


def test_shared_plans_see_other_sessions_writes(client_dir: Path, sessions: list[Session]) -> None:
    one, other = _open(sessions, client_dir), _open(sessions, client_dir)
    planned = one.run(SQL).plan
    other.run("INSERT INTO nation VALUES (99, 'ATLANTIS', 2, 'x')")
    again = one.run(SQL)
    assert again.plan is planned  # rows written change no plan
    assert ("ATLANTIS", 2) in [tuple(r.values()) for r in again.table.to_pylist()]


def test_a_transactions_plans_are_shared(client_dir: Path, sessions: list[Session]) -> None:
    """A statement repeated in transactions (pgbench's) is planned once (issue 41)."""
    one, other = _open(sessions, client_dir), _open(sessions, client_dir)
    one.begin()
    planned = one.run(SQL).plan
    one.commit()
    assert other.run(SQL).plan is planned


def test_a_plan_that_skipped_peels_stays_its_transactions(
    tpch_dir: Path, tmp_path: Path, sessions: list[Session]
) -> None:
    """Onions: a transaction leaves the peels it wants to the client (a peel commits on
    its own), so its plan is not the one the statement gets after them."""
    source = tmp_path / "onion_src"
    source.mkdir()
    (source / "nation.parquet").symlink_to(tpch_dir / "nation.parquet")
    load(str(source), f"duckdb:///{tmp_path}/o.duckdb", str(tmp_path / "o"), progress=print)
    one, other = _open(sessions, tmp_path / "o"), _open(sessions, tmp_path / "o")
    one.begin()
    planned = one.run(SQL).plan
    one.commit()
    assert len(other.plans) == 0 and other.run(SQL).plan is not planned


def test_sessions_reading_files_keep_theirs_apart(
    client_dir: Path, sessions: list[Session]
) -> None:
    """A cached plan skips the sandbox's checks: never one made where files may be read."""
    open_files = _open(sessions, client_dir, external_access=True)
    planned = open_files.run(SQL).plan
    closed = _open(sessions, client_dir)
    assert closed.run(SQL).plan is not planned and closed.plans.hits == 0
