"""Statements across a re-key's final switch (issue 42, item 2), on DuckDB and PostgreSQL.

The final switch makes the new key the design's base and destroys the old
key. A CREATE TABLE or ALTER TABLE encrypts its rows under the keys its
session read when it began; one that began before the switch and saved its
table after it would name data under a key that is gone. Each test holds a
statement inside its load (its rows encrypted, its table not yet saved)
while the re-key reaches the switch, then lets both go on: the switch waits
for the statement (the re-key says so), the re-key then moves the new table
too, and every table reads right under the new key alone. Without the
switch's lock (``veil.keys.generations``) such a statement failed with
"restore the right key file" and its table was lost.

Also across the switch: a peel (done on the server before it, recorded in
the design after it), every kind of statement from a session last used
under the old key, and a KV store opened with the client directory's key
file (refused once the old key is gone, as docs/keys.md says).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import veil
import veil.documents
import veil.kv
from tests.concurrency.conftest import connected, rows
from tests.documents.conftest import database_name, ferretdb  # noqa: F401
from tests.keys.test_rekey import answers, load_shop, named_by_design, server_tables
from veil.design.model import PhysicalDesign
from veil.errors import WrongKeyError
from veil.keys import begin_rekey, key_status, load_key
from veil.keys.generations import table_keys
from veil.load import ddl
from veil.load import rekey as rekey_module
from veil.load.rekey import rekey
from veil.session import onions

pytestmark = pytest.mark.integration

WAIT = 120  # seconds a step may take before the test gives up (never reached when right)


class Gate:
    """A point one thread stops at (``reached``) until another lets it go on (``go``)."""

    def __init__(self) -> None:
        self.reached, self.go = threading.Event(), threading.Event()

    def stop_here(self) -> None:
        self.reached.set()
        assert self.go.wait(WAIT), "the test never let the thread go on"


def held_at_switch(monkeypatch: pytest.MonkeyPatch) -> Gate:
    """A gate at the re-key's final switch (its first try only)."""
    switch = Gate()
    real = rekey_module.switching

    @contextmanager
    def switching(*args: Any, **kwargs: Any) -> Iterator[None]:
        if not switch.reached.is_set():
            switch.stop_here()
        with real(*args, **kwargs):
            yield

    monkeypatch.setattr(rekey_module, "switching", switching)
    return switch


def held(monkeypatch: pytest.MonkeyPatch, table: str) -> tuple[Gate, Gate]:
    """Gates at the re-key's final switch (its first try) and in DDL's load of ``table``
    (once its rows are read, before they are encrypted under the session's keys)."""
    switch, load = held_at_switch(monkeypatch), Gate()
    real_load = ddl.load_into

    def load_into(source: Any, tables: Any, *rest: Any) -> Any:
        if any(t.name == table for t in tables):
            load.stop_here()
        return real_load(source, tables, *rest)

    monkeypatch.setattr(ddl, "load_into", load_into)
    return switch, load


def across_the_switch(
    client: Path, monkeypatch: pytest.MonkeyPatch, table: str, statement: Callable[[], None]
) -> list[str]:
    """Run ``statement`` (which loads ``table``) so that it is inside its load when the
    re-key makes its final switch; the re-key's progress messages."""
    errors: list[BaseException] = []
    messages: list[str] = []
    waiting = threading.Event()

    def record(message: str) -> None:
        messages.append(message)
        if "waiting" in message:
            waiting.set()

    def run(work: Callable[[], object]) -> threading.Thread:
        def guarded() -> None:
            try:
                work()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=guarded)
        thread.start()
        return thread

    switch, load = held(monkeypatch, table)
    rekeying = run(lambda: rekey(client, record))
    assert switch.reached.wait(WAIT), "the re-key never reached its final switch"
    writer = run(statement)  # every table is under the new key but the design's base is not
    assert load.reached.wait(WAIT), "the statement never reached its load"
    switch.go.set()
    while rekeying.is_alive() and not waiting.is_set():
        rekeying.join(0.05)
    load.go.set()  # the switch waits for the statement (or, wrongly, went on without it)
    writer.join(WAIT)
    rekeying.join(WAIT)
    assert not writer.is_alive() and not rekeying.is_alive()
    assert errors == []
    assert waiting.is_set(), messages  # the re-key said it waited for the statement
    return messages


def under_the_new_key_alone(client: Path) -> None:
    status = key_status(client / "key.json")
    assert (status.generation, status.next_fingerprint) == (2, "")
    design = PhysicalDesign.load(client / "design.json")
    assert design.key_fingerprint == status.fingerprint
    for table in design.tables.values():
        assert table_keys(table, design.key_fingerprint) == {status.fingerprint}, table.name
    assert server_tables(client) >= named_by_design(client)
    assert not (client / "rekey.json").exists()


