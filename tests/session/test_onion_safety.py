"""Peels under crashes and concurrency, policies that refuse, JOIN-ADJ re-keying on the server."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.session.test_onions import _assert_forms
from veil import statements
from veil.ciphers.columns import column_cipher
from veil.design.model import DET, JOIN, OPE, RND
from veil.design.policy import Policy, PolicyError
from veil.encoding import encode
from veil.load.ddl import reencrypt
from veil.load.loader import load
from veil.session import dml, onions, peel_marks
from veil.session.layer_commands import manual_peel, set_policy
from veil.session.leakage import leakage, what_if
from veil.session.session import Session

ROWS = 3000


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "source"
    folder.mkdir()
    ids = list(range(ROWS))
    pq.write_table(
        pa.table(
            {
                "id": ids,
                "grp": [i % 7 for i in ids],
                "amount": pa.array([(i * 37) % 1000 for i in ids], pa.int64()),
                "name": [f"name {i % 50}" for i in ids],
            }
        ),
        folder / "items.parquet",
    )
    pq.write_table(
        pa.table({"gid": list(range(7)), "label": [f"group {g}" for g in range(7)]}),
        folder / "groups.parquet",
    )
    return folder


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def client(request: pytest.FixtureRequest, source: Path, tmp_path: Path) -> Path:
    url = request.getfixturevalue(f"{request.param}_url")
    load(str(source), url, str(tmp_path / "client"), progress=lambda _: None)
    return tmp_path / "client"


def _crash_during_peel(client: Path, where: str) -> int:
    """Peel items.grp in a child process that dies (os._exit) at ``where``."""
    script = f"""
import os
import veil.session.onions as onions
import veil.session.layer_commands as layer_commands
from veil.session.session import Session

def die(*args, **kwargs):
    os._exit(9)

if {where!r} == "before commit":
    onions.mark_peeled_statement = die
else:
    onions._record_all = die
session = Session({str(client)!r})
layer_commands.manual_peel(session, "items", "grp", "DET")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    return done.returncode


@pytest.mark.parametrize("where", ["before commit", "after commit"])
def test_a_crashed_peel_leaves_the_table_peeled_or_untouched(client: Path, where: str) -> None:
    assert _crash_during_peel(client, where) == 9
    session = Session(str(client))  # repairs the design from the server's layers table
    try:
        repaired = [e for e in session.client.peel_log() if e.get("column") == "grp"]
        assert len(repaired) == (1 if where == "after commit" else 0)
        enc = session.design.table("items").onion_of("grp", DET)
        assert enc is not None
        assert (enc.outer is None) == (where == "after commit")
        _assert_forms(session)
        found = session.run("SELECT count(*) FROM items WHERE grp = 3").table.column(0)[0]
        assert found.as_py() == len(range(3, ROWS, 7))
    finally:
        session.close()


def test_two_clients_peel_at_once(client: Path) -> None:
    sessions = [Session(str(client)) for _ in range(2)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def peel(session: Session) -> None:
        try:
            start.wait()
            manual_peel(session, "items", "amount", "OPE")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=peel, args=(s,)) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not errors
        for session in sessions:
            session.follow_design()
            assert session.design.table("items").onion_of("amount", OPE).outer is None  # type: ignore[union-attr]
        _assert_forms(sessions[0])
        found = sessions[1].run("SELECT count(*) FROM items WHERE amount < 100").table
        assert found.column(0)[0].as_py() == sum((i * 37) % 1000 < 100 for i in range(ROWS))
    finally:
        for session in sessions:
            session.close()


def test_writes_beside_a_peel_stay_readable(client: Path) -> None:
    writer, peeler = Session(str(client)), Session(str(client))
    try:
        thread = threading.Thread(target=lambda: manual_peel(peeler, "items", "name", "DET"))
        thread.start()
        for i in range(5):
            writer.run(f"INSERT INTO items VALUES ({ROWS + i}, 3, 5, 'name 3')")
        thread.join()
        writer.follow_design()
        writer.run("UPDATE items SET name = 'renamed' WHERE id < 10")
        _assert_forms(writer)
        got = writer.run("SELECT count(*) FROM items WHERE name = 'name 3'").table.column(0)[0]
        assert got.as_py() == len([i for i in range(10, ROWS) if i % 50 == 3]) + 5
    finally:
        writer.close()
        peeler.close()


