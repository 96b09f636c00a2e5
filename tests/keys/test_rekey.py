"""Re-key rotation (issue 42, item 2): ``veil rotate --rekey``, on DuckDB and PostgreSQL.

A new master key; every table re-encrypted under it one at a time while other
sessions query and write; the old key gone from the key file at the end, and
every answer as before. A re-key killed mid-way (a child process, SIGKILL)
leaves each table whole under one key or the other, ``veil status`` says
which, and running it again finishes it and drops what the killed run left.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from tests.concurrency.conftest import connected, rows
from veil._native import WireServer
from veil.cli import main
from veil.crypto.keys import KeyLabel
from veil.design.model import PhysicalDesign
from veil.errors import KeyFileError, SerializationError, WrongKeyError
from veil.keys import (
    begin_rekey,
    create_key,
    finish_rekey,
    key_status,
    load_key,
    load_keys,
    rewrap_key,
)
from veil.keys.generations import scope_keys, table_keys
from veil.keys.ring import KeyRing, marked
from veil.load import rekey as rekey_module
from veil.load.loader import load
from veil.load.rekey import rekey
from veil.serve.engine import Engine
from veil.session.clientdir import create_client_dir
from veil.session.session import Session
from veil.sql.errors import ClientDirectoryError, UniqueViolationError

pytestmark = pytest.mark.integration

VEIL = [sys.executable, "-m", "veil"]
ROWS = 3000
READS = [
    "SELECT o_cust, sum(l_qty), count(*) FROM orders JOIN lines ON o_id = l_oid "
    "WHERE o_total > 100 GROUP BY o_cust ORDER BY o_cust",
    "SELECT count(*), sum(o_total) FROM orders WHERE o_cust = 'c3'",
    "SELECT l_note FROM lines WHERE l_oid = 17 ORDER BY l_note",
    "SELECT count(*) FROM lines WHERE l_qty BETWEEN 10 AND 20",
]


def load_shop(root: Path, url: str, more: int = 0) -> Path:
    """orders and lines (joined, summed, filtered), counters (written), ``more`` others."""
    source = root / "source"
    source.mkdir()
    orders = {
        "o_id": pa.array(range(ROWS), pa.int64()),
        "o_cust": [f"c{i % 37}" for i in range(ROWS)],
        "o_total": [i * 1.5 for i in range(ROWS)],
    }
    lines = {
        "l_oid": pa.array([i % ROWS for i in range(2 * ROWS)], pa.int64()),
        "l_qty": pa.array([i % 50 for i in range(2 * ROWS)], pa.int64()),
        "l_note": [f"note {i}" for i in range(2 * ROWS)],
    }
    counters = {"id": pa.array(range(4), pa.int64()), "n": pa.array([0] * 4, pa.int64())}
    tables = {"orders": orders, "lines": lines, "counters": counters}
    tables |= {f"extra{k}": orders for k in range(more)}
    for name, columns in tables.items():
        pq.write_table(pa.table(columns), source / f"{name}.parquet")
    client = root / "client"
    load(str(source), url, str(client), progress=lambda _: None)
    return client


def answers(client: Path) -> list[list[tuple[object, ...]]]:
    with connected(client) as cursor:
        return [cursor.execute(sql).fetchall() for sql in READS]


def server_tables(client: Path) -> set[str]:
    session = Session(client)
    try:
        return set(session.backend.table_names())
    finally:
        session.close()


def named_by_design(client: Path) -> set[str]:
    design = PhysicalDesign.load(client / "design.json")
    return {
        name
        for table in design.tables.values()
        for name in [table.server_name, *table.side_tables()]
    }


def test_rekey_while_other_sessions_query_and_write(backend_url: str, tmp_path: Path) -> None:
    client = load_shop(tmp_path, backend_url)
    expected = answers(client)
    old = load_key(client / "key.json")
    old_file = tmp_path / "old.key"
    shutil.copy(client / "key.json", old_file)
    scopes_before = {
        (t.name, e.source, e.scheme): e.key_scope
        for t in PhysicalDesign.load(client / "design.json").tables.values()
        for e in t.encryptions
    }
    stop = threading.Event()
    wrong: list[object] = []
    reads = [0]
    increments: list[int] = []
    inserts: list[int] = []

    def read() -> None:  # opened before the re-key: it must pick up the new key itself
        try:
            with connected(client) as cursor:
                while not stop.is_set():
                    for sql, want in zip(READS, expected, strict=True):
                        got = cursor.execute(sql).fetchall()
                        if got != want:
                            wrong.append((sql, got[:3], want[:3]))
                    reads[0] += 1
        except BaseException as exc:
            wrong.append(exc)

    def write() -> None:
        try:
            with connected(client) as cursor:
                step = 0
                while not stop.is_set() or step < 20:
                    try:
                        if step % 2:
                            cursor.execute(f"UPDATE counters SET n = n + 1 WHERE id = {step % 4}")
                            increments.append(step)
                        else:
                            cursor.execute(f"INSERT INTO counters VALUES ({100 + step}, 0)")
                            inserts.append(100 + step)
                    except SerializationError:
                        pass  # collided on every attempt and changed nothing
                    step += 1
        except BaseException as exc:
            wrong.append(exc)

    threads = [threading.Thread(target=read), threading.Thread(target=write)]
    for thread in threads:
        thread.start()
    try:
        messages: list[str] = []
        report = rekey(client, messages.append)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert wrong == []
    assert reads[0] >= 1 and len(increments) >= 10 and len(inserts) >= 10
    assert sorted(report.tables) == ["counters", "lines", "orders"]
    assert any(m.startswith("re-key: orders") for m in messages)  # the progress shown

    # nothing lost: every increment and insert the writer saw succeed is there
    stored = [(int(str(i)), int(str(n))) for i, n in rows(client, "SELECT id, n FROM counters")]
    assert sum(n for i, n in stored if i < 4) == len(increments)
    assert {i for i, _ in stored if i >= 100} == set(inserts)
    assert answers(client) == expected

    # the old key is gone: the key file holds the new one alone, generation 2
    document = json.loads((client / "key.json").read_text())
    assert "next" not in document and document["generation"] == 2
    assert document["fingerprint"] == report.new != old.fingerprint()
    assert old.fingerprint() not in (client / "key.json").read_text()
    design = PhysicalDesign.load(client / "design.json")
    assert design.key_fingerprint == report.new and scope_keys(design) == set()
    # the same key groups as before (ASHE's keys are fresh with every load anyway)
    assert {
        (t.name, e.source, e.scheme): e.key_scope for t in design.tables.values()
        for e in t.encryptions
    } == scopes_before  # fmt: skip
    assert server_tables(client) >= named_by_design(client)
    # a copy of the old key file opens nothing now
    stale = tmp_path / "stale-client"
    shutil.copytree(client, stale)
    shutil.copy(old_file, stale / "key.json")
    with pytest.raises(WrongKeyError):
        veil.connect(stale)


def test_a_killed_rekey_resumes(
    backend_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = load_shop(tmp_path, backend_url, more=6)
    expected = answers(client)
    old = key_status(client / "key.json").fingerprint
    tables_before = server_tables(client)
    with (tmp_path / "rekey.log").open("w") as log:
        process = subprocess.Popen(
            [*VEIL, "rotate", str(client), "--rekey"], stdout=log, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 300
    done: set[str] = set()
    while not done and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
        done = _on_next_key(client)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert done, "the re-key ended before a table was re-keyed"
    # killed before its end (nine tables, one done): both keys in the file
    assert key_status(client / "key.json").next_fingerprint
    assert main(["status", str(client)]) == 0
    out = capsys.readouterr().out
    assert "re-key            under way to generation 2" in out
    assert "generation 1: " in out and "generation 2: " in out
    assert answers(client) == expected  # each table whole, under one key or the other

    assert main(["rotate", str(client), "--rekey"]) == 0
    out = capsys.readouterr().out
    assert "every table is under generation 2" in out
    status = key_status(client / "key.json")
    assert (status.generation, status.next_fingerprint) == (2, "")
    assert status.fingerprint != old
    assert answers(client) == expected
    assert main(["status", str(client)]) == 0
    assert "all under this master key (generation 2)" in capsys.readouterr().out
    # what the killed run was writing (or had not dropped yet) is gone: the server holds
    # as many tables as before, those the design names
    assert server_tables(client) == named_by_design(client)
    assert len(server_tables(client)) == len(tables_before)
    assert not (client / "rekey.json").exists()


def _on_next_key(client: Path) -> set[str]:
    """The tables under the re-key's new key, read as ``veil status`` does."""
    try:
        design = PhysicalDesign.load(client / "design.json")
    except Exception:
        return set()
    marked = scope_keys(design)
    return {
        name
        for name, table in design.tables.items()
        if marked and table_keys(table, design.key_fingerprint) <= marked
    }