def test_create_table_as_select_across_the_final_switch(
    backend_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = load_shop(tmp_path, backend_url)
    expected = answers(client)
    want = rows(client, "SELECT count(*), sum(o_total), min(o_cust) FROM orders")

    def create() -> None:
        with connected(client) as cursor:
            cursor.execute("CREATE TABLE late AS SELECT * FROM orders WHERE o_id % 2 = 0")

    messages = across_the_switch(client, monkeypatch, "late", create)
    assert any(m.startswith("re-key: late") for m in messages)  # moved to the new key too
    under_the_new_key_alone(client)
    assert answers(client) == expected
    assert rows(client, "SELECT count(*) FROM late") == [(1500,)]
    assert rows(client, "SELECT count(*), sum(o_total), min(o_cust) FROM orders") == want
    # a new session, reading only the key file of the new key alone, reads it too
    with veil.connect(client) as con:
        assert con.execute("SELECT sum(o_id) FROM late").fetchall() == [(sum(range(0, 3000, 2)),)]


def test_create_table_then_insert_across_the_final_switch(
    backend_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A declared table (keys, identity) created across the switch, then written: its
    rows, its key's index and its counter all work under the new key."""
    client = load_shop(tmp_path, backend_url)

    def create() -> None:
        with connected(client) as cursor:
            cursor.execute(
                "CREATE TABLE people (id INT PRIMARY KEY, n BIGINT GENERATED BY DEFAULT AS "
                "IDENTITY, name VARCHAR)"
            )

    across_the_switch(client, monkeypatch, "people", create)
    under_the_new_key_alone(client)
    with connected(client) as cursor:
        cursor.execute("INSERT INTO people (id, name) VALUES (1, 'ann'), (2, 'bob')")
        with pytest.raises(veil.IntegrityError):
            cursor.execute("INSERT INTO people (id, name) VALUES (1, 'again')")
    assert rows(client, "SELECT id, n, name FROM people ORDER BY id") == [
        (1, 1, "ann"),
        (2, 2, "bob"),
    ]


def test_alter_table_across_the_final_switch(
    backend_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ALTER rebuilds a table already re-keyed (under the old base key: the session's),
    begun before the switch and saved after it: the re-key moves it again."""
    client = load_shop(tmp_path, backend_url)
    want = rows(client, "SELECT sum(l_qty), count(*) FROM lines")

    def alter() -> None:
        with connected(client) as cursor:
            cursor.execute("ALTER TABLE lines ADD COLUMN flag INT DEFAULT 7")

    messages = across_the_switch(client, monkeypatch, "lines", alter)
    assert [m for m in messages if m.startswith("re-key: lines (")] == [
        "re-key: lines (2 of 3 under the old key)",
        "re-key: lines (1 of 1 under the old key)",
    ]
    under_the_new_key_alone(client)
    assert rows(client, "SELECT sum(l_qty), count(*) FROM lines") == want
    assert rows(client, "SELECT DISTINCT flag FROM lines") == [(7,)]


def test_a_peel_across_the_final_switch(
    backend_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query whose first run peels a layer, opened before the switch: its peel is done
    on the server before the switch and recorded in the design after it."""
    client = load_shop(tmp_path, backend_url)
    switch, peel = held_at_switch(monkeypatch), Gate()
    real_record = onions._record_all  # one save of the design for a peel's layers

    def record(*args: Any) -> None:
        if threading.current_thread().name == "query":  # not another session's repair
            peel.stop_here()
        real_record(*args)

    monkeypatch.setattr(onions, "_record_all", record)
    errors: list[BaseException] = []
    got: list[object] = []

    def query() -> None:
        try:
            got.extend(rows(client, "SELECT count(*) FROM lines WHERE l_note = 'note 5'"))
        except BaseException as exc:
            errors.append(exc)

    def rekeying() -> None:
        try:
            rekey(client)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=rekeying)]
    threads[0].start()
    assert switch.reached.wait(WAIT)
    threads.append(threading.Thread(target=query, name="query"))
    threads[1].start()
    assert peel.reached.wait(WAIT)  # peeled on the server, not yet in the design
    before = PhysicalDesign.load(client / "design.json").key_fingerprint
    switch.go.set()
    # the switch's design write does not wait for peels (they change no key); reading the
    # design back, the re-key waits for the peel marked in it (``peel_marks``)
    deadline = time.monotonic() + WAIT
    while PhysicalDesign.load(client / "design.json").key_fingerprint == before:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    peel.go.set()
    for thread in threads:
        thread.join(WAIT)
    assert errors == [] and got == [(1,)]
    under_the_new_key_alone(client)
    design = PhysicalDesign.load(client / "design.json")
    onion = design.tables["lines"].onion_of("l_note", "DET")
    assert onion is not None and "outer" not in onion.params  # the peel is recorded
    assert rows(client, "SELECT l_oid FROM lines WHERE l_note = 'note 3007'") == [(7,)]


def test_a_session_opened_before_a_rekey_writes_after_it(backend_url: str, tmp_path: Path) -> None:
    """Every kind of statement from a session that last read the design under the old
    key: it follows the switch (and reads the key file again) before each."""
    client = load_shop(tmp_path, backend_url)
    expected = answers(client)
    with connected(client) as cursor:
        cursor.execute("SELECT count(*) FROM counters")
        rekey(client)
        cursor.execute("INSERT INTO counters VALUES (500, 5)")
        cursor.execute("UPDATE counters SET n = n + 1 WHERE id = 1")
        cursor.execute("DELETE FROM counters WHERE id = 2")
        cursor.executemany("INSERT INTO counters VALUES (?, ?)", [(600, 6), (601, 7)])
        cursor.execute("SELECT id, n FROM counters WHERE n > 0 ORDER BY id")
        assert cursor.fetchall() == [(1, 1), (500, 5), (600, 6), (601, 7)]
        cursor.execute("CREATE TABLE notes (id INT, body VARCHAR)")
        cursor.execute("INSERT INTO notes VALUES (1, 'kept')")
        cursor.execute("DROP TABLE notes")
    under_the_new_key_alone(client)
    assert answers(client) == expected
    assert rows(client, "SELECT id FROM counters ORDER BY id") == [
        (0,),
        (1,),
        (3,),
        (500,),
        (600,),
        (601,),
    ]


def test_a_kv_store_on_the_client_key_refuses_after_a_rekey(tmp_path: Path) -> None:
    """KV packs are not re-keyed (their server is not the client directory's): one opened
    with the client directory's key file reads under the old key during the re-key, and
    is refused, decrypting nothing, once the old key is destroyed."""
    client = load_shop(tmp_path, f"duckdb:///{tmp_path / 'server.duckdb'}")
    url = f"sqlite:///{tmp_path}/kv.db"
    old_file = tmp_path / "old.key"
    shutil.copy(client / "key.json", old_file)
    with veil.kv.open(url, client / "key.json", background=False) as store:
        store.put(b"k", b"value")
    begin_rekey(client / "key.json")  # under way: the file opens to its old key
    with veil.kv.open(url, client / "key.json", background=False) as store:
        assert store.get(b"k") == b"value"
    rekey(client)
    with pytest.raises(WrongKeyError, match="different key file"):
        veil.kv.open(url, client / "key.json", background=False)
    with veil.kv.open(url, old_file, background=False) as store:  # a copy of the old key
        assert store.get(b"k") == b"value"


@pytest.fixture
def documents_url(request: pytest.FixtureRequest, database_name: str) -> str:  # noqa: F811
    """A fresh database on the session's FerretDB (the documents' reference server)."""
    return f"{request.getfixturevalue('ferretdb').url}{database_name}"


def test_a_documents_store_on_the_client_key_refuses_after_a_rekey(
    tmp_path: Path, documents_url: str
) -> None:
    """As the KV store above, a documents database (docs/keys.md): not re-keyed, read
    under the old key during the re-key, refused once it is destroyed (``WrongKeyError``
    naming both fingerprints, before any document is read), and read again with a copy
    of the old key file."""
    client = load_shop(tmp_path, f"duckdb:///{tmp_path / 'server.duckdb'}")
    old_file = tmp_path / "old.key"
    shutil.copy(client / "key.json", old_file)
    schema = {"c": {"fields": {"n": {"attr": "static", "type": "int"}}}}
    old = load_key(old_file).fingerprint()
    with veil.documents.connect(documents_url, client / "key.json", schema) as db:
        db.c.insert_one({"_id": 1, "n": 7})
    begin_rekey(client / "key.json")  # under way: the file opens to its old key
    with veil.documents.connect(documents_url, client / "key.json", schema) as db:
        assert db.c.find_one({"_id": 1})["n"] == 7
    report = rekey(client)
    refused = f"was encrypted with key {old}, not with this key file's {report.new}"
    with pytest.raises(WrongKeyError, match=refused):
        veil.documents.connect(documents_url, client / "key.json", schema)
    with veil.documents.connect(documents_url, old_file, schema) as db:  # the old key's copy
        assert db.c.find_one({"_id": 1})["n"] == 7