class _Interleaved:
    """``work`` (by ``session``) in a thread started inside another client's transaction,
    which waits until ``work`` has ended, or rolled back a failed attempt (DuckDB: a
    write-write conflict), or waits for a lock (PostgreSQL) or a peel's mark; then that
    transaction goes on."""

    def __init__(self, session: Session, work: Callable[[], object]) -> None:
        self._work = work
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self.errors: list[BaseException] = []
        self.held_up = False  # still running when the other transaction went on
        session.backend.add_statement_listener(
            lambda sql, _: self._stopped.set() if sql == "ROLLBACK" else None
        )

    def waiting(self) -> None:
        """``work`` waits for the other client (the mark of its peel: ``peel_marks``)."""
        self._stopped.set()

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            self._stopped.set()

    def run_inside(self, holder: Session) -> None:
        """Start ``work`` from inside ``holder``'s transaction; return once it is held up."""
        if self._thread.ident is not None:
            return  # only in the first attempt of the holder's statement
        self._thread.start()
        while not self._stopped.wait(0.01):
            if holder.backend.dialect == "postgres" and _waits_for_a_lock(holder):
                break
        self.held_up = self._thread.is_alive()

    def join(self) -> None:
        self._thread.join()
        assert not self.errors, self.errors


def _waits_for_a_lock(session: Session) -> bool:
    found = session.backend.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return bool(found.column(0)[0].as_py())


@pytest.mark.parametrize("first", ["write", "peel"])
@pytest.mark.parametrize("column", ["name", "amount"])
def test_a_peel_and_a_write_never_interleave(
    client: Path, monkeypatch: pytest.MonkeyPatch, first: str, column: str
) -> None:
    """The interleavings that lost rows, made to happen: the other client starts inside
    the ``first`` one's transaction (a write's: after it checked the layers and appended;
    a peel's: after it stripped the rows it could see). Both committed: the write's rows,
    appended under the RND layer and unseen by the peel, kept a layer the design no
    longer had, and read back as garbage ("unknown version byte"). Now the second waits
    for the first's layers lock, or fails to take it and runs again.

    ``name``'s DET onion is built by its first peel (a text column, fetched from an
    RND copy: ``_write_built``), ``amount``'s is XOR-peeled (``_rewrite``)."""
    writer, peeler = Session(str(client)), Session(str(client))

    def insert() -> None:
        writer.run(f"INSERT INTO items VALUES ({ROWS}, 3, 5, 'name 3')")

    def peel() -> None:
        manual_peel(peeler, "items", column, "DET")

    if first == "write":
        holder, run_first, module, hook = writer, insert, dml, "_write_rows"
        second = _Interleaved(peeler, peel)
    else:
        rewrite = "_write_built" if column == "name" else "_rewrite"
        holder, run_first, module, hook = peeler, peel, onions, rewrite
        second = _Interleaved(writer, insert)
    inner = getattr(module, hook)
    wait = peel_marks._wait

    def marked(*args: Any) -> None:  # the write waits for the peel's mark to go: held up
        second.waiting()
        wait(*args)

    monkeypatch.setattr(peel_marks, "_wait", marked)

    def then_second(*args: Any) -> None:
        inner(*args)
        second.run_inside(holder)

    monkeypatch.setattr(module, hook, then_second)
    try:
        run_first()
        second.join()
        assert second.held_up, f"the other client committed inside the {first}'s transaction"
        writer.follow_design()
        assert writer.design.table("items").onion_of(column, DET).outer is None  # type: ignore[union-attr]
        _assert_forms(writer)
        if column == "name":
            found = writer.run("SELECT count(*) FROM items WHERE name = 'name 3'").table
            assert found.column(0)[0].as_py() == len(range(3, ROWS, 50)) + 1
        else:
            found = writer.run("SELECT count(*) FROM items WHERE amount = 5").table
            assert found.column(0)[0].as_py() == sum((i * 37) % 1000 == 5 for i in range(ROWS)) + 1
    finally:
        writer.close()
        peeler.close()