def test_rekey_of_a_passphrase_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VEIL_PASSPHRASE", "a long passphrase")
    key_file = tmp_path / "client.key"
    assert main(["keygen", str(key_file), "--passphrase"]) == 0
    source = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": pa.array(range(50), pa.int64()), "b": ["x"] * 50}), source)
    client = tmp_path / "client"
    load(str(source), f"duckdb:///{tmp_path / 's.duckdb'}", str(client), progress=lambda _: None,
         key_file=str(key_file))  # fmt: skip
    report = rekey(client)
    status = key_status(client / "key.json")
    assert status.wrapped_by == "passphrase (Argon2id)" and status.fingerprint == report.new
    assert rows(client, "SELECT sum(a), count(*) FROM t WHERE b = 'x'") == [(1225, 50)]
    monkeypatch.setenv("VEIL_PASSPHRASE", "another")
    with pytest.raises(WrongKeyError):
        veil.connect(client)


def test_key_file_generations(tmp_path: Path) -> None:
    path = tmp_path / "client.key"
    old = create_key(path)
    rotation = begin_rekey(path)
    assert (rotation.old.fingerprint(), rotation.generation) == (old.fingerprint(), 2)
    assert begin_rekey(path).new.fingerprint() == rotation.new.fingerprint()  # resumed, not new
    status = key_status(path)
    assert (status.generation, status.next_fingerprint) == (1, rotation.new.fingerprint())
    assert load_key(path).fingerprint() == old.fingerprint()  # KV and documents: the old key
    ring = load_keys(path)
    assert isinstance(ring, KeyRing) and ring.fingerprint() == old.fingerprint()
    assert load_keys(path, rotation.new.fingerprint()).fingerprint() == rotation.new.fingerprint()
    # a marked scope derives what the unmarked scope derives under the key it names
    label = KeyLabel("det", marked("orders.o_id", rotation.new.fingerprint()))
    assert ring.derive(label) == rotation.new.derive(KeyLabel("det", "orders.o_id"))
    assert ring.derive(KeyLabel("det", "orders.o_id")) == old.derive(KeyLabel("det", "orders.o_id"))
    with pytest.raises(KeyFileError, match="middle of a re-key"):
        rewrap_key(path, "file", new_passphrase="a long passphrase")
    after = finish_rekey(path)
    assert (after.fingerprint, after.generation, after.next_fingerprint) == (
        rotation.new.fingerprint(),
        2,
        "",
    )
    assert not isinstance(load_keys(path), KeyRing)
    assert old.fingerprint() not in path.read_text()


