"""The audit log (issue 42, item 4): statements through ``veil serve`` (psycopg) and the
DB-API leave one JSON line each in ``audit.jsonl``, without a value of theirs.

A canary value sent as a literal and as a parameter, in queries and in an
INSERT, never appears in the file; several threads and processes append at
once without mixing lines; a line cut short by a crash is skipped by readers
and does not swallow the next one; ``veil audit`` filters and shows the log.
"""

from __future__ import annotations

import getpass
import json
import multiprocessing
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from tests.support.translations import counted_translations
from veil._native import WireServer
from veil.audit.log import AUDIT_FILE, AuditLog, read_records
from veil.audit.shape import statement_shape
from veil.load.loader import load
from veil.serve.engine import Engine

LITERAL_CANARY = "CANARY-LITERAL-7731"
PARAM_CANARY = "CANARY-PARAM-9917"
INSERTED_CANARY = "CANARY-INSERTED-4242"
CANARIES = (LITERAL_CANARY, PARAM_CANARY, INSERTED_CANARY, "4111-1111-0000-7731")


def make_client_dir(root: Path) -> Path:
    """A client directory of one small table, loaded as onions (queries peel layers)."""
    people = pa.table(
        {
            "id": pa.array(range(1, 41), pa.int64()),
            "name": [f"person {i}" for i in range(1, 41)],
            "card": [f"4111-1111-0000-{i:04d}" for i in range(1, 41)],
            "age": pa.array([20 + i % 50 for i in range(1, 41)], pa.int64()),
        }
    )
    pq.write_table(people, root / "people.parquet")
    load(
        str(root / "people.parquet"),
        f"duckdb:///{root / 'server.duckdb'}",
        str(root / "client"),
        progress=lambda _: None,
    )
    return root / "client"


@pytest.fixture(scope="module")
def client_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_client_dir(tmp_path_factory.mktemp("audit"))


@pytest.fixture(scope="module")
def port(client_dir: Path) -> Iterator[str]:
    """An audited --insecure-local server (any user name is accepted)."""
    engine = Engine(client_dir, audit=True)
    server = WireServer(engine, "127.0.0.1:0", None, None, True)
    yield server.address.rsplit(":", 1)[1]
    server.stop()
    engine.close()


def _connect(port: str, user: str = "alice") -> psycopg.Connection:
    return psycopg.connect(f"host=127.0.0.1 port={port} user={user} dbname=veil", autocommit=True)


def _records(client_dir: Path) -> list[dict[str, object]]:
    return read_records(client_dir / AUDIT_FILE)[0]


def _assert_no_canary(client_dir: Path) -> None:
    text = (client_dir / AUDIT_FILE).read_bytes()
    for canary in CANARIES:
        assert canary.encode() not in text, canary