def test_a_join_rekeys_one_side_on_the_server(client: Path) -> None:
    session = Session(str(client))
    try:
        sql = "SELECT label, count(*) FROM items, groups WHERE grp = gid GROUP BY label ORDER BY label"
        rows = session.run(sql).table.to_pylist()
        assert rows == [
            {"label": f"group {g}", "count_star()": len(range(g, ROWS, 7))} for g in range(7)
        ]
        items, groups = session.design.table("items"), session.design.table("groups")
        left, right = items.find("grp", JOIN), groups.find("gid", JOIN)
        assert left is not None and right is not None and left.key_scope == right.key_scope
        # the re-keyed column (groups: fewer rows) equals a direct encryption under the shared key
        stored = session.backend.execute(
            f'SELECT "{right.name}", "{groups.row_id}" FROM "{groups.server_name}"'
        )
        order = pa.compute.sort_indices(stored.column(1))
        direct = column_cipher(session.master, right).encrypt(
            encode(pa.array(range(7), pa.int64()), right.sql_type)
        )
        assert stored.column(0).combine_chunks().take(order).equals(direct)
        assert any("joins with items.grp" in line for line in _report(session))
        plan = session.plan(session_tree(sql))
        assert any(scan.joined is not None for scan in plan.scans), "the join runs on the server"
    finally:
        session.close()


def session_tree(sql: str):  # type: ignore[no-untyped-def]
    from veil.sql.parse import parse_statement

    return parse_statement(sql)


def _report(session: Session) -> list[str]:
    from veil.frontend.leakage import render_text

    return render_text(leakage(session)).splitlines()


def test_policy_bounds_peels_and_refuses_what_data_already_reveals(client: Path) -> None:
    set_policy(str(client), {("items", "amount"): RND, ("items", "grp"): DET})
    session = Session(str(client))
    try:
        assert "policy forbids" in "\n".join(
            what_if(session, "SELECT * FROM items WHERE amount = 5")
        )
        assert session.run("SELECT count(*) FROM items WHERE amount = 5").table.column(0)[
            0
        ].as_py() == sum((i * 37) % 1000 == 5 for i in range(ROWS))
        assert (
            session.run("SELECT max(grp) FROM items WHERE grp < 3").table.column(0)[0].as_py() == 2
        )
        items = session.design.table("items")
        assert items.find("amount", DET) is None and items.find("grp", OPE) is None
        with pytest.raises(PolicyError, match=r"policy of items\.amount is RND"):
            manual_peel(session, "items", "amount", "DET")
        with pytest.raises(PolicyError, match=r"unknown column items\.nope"):
            set_policy(str(client), {("items", "nope"): DET})
        with pytest.raises(PolicyError, match="--allow-plaintext"):
            set_policy(str(client), {("items", "name"): "PLAIN"})
        session.run("SELECT count(*) FROM items WHERE name = 'name 1'")  # peels name to DET
        with pytest.raises(PolicyError, match="must be re-encrypted"):
            set_policy(str(client), {("items", "name"): RND})
        stale = set_policy(str(client), {("items", "name"): RND}, reencrypt=True)
        assert stale == ["items"]
        reencrypt(session, "items")
        items = session.design.table("items")
        assert all(e.outer == RND for e in items.encryptions if e.scheme in (DET, OPE, JOIN))
        assert items.find("name", DET) is None and not items.encryptions_of("name", DET)
        assert (
            session.run("SELECT count(*) FROM items WHERE name = 'name 1'")
            .table.column(0)[0]
            .as_py()
            == 60
        )
        _assert_forms(session)
    finally:
        session.close()


def test_a_load_refuses_a_policy_naming_an_unknown_column(source: Path, tmp_path: Path) -> None:
    policy = Policy(columns={"items.amout": DET})
    with pytest.raises(PolicyError, match=r"items\.amout"):
        load(str(source), f"duckdb://{tmp_path / 's.duckdb'}", str(tmp_path / "c"), policy=policy)


