"""A write that finds its rows changed since it read them: run again, or 40001.

Deterministic: a second client's statement runs between the first one's read and its
write (``interleave``), as a race would order them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil.session.dml as dml
from veil.errors import SerializationError
from veil.load.loader import load
from veil.serve.errors import wire_error
from veil.session.session import Session

ROWS = 5


@pytest.fixture
def sessions(server_url: str, tmp_path: Path) -> tuple[Session, Session]:
    """Two clients of one table ``t(id, x)``, x = 0 everywhere."""
    source = tmp_path / "source"
    source.mkdir()
    ids = pa.array(range(ROWS), pa.int64())
    pq.write_table(
        pa.table({"id": ids, "x": pa.array([0] * ROWS, pa.int64())}), source / "t.parquet"
    )
    load(str(source), server_url, str(tmp_path / "client"), progress=lambda _: None)
    first, second = Session(tmp_path / "client"), Session(tmp_path / "client")
    first.run("SELECT x FROM t WHERE id = 1")  # the peel, before any statement under test
    yield first, second
    first.close()
    second.close()


def interleave(
    monkeypatch: pytest.MonkeyPatch, session: Session, between: Callable[[], None], times: int
) -> list[int]:
    """Run ``between()`` after each of ``session``'s next ``times`` DML reads, before its
    write; returns a list that counts the reads."""
    reads: list[int] = []
    real = dml._fresh_ids

    def fresh_ids(current: Session, *args: object) -> int:
        if current is session:
            reads.append(1)
            if len(reads) <= times:
                between()
        return real(current, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(dml, "_fresh_ids", fresh_ids)
    return reads


def _x(session: Session) -> list[int]:
    return [r["x"] for r in session.run("SELECT id, x FROM t ORDER BY id").table.to_pylist()]


def test_an_update_whose_row_changed_is_run_again_on_the_new_row(
    sessions: tuple[Session, Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = sessions
    bump = lambda: second.run("UPDATE t SET x = x + 10 WHERE id = 1")  # noqa: E731
    reads = interleave(monkeypatch, first, bump, times=1)
    assert first.run("UPDATE t SET x = x + 1 WHERE id = 1").rowcount == 1
    assert len(reads) == 2
    assert _x(first) == [0, 11, 0, 0, 0]


def test_rows_another_client_deleted_meanwhile_are_neither_written_nor_counted(
    sessions: tuple[Session, Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = sessions
    update = "UPDATE t SET x = x + 1 WHERE id IN (1, 2)"
    interleave(monkeypatch, first, lambda: second.run("DELETE FROM t WHERE id = 2"), times=1)
    assert first.run(update).rowcount == 1  # run again: only row 1 is left to update
    assert _x(first) == [0, 1, 0, 0]
    assert second.run("DELETE FROM t WHERE id IN (2, 3)").rowcount == 1


def test_a_statement_that_keeps_colliding_fails_with_40001_and_writes_nothing(
    sessions: tuple[Session, Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = sessions
    monkeypatch.setattr(dml, "_ATTEMPTS", 3)
    monkeypatch.setattr(dml, "_BACKOFF_SECONDS", 0.0)
    bump = lambda: second.run("UPDATE t SET x = x + 10 WHERE id = 1")  # noqa: E731
    reads = interleave(monkeypatch, first, bump, times=3)
    with pytest.raises(SerializationError, match="3 times in a row") as raised:
        first.run("UPDATE t SET x = x + 1 WHERE id = 1")
    assert len(reads) == 3
    assert wire_error(raised.value).sqlstate == "40001"
    assert _x(first) == [0, 30, 0, 0, 0]


def test_inside_a_transaction_a_collision_runs_again_only_on_postgres(
    server_url: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if server_url.startswith("spark"):  # the other client would wait for the write lock
        pytest.skip("a Spark transaction holds the warehouse's write lock from its start")
    first, second = request.getfixturevalue("sessions")  # loaded only where it runs
    bump = lambda: second.run("UPDATE t SET x = x + 10 WHERE id = 1")  # noqa: E731
    reads = interleave(monkeypatch, first, bump, times=1)
    if server_url.startswith("postgresql"):
        # READ COMMITTED: a write that changed nothing runs again on the row as committed,
        # as PostgreSQL's UPDATE goes on with a row's new version (no lost update)
        with first.backend.transaction():
            first.run("UPDATE t SET x = x + 1 WHERE id = 1")
        assert len(reads) == 2
        assert _x(first) == [0, 11, 0, 0, 0]
        return
    refused = pytest.raises(SerializationError, match="roll the transaction back")
    with refused, first.backend.transaction():
        first.run("UPDATE t SET x = x + 1 WHERE id = 1")
    assert len(reads) == 1
    assert _x(first) == [0, 10, 0, 0, 0]
