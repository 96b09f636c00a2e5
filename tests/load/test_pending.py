"""A load killed or failed part-way leaves server tables no design names; the next load drops
them, and never a table a live load is making or the design names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import veil
from veil.backends import Backend, connect
from veil.load import pending
from veil.load.loader import load
from veil.session.clientdir import ClientDir, open_client_dir

KILLED = """
import os, signal, sys
import pyarrow as pa
from veil.backends import connect
from veil.load.pending import PendingTables
from veil.session.clientdir import open_client_dir

client = open_client_dir(sys.argv[1])
backend = connect(client.server_url())
record = PendingTables(client, ["t_made", "t_never_made"])
backend.bulk_load("t_made", pa.table({"x": [1, 2, 3]}))
record.dropping(["t_old"])
backend.close()
os.kill(os.getpid(), signal.SIGKILL)  # a load killed between its table and the design switch
"""


@pytest.fixture
def client(tmp_path: Path) -> ClientDir:
    source = tmp_path / "people.csv"
    source.write_text("id,name\n1,a\n2,b\n")
    load(str(source), f"duckdb:///{tmp_path / 's.duckdb'}", str(tmp_path / "c"),
         progress=lambda _: None)  # fmt: skip
    return open_client_dir(tmp_path / "c")


def _tables(client: ClientDir) -> set[str]:
    backend = connect(client.server_url())
    try:
        return set(backend.table_names())
    finally:
        backend.close()


def _server(client: ClientDir) -> Backend:
    return connect(client.server_url())


def test_a_killed_load_leaves_tables_the_next_ddl_drops(client: ClientDir) -> None:
    backend = _server(client)
    backend.bulk_load("t_old", pa.table({"x": [1]}))
    backend.close()
    killed = subprocess.run([sys.executable, "-c", KILLED, str(client.path)], check=False)
    assert killed.returncode == -9
    assert {"t_made", "t_old"} <= _tables(client)
    assert len(pending.orphans(client)) == 1
    named_before = _tables(client) - {"t_made", "t_old"}
    status = subprocess.run([sys.executable, "-m", "veil", "status", str(client.path)],
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert "1 load(s) killed part-way" in status.stdout

    with veil.connect(str(client.path)) as con:
        con.execute("CREATE TABLE pets (id INTEGER, kind VARCHAR)")
        con.execute("INSERT INTO pets VALUES (1, 'cat')")
        assert con.execute("SELECT name FROM people ORDER BY id").fetchall() == [("a",), ("b",)]
        assert con.execute("SELECT kind FROM pets").fetchall() == [("cat",)]

    left = _tables(client)
    assert not {"t_made", "t_old"} & left
    assert named_before <= left  # nothing the design names was touched
    assert pending.orphans(client) == []
    assert list((client.path / pending.PENDING_DIR).iterdir()) == []


def test_a_live_load_and_the_designs_tables_are_kept(client: ClientDir) -> None:
    design = client.design(client.master_key())
    people = design.tables["people"]
    backend = _server(client)
    try:
        live = pending.PendingTables(client, ["t_live"])
        backend.bulk_load("t_live", pa.table({"x": [1]}))
        # a dead load that had switched the design before dying: its tables are named now
        dead = pending.PendingTables(client, [people.server_name, *people.side_tables()])
        dead.abandon()
        assert pending.orphans(client) == [dead.path]
        assert pending.sweep(client, backend, design) == 0
        assert {"t_live", people.server_name} <= set(backend.table_names())
        assert pending.orphans(client) == []
        live.done()
    finally:
        backend.close()
    with veil.connect(str(client.path)) as con:
        assert con.execute("SELECT count(*) FROM people").fetchone() == (2,)


def test_a_load_that_fails_part_way_is_cleared_by_the_next(
    client: ClientDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veil.load import loader

    made: list[str] = []
    real = loader.counter_table

    def failing(rows: int) -> pa.Table:
        raise OSError("the server went away")

    monkeypatch.setattr(loader, "counter_table", failing)
    before = _tables(client)
    source = client.path.parent / "pets.csv"
    source.write_text("id,kind\n1,cat\n")
    with pytest.raises(OSError, match="went away"):
        load(str(source), f"duckdb:///{client.path.parent / 's.duckdb'}", str(client.path),
             progress=made.append)  # fmt: skip
    assert len(_tables(client) - before) == 1  # the main table, never named
    monkeypatch.setattr(loader, "counter_table", real)
    load(str(source), f"duckdb:///{client.path.parent / 's.duckdb'}", str(client.path),
         progress=made.append)  # fmt: skip
    assert any("interrupted load" in line for line in made)
    with veil.connect(str(client.path)) as con:
        assert con.execute("SELECT kind FROM pets").fetchall() == [("cat",)]
    design = client.design(client.master_key())
    assert _tables(client) == pending.in_use(design)