def test_the_cli_peels_and_reports(client: Path, tmp_path: Path) -> None:
    veil = [sys.executable, "-m", "veil"]
    env = {**os.environ}
    done = subprocess.run(
        [*veil, "peel", str(client), "items.grp", "DET"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    png = tmp_path / "leakage.png"
    done = subprocess.run(
        [*veil, "leakage", str(client), "--png", str(png)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "items.grp: reveals which rows hold equal values" in done.stdout
    assert png.stat().st_size > 1000
    done = subprocess.run(
        [*veil, "policy", "set", str(client), "items.grp", "RND"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 2 and "re-encrypted" in done.stderr


def test_an_index_on_an_onion_column_survives_peels_and_rekeys(client: Path) -> None:
    session = Session(str(client))
    try:
        statements.run(session, "CREATE INDEX by_grp ON items (grp)")
        sql = "SELECT label, count(*) FROM items, groups WHERE grp = gid AND grp = 4 GROUP BY label"
        assert session.run(sql).table.to_pylist() == [
            {"label": "group 4", "count_star()": len(range(4, ROWS, 7))}
        ]
        session.run("INSERT INTO items VALUES (99999, 4, 1, 'x')")
        assert session.run(sql).table.column(1)[0].as_py() == len(range(4, ROWS, 7)) + 1
    finally:
        session.close()


def _server_indexes(session: Session) -> set[str]:
    """Names of the server's indexes on the items table."""
    table = session.design.table("items").server_name
    sql = (
        "SELECT index_name FROM duckdb_indexes() WHERE table_name = $1"
        if session.backend.dialect == "duckdb"
        else "SELECT indexname FROM pg_indexes WHERE tablename = $1"
    )
    return set(session.backend.execute(sql, [table]).column(0).to_pylist())


def test_an_index_dropped_for_a_peel_is_rebuilt_after_a_crash(client: Path) -> None:
    """DuckDB's peels drop an index over the column and build it again afterwards; a client
    killed in between leaves a note in the layers table that the next session acts on."""
    session = Session(str(client))
    try:
        statements.run(session, "CREATE INDEX by_grp ON items (grp)")
        before = _server_indexes(session)
    finally:
        session.close()
    assert before
    assert _crash_during_peel(client, "before commit") == 9
    session = Session(str(client))
    try:
        assert _server_indexes(session) == before
        assert session.design.table("items").onion_of("grp", DET).outer == RND  # type: ignore[union-attr]
        found = session.run("SELECT count(*) FROM items WHERE grp = 5").table.column(0)[0]
        assert found.as_py() == len(range(5, ROWS, 7))
        assert _server_indexes(session) == before  # the peel built them again
        _assert_forms(session)
    finally:
        session.close()


def test_the_workload_designer_stores_nothing_beyond_policy(source: Path, tmp_path: Path) -> None:
    workload = ["SELECT id FROM items WHERE amount < 5", "SELECT count(*) FROM items WHERE grp = 1"]
    policy = Policy(columns={"items.amount": DET, "items.grp": RND})
    url = f"duckdb://{tmp_path / 's.duckdb'}"
    load(str(source), url, str(tmp_path / "c"), workload, lambda _: None, policy=policy)
    session = Session(str(tmp_path / "c"))
    try:
        items = session.design.table("items")
        assert items.encryptions_of("amount", OPE) == []  # the range runs on the client
        assert items.encryptions_of("grp", DET) == [] and items.encryptions_of("grp", OPE) == []
        assert session.run("SELECT count(*) FROM items WHERE grp = 1").table.column(0)[
            0
        ].as_py() == len(range(1, ROWS, 7))
        assert len(session.run(workload[0]).table) == sum((i * 37) % 1000 < 5 for i in range(ROWS))
    finally:
        session.close()


def test_a_failed_peel_leaves_the_query_to_the_client(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server without the layer functions: the query still answers, nothing peeled."""
    from sqlglot import exp

    import veil.session.onions as onions

    missing = exp.maybe_parse("SELECT no_such_fn()")
    monkeypatch.setattr(onions, "peel_statement", lambda *_: missing.copy())
    monkeypatch.setattr(onions, "peeled_rows_statement", lambda *_: missing.copy())
    session = Session(str(client))
    try:
        found = session.run("SELECT count(*) FROM items WHERE grp = 2").table.column(0)[0]
        assert found.as_py() == len(range(2, ROWS, 7))
        assert session.design.table("items").onion_of("grp", DET).outer == RND  # type: ignore[union-attr]
        _assert_forms(session)
    finally:
        session.close()


def test_a_session_opened_while_a_table_is_rebuilt(
    client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table rebuilt between the new session's reading of the design and its check of
    the onion layers (ALTER here; a re-key's or a redesign's swap alike) dropped the layers
    table that design names: the session reads the design again instead of failing."""
    import veil
    import veil.session.session as session_module

    other = veil.connect(str(client))
    real = session_module.connect_existing
    rebuilt: list[str] = []

    def racing(url: str) -> Any:
        backend = real(url)
        if not rebuilt:  # once: the design is read, the layers not yet checked
            rebuilt.append(url)
            other.cursor().execute("ALTER TABLE items ADD COLUMN note VARCHAR")
        return backend

    monkeypatch.setattr(session_module, "connect_existing", racing)
    try:
        session = Session(str(client))
        try:
            assert rebuilt
            assert "note" in [c.name for c in session.design.table("items").columns]
            found = session.run("SELECT count(*) FROM items WHERE grp = 3").table.column(0)[0]
            assert found.as_py() == len(range(3, ROWS, 7))
        finally:
            session.close()
    finally:
        other.close()