def test_wire_statements_are_logged_without_values(port: str, client_dir: Path) -> None:
    with _connect(port) as con:
        before = len(_records(client_dir))
        literal = f"SELECT id, card FROM people WHERE name = '{LITERAL_CANARY}' OR age > 60"
        assert con.execute(literal).fetchall() == []
        # the extended protocol: the value travels as a parameter ($1)
        con.execute("SELECT id FROM people WHERE card = %s", [PARAM_CANARY]).fetchall()
        # client-side binding: psycopg writes the parameter into the text as a literal
        psycopg.ClientCursor(con).execute(
            "SELECT id FROM people WHERE card = %s", [PARAM_CANARY]
        ).fetchall()
        con.execute(
            "INSERT INTO people VALUES (%s, %s, %s, %s)",
            [100, INSERTED_CANARY, "4111-1111-0000-7731", 99],
        )
        rows = con.execute("SELECT name, age FROM people WHERE id <= 3 ORDER BY id").fetchall()
        assert len(rows) == 3
        with pytest.raises(psycopg.errors.UndefinedTable) as missing:  # 42P01, as PostgreSQL
            con.execute("SELECT * FROM no_such_table WHERE x = 'CANARY-LITERAL-7731'")
    records = _records(client_dir)[before:]
    _assert_no_canary(client_dir)
    shapes = [r["statement"] for r in records]
    assert "SELECT id, card FROM people WHERE name = ? OR age > ?" in shapes
    assert shapes.count("SELECT id FROM people WHERE card = ?") == 2
    assert "INSERT INTO people VALUES (?, ?, ?, ?)" in shapes
    assert all(r["user"] == "alice" and r["via"] == "serve" for r in records)
    first = records[shapes.index("SELECT id, card FROM people WHERE name = ? OR age > ?")]
    # name and age are compared on the server (DET, OPE): only the outputs are decrypted
    assert first["tables"] == {"people": ["card", "id"]}
    assert first["rows"] == 0 and first["outcome"] == "ok" and first["sqlstate"] == "00000"
    listed = records[shapes.index("SELECT name, age FROM people WHERE id <= ? ORDER BY id")]
    assert listed["rows"] == 3 and listed["kind"] == "query"
    assert set(listed["tables"]["people"]) >= {"name", "age"}
    assert listed["seconds"] > 0 and listed["phases"]["server"] > 0
    inserted = records[shapes.index("INSERT INTO people VALUES (?, ?, ?, ?)")]
    assert inserted["kind"] == "dml" and inserted["rows"] == 1
    failed = records[-1]
    assert failed["outcome"] == "error" and failed["sqlstate"] == missing.value.sqlstate
    assert failed["rows"] is None
    # the first query that compared name and card peeled their onion layers
    assert any(r["peels"] for r in records)


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql (postgresql-client) not installed")
def test_psql_statements_are_logged_without_values(port: str, client_dir: Path) -> None:
    """psql's simple protocol (every value written into the text): queries and an INSERT."""
    before = len(_records(client_dir))
    script = (
        f"SELECT id FROM people WHERE name = '{LITERAL_CANARY}';\n"
        f"INSERT INTO people VALUES (200, '{INSERTED_CANARY}', '4111-1111-0000-7731', 42);\n"
        "SELECT count(*) FROM people WHERE age = 42;\n"
    )
    done = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-p", port, "-U", "erin", "-d", "veil", "-X", "-A", "-t"],
        input=script, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["INSERT", "0", "1", "2"]
    mine = [r for r in _records(client_dir)[before:] if r["user"] == "erin"]
    _assert_no_canary(client_dir)
    assert [r["statement"] for r in mine] == [
        "SELECT id FROM people WHERE name = ?",
        "INSERT INTO people VALUES (?, ?, ?, ?)",
        "SELECT COUNT(*) FROM people WHERE age = ?",
    ]
    assert [r["rows"] for r in mine] == [0, 1, 1]
    assert all(r["via"] == "serve" and r["outcome"] == "ok" for r in mine)


def test_a_repeated_query_is_planned_from_the_cache(port: str, client_dir: Path) -> None:
    with _connect(port, "carol") as con:
        for _ in range(3):
            con.execute("SELECT count(*) FROM people WHERE age >= %s", [30]).fetchall()
    mine = [r for r in _records(client_dir) if r["user"] == "carol"]
    assert [r["plan_cache"] for r in mine] == [False, True, True]


