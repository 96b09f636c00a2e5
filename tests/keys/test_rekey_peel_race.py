"""Reads that race a peel: never decrypted under the layer the server no longer holds.

A query's peel XORs a layer off a server table (``veil.session.onions``),
commits, then records it in the design. A read planned on the design before
that record, whose fetch ran after the commit, decrypted the bare ciphertexts
as wrapped ones: garbage (found once in CI as three ids of ``counters`` read as
64-bit noise after a re-key, whose copy had read the table in that window).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.concurrency.conftest import connected, rows
from tests.keys.test_rekey import load_shop
from veil.design.model import DET, PhysicalDesign
from veil.errors import SerializationError
from veil.load.rekey import rekey
from veil.session import onions
from veil.session.session import Session

pytestmark = pytest.mark.integration


def _held_records(monkeypatch: pytest.MonkeyPatch, seconds: float) -> threading.Event:
    """The writer thread's first peel waits ``seconds`` between its commit and its record."""
    peeled = threading.Event()
    record = onions._record_all

    def held(session, entries):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "writer" and not peeled.is_set():
            peeled.set()
            time.sleep(seconds)
        return record(session, entries)

    monkeypatch.setattr(onions, "_record_all", held)
    return peeled


def _writer(client: Path, failed: list[BaseException]) -> threading.Thread:
    def write() -> None:
        try:
            with connected(client) as cursor:
                cursor.execute("UPDATE counters SET n = n + 1 WHERE id = 1")
        except BaseException as exc:
            failed.append(exc)

    return threading.Thread(target=write, name="writer")


def test_a_read_while_a_peel_is_recorded(
    backend_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = load_shop(tmp_path, backend_url)
    with connected(client) as cursor:
        assert cursor.execute("SELECT id FROM counters ORDER BY id").fetchall()
        peeled = _held_records(monkeypatch, 2.0)
        failed: list[BaseException] = []
        writer = _writer(client, failed)
        writer.start()
        assert peeled.wait(60)
        got = cursor.execute("SELECT id, n FROM counters ORDER BY id").fetchall()
        writer.join()
    assert failed == []
    assert [int(str(i)) for i, _ in got] == [0, 1, 2, 3]


def test_a_rekey_copying_while_a_peel_is_recorded(
    backend_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = load_shop(tmp_path, backend_url)
    peeled = _held_records(monkeypatch, 2.0)
    failed: list[BaseException] = []
    writer = _writer(client, failed)
    writer.start()
    assert peeled.wait(60)
    rekey(client)
    writer.join()
    assert failed == []
    got = sorted((int(str(i)), int(str(n))) for i, n in rows(client, "SELECT id, n FROM counters"))
    assert got == [(0, 0), (1, 1), (2, 0), (3, 0)]


def test_a_peel_recorded_after_a_swap_leaves_the_new_copy_wrapped(
    backend_url: str, tmp_path: Path
) -> None:
    client = load_shop(tmp_path, backend_url)
    stale = Session(client)  # still names the copy a re-key is about to replace
    try:
        rekey(client)
        peel = onions.Peel("counters", "id", DET)
        onions._record_all(stale, [(peel, {"by": "a peel of the old copy"})])
    finally:
        stale.close()
    wrapped = PhysicalDesign.load(client / "design.json").tables["counters"].onion_of("id", DET)
    assert wrapped is not None and wrapped.outer is not None
    got = sorted(int(str(i)) for (i,) in rows(client, "SELECT id FROM counters"))
    assert got == [0, 1, 2, 3]


def test_a_mark_its_dead_peel_left_is_cleared(backend_url: str, tmp_path: Path) -> None:
    client = load_shop(tmp_path, backend_url)
    design = PhysicalDesign.load(client / "design.json")
    design.tables["counters"].peeling = True  # saved before the server's work, then killed
    design.save(client / "design.json")
    got = sorted(int(str(i)) for (i,) in rows(client, "SELECT id FROM counters WHERE id < 3"))
    assert got == [0, 1, 2]
    assert not PhysicalDesign.load(client / "design.json").tables["counters"].peeling


def test_a_snapshot_older_than_a_peel_fails_its_transaction(
    backend_url: str, tmp_path: Path
) -> None:
    """DuckDB's transaction reads the server as it began: not under a layer peeled since."""
    if not backend_url.startswith("duckdb"):
        pytest.skip("PostgreSQL's statements each read what is committed (READ COMMITTED)")
    client = load_shop(tmp_path, backend_url)
    with connected(client) as reader, connected(client) as writer:
        reader.execute("BEGIN")
        assert len(reader.execute("SELECT id, n FROM counters").fetchall()) == 4
        writer.execute("UPDATE counters SET n = n + 1 WHERE id = 1")  # peels counters.id
        with pytest.raises(SerializationError):
            reader.execute("SELECT id, n FROM counters ORDER BY id")
        reader.execute("ROLLBACK")
        got = reader.execute("SELECT id, n FROM counters ORDER BY id").fetchall()
    assert [(int(str(i)), int(str(n))) for i, n in got] == [(0, 0), (1, 1), (2, 0), (3, 0)]