def test_nothing_loaded_nothing_to_rekey(tmp_path: Path) -> None:
    client, _ = create_client_dir(tmp_path / "client", f"duckdb:///{tmp_path / 's.duckdb'}")
    with pytest.raises(ClientDirectoryError, match="nothing to re-key"):
        rekey(client.path)
    assert key_status(client.key_path).next_fingerprint == ""


class Killed(BaseException):
    """Stands for a SIGKILL at one exact point of a re-key."""


def test_a_rekey_cut_between_a_swap_and_its_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": pa.array(range(20), pa.int64())}), source)
    client = tmp_path / "client"
    load(str(source), f"duckdb:///{tmp_path / 's.duckdb'}", str(client), progress=lambda _: None)
    with veil.connect(client) as con:
        con.execute("CREATE TABLE people (id INT PRIMARY KEY, n INT)")
        con.execute("INSERT INTO people VALUES (1, 1), (2, 2)")
        con.commit()

    def killed(*_: object) -> None:
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(rekey_module.declared, "install", killed)
        with pytest.raises(Killed):
            rekey(client)
    assert (client / "rekey.json").exists()  # people swapped in, its indexes not yet made
    rekey(client)
    assert server_tables(client) == named_by_design(client)
    with veil.connect(client) as con, pytest.raises(UniqueViolationError, match="people"):
        con.execute("INSERT INTO people VALUES (1, 9)")
    assert rows(client, "SELECT id, n FROM people ORDER BY id") == [(1, 1), (2, 2)]


def test_veil_serve_answers_through_a_rekey(tmp_path: Path) -> None:
    """A psql-like client of ``veil serve``, connected before the re-key, keeps reading
    right answers and writing through it (its session picks up the new key itself)."""
    client = load_shop(tmp_path, f"duckdb:///{tmp_path / 'server.duckdb'}")
    expected = answers(client)
    engine = Engine(client)
    server = WireServer(engine, "127.0.0.1:0", None, None, True)
    stop = threading.Event()
    wrong: list[object] = []
    written: list[int] = []

    def serve_client() -> None:
        port = server.address.rsplit(":", 1)[1]
        url = f"host=127.0.0.1 port={port} user=alice dbname=veil"
        try:
            with psycopg.connect(url, autocommit=True) as pg:
                step = 0
                while not stop.is_set() or step < 3:
                    got = [[tuple(r) for r in pg.execute(sql).fetchall()] for sql in READS]
                    if got != expected:
                        wrong.append(step)
                    pg.execute(f"INSERT INTO counters VALUES ({1000 + step}, {step})")
                    written.append(1000 + step)
                    step += 1
        except BaseException as exc:
            wrong.append(exc)

    thread = threading.Thread(target=serve_client)
    thread.start()
    try:
        rekey(client)
    finally:
        stop.set()
        thread.join()
        server.stop()
        engine.close()
    assert wrong == []
    stored = rows(client, "SELECT id FROM counters WHERE id >= 1000")
    assert sorted(int(str(i)) for (i,) in stored) == written