def test_statements_of_one_integer_shape_are_each_logged(
    port: str, client_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Integers written into the text (``pgbench -M simple``) take the shape's kept
    translation (``veil.serve.shapes``) on an audited server too: each is recorded as
    any statement, values redacted, with its rows and decrypted columns."""
    translated = counted_translations(monkeypatch)
    with _connect(port, "hana") as con:
        for key in (7, 3, 31, 12):
            rows = con.execute(f"SELECT name FROM people WHERE id = {key}").fetchall()
            assert rows == [(f"person {key}",)]
    mine = [r for r in _records(client_dir) if r["user"] == "hana"]
    assert [r["statement"] for r in mine] == ["SELECT name FROM people WHERE id = ?"] * 4
    assert [r["rows"] for r in mine] == [1, 1, 1, 1]
    assert all(r["outcome"] == "ok" and r["kind"] == "query" for r in mine)
    assert all(r["tables"] == {"people": ["name"]} for r in mine)
    # the first translation is kept after the peel its statement made (a new design): the
    # second statement is translated again, the rest are not
    assert len([t for t in translated if "WHERE id =" in t]) == 2


def test_dbapi_logs_only_when_asked(client_dir: Path) -> None:
    path = client_dir / AUDIT_FILE
    size = path.stat().st_size if path.exists() else 0
    with veil.connect(client_dir) as con:
        con.execute("SELECT count(*) FROM people").fetchall()
    assert (path.stat().st_size if path.exists() else 0) == size
    with veil.connect(client_dir, audit=True) as con:
        con.execute(f"SELECT id FROM people WHERE name = '{LITERAL_CANARY}'").fetchall()
        con.execute("SELECT id, age FROM people WHERE card = ?", [PARAM_CANARY]).fetchall()
        assert con.execute("SELECT id FROM people WHERE id < ?", [4]).fetchall()
        with pytest.raises(veil.VeilError):
            con.execute("SELECT nothing FROM people")
    records = [r for r in _records(client_dir) if r["via"] == "dbapi"]
    _assert_no_canary(client_dir)
    assert [r["statement"] for r in records] == [
        "SELECT id FROM people WHERE name = ?",
        "SELECT id, age FROM people WHERE card = ?",
        "SELECT id FROM people WHERE id < ?",
        "SELECT nothing FROM people",
    ]
    assert {r["user"] for r in records} == {getpass.getuser()}
    assert records[2]["rows"] == 3 and records[2]["tables"] == {"people": ["id"]}
    assert records[3]["outcome"] == "error" and records[3]["sqlstate"].startswith("42")


def test_concurrent_connections_write_whole_lines(port: str, client_dir: Path) -> None:
    before = len(_records(client_dir))

    def client(number: int) -> None:
        with _connect(port, f"worker{number}") as con:
            for i in range(15):
                con.execute("SELECT name FROM people WHERE id = %s", [i]).fetchall()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records, damaged = read_records(client_dir / AUDIT_FILE)
    assert damaged == 0
    new = records[before:]
    assert sorted(r["user"] for r in new) == sorted(
        f"worker{n}" for n in range(6) for _ in range(15)
    )


def _append_many(directory: str, writer: int, count: int) -> None:
    log = AuditLog(directory)
    for i in range(count):  # lines longer than PIPE_BUF (4 KiB): atomic by the lock, not by luck
        log.record({"user": f"p{writer}", "n": i, "statement": "x" * (3000 + 97 * writer)})
    log.close()


def test_concurrent_processes_write_whole_lines(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_append_many, args=(str(tmp_path), w, 200)) for w in range(4)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(60)
        assert process.exitcode == 0
    records, damaged = read_records(tmp_path / AUDIT_FILE)
    assert damaged == 0 and len(records) == 800
    for writer in range(4):
        mine = [r["n"] for r in records if r["user"] == f"p{writer}"]
        assert mine == list(range(200))  # each writer's lines whole and in its order
    assert oct((tmp_path / AUDIT_FILE).stat().st_mode & 0o777) == "0o600"


def test_a_line_cut_short_is_skipped_and_the_next_starts_clean(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    log.record({"user": "a", "statement": "SELECT ?"})
    whole = json.dumps({"user": "b", "statement": "SELECT ? FROM t"})
    with (tmp_path / AUDIT_FILE).open("a") as file:
        file.write(whole[: len(whole) // 2])  # a writer killed mid-line
    assert read_records(tmp_path / AUDIT_FILE) == ([{"user": "a", "statement": "SELECT ?"}], 1)
    log.record({"user": "c", "statement": "SELECT ?"})
    log.close()
    records, damaged = read_records(tmp_path / AUDIT_FILE)
    assert [r["user"] for r in records] == ["a", "c"] and damaged == 1
    shown = _veil("audit", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert "skipped 1 damaged line" in shown.stderr and "(2 statements)" in shown.stdout


def test_a_log_moved_away_is_started_again(tmp_path: Path) -> None:
    """Rotated as any log (moved away, or removed): the next line starts a new file."""
    log = AuditLog(tmp_path)
    log.record({"user": "a"})
    (tmp_path / AUDIT_FILE).rename(tmp_path / "audit.1.jsonl")
    log.record({"user": "b"})
    (tmp_path / AUDIT_FILE).unlink()
    log.record({"user": "c"})
    log.close()
    assert read_records(tmp_path / "audit.1.jsonl") == ([{"user": "a"}], 0)
    assert read_records(tmp_path / AUDIT_FILE) == ([{"user": "c"}], 0)


def _veil(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "veil.cli", *argv], capture_output=True, text=True, check=False
    )


def test_veil_audit_filters_and_explains(port: str, client_dir: Path) -> None:
    with _connect(port, "dave") as con:
        con.execute("SELECT age FROM people WHERE id = 1").fetchall()
    every = _veil("audit", str(client_dir), "--json")
    assert every.returncode == 0, every.stderr
    assert len(every.stdout.splitlines()) == len(_records(client_dir))
    dave = _veil("audit", str(client_dir), "--user", "dave", "--table", "people", "--json")
    lines = [json.loads(line) for line in dave.stdout.splitlines()]
    assert [r["statement"] for r in lines] == ["SELECT age FROM people WHERE id = ?"]
    shown = _veil("audit", str(client_dir), "--user", "dave", "--since", "1h")
    assert "SELECT age FROM people WHERE id = ?" in shown.stdout
    assert "people(age)" in shown.stdout and "(1 statement)" in shown.stdout
    assert "no statements match" in _veil("audit", str(client_dir), "--since", "2999-01-01").stdout
    assert "no statements match" in _veil("audit", str(client_dir), "--table", "nope").stdout
    bad = _veil("audit", str(client_dir), "--since", "yesterday")
    assert bad.returncode == 2 and "--since 'yesterday' is neither" in bad.stderr
    missing = _veil("audit", str(client_dir.parent / "people.parquet"))
    assert missing.returncode == 2 and "not a client directory" in missing.stderr
    empty = _veil("audit", str(client_dir.parent))
    assert empty.returncode == 2 and "no audit log yet" in empty.stderr


@pytest.mark.parametrize(
    ("sql", "shape"),
    [
        ("SELECT a FROM t WHERE b = 'x' AND c > $1 -- 'note'", "SELECT a FROM t WHERE b = ? AND c > ?"),
        ("INSERT INTO t VALUES (1, E'\\x41', TRUE, DATE '2020-01-01')", "INSERT INTO t VALUES (?, ?, ?, CAST(? AS DATE))"),
        ("SET application_name TO 'my app'", "SET application_name = ?"),
        ("SELECT CAST(x AS NUMERIC(10, 2)) FROM t LIMIT 5", "SELECT CAST(x AS DECIMAL(10, 2)) FROM t LIMIT ?"),
        ("UPDATE t SET a = 'secret' /* 'secret' */ WHERE id = 3", "UPDATE t SET a = ? WHERE id = ?"),
        ("VACUUM t 'secret' ((", "VACUUM ..."),
        ("DECLARE c CURSOR FOR SELECT * FROM t WHERE a = 'secret'", "DECLARE ..."),
        ("SELECT 'secret' FROM (", "SELECT ..."),
    ],
)  # fmt: skip
def test_shapes_keep_no_value(sql: str, shape: str) -> None:
    assert statement_shape(sql, "postgres")[0] == shape


def test_veil_serve_no_audit_logs_nothing(tmp_path: Path) -> None:
    from veil.cli import build_parser
    from veil.serve.cli import start

    client = make_client_dir(tmp_path)
    argv = ["serve", str(client), "--listen", "127.0.0.1:0", "--insecure-local", "--no-audit"]
    server, engine = start(build_parser().parse_args(argv))
    try:
        port = server.address.rsplit(":", 1)[1]  # type: ignore[attr-defined]
        with _connect(port) as con:
            assert con.execute("SELECT count(*) FROM people").fetchall() == [(40,)]
    finally:
        server.stop()  # type: ignore[attr-defined]
        engine.close()  # type: ignore[attr-defined]
    assert not (client / AUDIT_FILE).exists()
