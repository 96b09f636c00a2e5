"""A new user's first hour (issue 11): each surprise found by following the README, fixed.

Server URLs and client directories that mean the same from any directory,
clear errors for wrong directories and key files, schema discovery through
the DB-API, errors in the user's own terms, PEP 249's module globals, and
the command line's --version, --key, --param, SQL from stdin and `tables`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import veil
from veil.cli import main
from veil.errors import KeyFileError
from veil.load.loader import load
from veil.session.session import Session
from veil.sql.errors import ClientDirectoryError, QueryError, QuerySyntaxError


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tiny CSV tables."""
    source = tmp_path_factory.mktemp("source")
    (source / "people.csv").write_text("id,name\n1,ann\n2,bob\n3,cy\n")
    (source / "pets.csv").write_text("owner,pet\n1,cat\n3,dog\n")
    return source


def test_a_relative_server_file_is_stored_absolute(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    load(str(small), "duckdb:srv.duckdb", "cdir", progress=lambda _: None)
    assert (work / "srv.duckdb").exists()
    stored = json.loads((work / "cdir" / "server.json").read_text())["url"]
    assert stored == f"duckdb://{work / 'srv.duckdb'}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with veil.connect(work / "cdir") as con:
        assert con.execute("SELECT count(*) FROM people").fetchall() == [(3,)]
    assert not (elsewhere / "srv.duckdb").exists()


def test_a_missing_server_file_is_an_error_not_an_empty_database(
    small: Path, tmp_path: Path
) -> None:
    load(str(small), f"duckdb:///{tmp_path / 'srv.duckdb'}", str(tmp_path / "c"), progress=print)
    (tmp_path / "srv.duckdb").rename(tmp_path / "moved.duckdb")
    with pytest.raises(veil.OperationalError, match="does not exist: it was moved"):
        veil.connect(tmp_path / "c")
    assert not (tmp_path / "srv.duckdb").exists()


def test_a_failed_load_can_be_retried_against_another_server(small: Path, tmp_path: Path) -> None:
    client = tmp_path / "c"
    client.mkdir()
    (client / "server.json").write_text(json.dumps({"url": "postgresql://nobody@127.0.0.1:1/x"}))
    load(str(small), f"duckdb:///{tmp_path / 's.duckdb'}", str(client), progress=lambda _: None)
    with veil.connect(client) as con:
        assert con.execute("SELECT count(*) FROM pets").fetchall() == [(2,)]


def test_not_a_client_directory(tmp_path: Path) -> None:
    with pytest.raises(ClientDirectoryError, match="is not a Veil client directory"):
        veil.connect(tmp_path)


def test_a_key_file_of_random_bytes(small: Path, tmp_path: Path) -> None:
    load(str(small), f"duckdb:///{tmp_path / 's.duckdb'}", str(tmp_path / "c"), progress=print)
    key = tmp_path / "c" / "key.json"
    key.write_bytes(bytes(range(200, 240)))
    with pytest.raises(KeyFileError, match="is not a Veil key file"):
        veil.connect(tmp_path / "c")


def test_load_with_a_key_from_keygen(small: Path, tmp_path: Path) -> None:
    assert main(["keygen", str(tmp_path / "my.key")]) == 0
    server, client = f"duckdb:///{tmp_path / 's.duckdb'}", str(tmp_path / "c")
    args = ["load", "--source", str(small), "--server", server, "--client-dir", client]
    assert main([*args, "--key", str(tmp_path / "my.key")]) == 0
    assert (tmp_path / "c" / "key.json").read_bytes() == (tmp_path / "my.key").read_bytes()
    assert main(["keygen", str(tmp_path / "other.key")]) == 0
    assert main([*args, "--replace", "--key", str(tmp_path / "other.key")]) == 2  # not its key


@pytest.fixture(scope="module")
def connection(small: Path, tmp_path_factory: pytest.TempPathFactory) -> veil.dbapi.Connection:
    root = tmp_path_factory.mktemp("first-hour")
    load(str(small), f"duckdb:///{root / 's.duckdb'}", str(root / "c"), progress=lambda _: None)
    return veil.connect(root / "c")


def test_schema_discovery(connection: veil.dbapi.Connection) -> None:
    assert connection.execute("SHOW TABLES").fetchall() == [("people",), ("pets",)]
    described = connection.execute("DESCRIBE people").fetchall()
    assert [(row[0], row[1]) for row in described] == [("id", "BIGINT"), ("name", "VARCHAR")]
    found = connection.execute(
        "SELECT table_name, column_name FROM information_schema.columns ORDER BY 1, 2"
    ).fetchall()
    assert found == [("people", "id"), ("people", "name"), ("pets", "owner"), ("pets", "pet")]


def test_errors_speak_of_the_users_sql(connection: veil.dbapi.Connection) -> None:
    with pytest.raises(QuerySyntaxError) as syntax:
        connection.execute("SELECT id * FROM people")
    assert "operator * is missing an operand" in str(syntax.value)
    assert "class" not in str(syntax.value) and "MUL" not in str(syntax.value)
    with pytest.raises(QueryError) as unknown:
        connection.execute("SELECT * FROM peeple")
    message = str(unknown.value)
    assert "peeple" in message and "DESCRIBE" not in message and "LINE" not in message


def test_pep_249_globals_and_exception_kinds(connection: veil.dbapi.Connection) -> None:
    assert (veil.apilevel, veil.paramstyle, veil.threadsafety) == ("2.0", "qmark", 1)
    assert issubclass(veil.ProgrammingError, veil.DatabaseError)
    assert issubclass(veil.DatabaseError, veil.Error)
    with pytest.raises(veil.ProgrammingError):
        connection.execute("SELECT nope FROM people")
    with pytest.raises(veil.NotSupportedError):
        connection.execute("CREATE VIEW v AS SELECT 1")


def test_command_line_version_stdin_params_and_tables(
    connection: veil.dbapi.Connection,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"veil {veil.__version__}"
    client = str(connection.session.client.path)
    monkeypatch.setattr(sys, "stdin", _Stdin("SELECT name FROM people WHERE id = ?"))
    assert main(["query", client, "-", "--param", "2", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["name", "bob"]
    assert main(["tables", client]) == 0
    listing = capsys.readouterr().out
    assert "people" in listing and "name" in listing and "VARCHAR" in listing


class _Stdin:
    def __init__(self, text: str):
        self.text = text

    def read(self) -> str:
        return self.text


def test_help_starts_without_the_heavy_libraries() -> None:
    code = (
        "import sys, veil.cli; veil.cli.build_parser(); "
        "print(sorted(m for m in ('pyarrow', 'duckdb', 'sqlglot', 'numpy') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_session_errors_do_not_leak_internals(tmp_path: Path) -> None:
    with pytest.raises(ClientDirectoryError):
        Session(tmp_path / "absent")


def test_shell_runs_statements_and_commands(connection: veil.dbapi.Connection) -> None:
    import io

    from veil.frontend.shell import shell

    script = (
        "SELECT name\n  FROM people WHERE id = 2;\n\\dt\n\\d pets\nSELECT nope FROM people;\n\\q\n"
    )
    out = io.StringIO()
    code = shell(str(connection.session.client.path), io.StringIO(script), out)
    text = out.getvalue()
    assert "bob" in text and "people" in text and "owner" in text
    assert "error:" in text and "nope" in text
    assert code == 1  # a statement failed (scripts see it in the exit code)


def test_load_progress_meter_shows_totals_rate_and_eta() -> None:
    import io

    from veil.load.progress import Reporter

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    meter = Reporter(print, bars=True, out=screen).meter("lineitem: encrypting", 200)
    meter.advance(100)
    meter.advance(100)
    meter.close()
    last = screen.getvalue().rstrip("\n").split("\r")[-1]
    assert "200 / 200 rows" in last and "100%" in last and "rows/s" in last and "ETA" in last
    quiet = Reporter(print, bars=True, out=io.StringIO()).meter("x", 10)  # not a terminal
    quiet.advance(10)
    quiet.close()


def test_demo_says_where_its_files_are_and_what_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from veil_dev.demo import _next_steps

    (tmp_path / "server.duckdb").write_bytes(b"x" * 1000)
    _next_steps(tmp_path, tmp_path / "client")
    said = capsys.readouterr().err
    assert str(tmp_path) in said and "MB" in said
    assert f"query {tmp_path / 'client'}" in said and f"rm -r {tmp_path}" in said


def test_column_names_with_spaces_capitals_and_keywords(tmp_path: Path) -> None:
    import duckdb

    source = tmp_path / "People.csv"
    source.write_text("Order ID,customer name,select,Total\n1,ann,x,10\n2,bob,y,3\n3,cy,x,5\n")
    workload = [
        'SELECT "customer name", sum("Total") FROM people WHERE "Order ID" > 1 '
        'AND "select" = \'x\' GROUP BY "customer name"'
    ]
    load(str(source), f"duckdb:///{tmp_path / 's.duckdb'}", str(tmp_path / "c"), workload, print)
    plain = duckdb.connect()
    plain.execute(f"CREATE TABLE people AS SELECT * FROM read_csv_auto('{source}')")
    queries = [
        "SELECT * FROM people ORDER BY 1",
        'SELECT "customer name", sum("Total") AS t FROM people WHERE "Order ID" > 1 '
        'AND "select" = \'x\' GROUP BY "customer name" ORDER BY 1',
        'SELECT "ORDER ID" AS o, total FROM People WHERE "select" <> \'y\' ORDER BY o',
    ]
    with veil.connect(tmp_path / "c") as con:
        for sql in queries:
            cursor = con.execute(sql)
            expected = plain.execute(sql)
            assert cursor.fetchall() == expected.fetchall(), sql
            assert [d[0] for d in cursor.description] == [d[0] for d in expected.description]
        con.execute('INSERT INTO people ("Order ID", "customer name", "select", total) '
                    "VALUES (4, 'dee', 'x', 7)")  # fmt: skip
        con.execute('UPDATE people SET "Total" = 8 WHERE "Order ID" = 4')
        assert con.execute('SELECT "Total" FROM people WHERE "Order ID" = 4').fetchall() == [(8,)]


def test_a_load_that_failed_half_way_is_retried_as_given(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veil.backends.duckdb import DuckDBBackend

    real = DuckDBBackend.bulk_load
    calls = {"n": 0}

    def flaky(self, table, data, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 4:  # the second table's main table: the first is complete
            raise OSError("disk full")
        return real(self, table, data, **kwargs)

    monkeypatch.setattr(DuckDBBackend, "bulk_load", flaky)
    server, client = f"duckdb:///{tmp_path / 's.duckdb'}", str(tmp_path / "c")
    with pytest.raises(OSError, match="disk full"):
        load(str(small), server, client, progress=lambda _: None)
    monkeypatch.setattr(DuckDBBackend, "bulk_load", real)
    load(str(small), server, client, progress=lambda _: None)  # the same command again
    with veil.connect(client) as con:
        assert con.execute("SELECT count(*) FROM people").fetchall() == [(3,)]
        assert con.execute("SELECT count(*) FROM pets").fetchall() == [(2,)]


def test_an_unknown_table_is_told_in_terms_of_the_users_tables(
    connection: veil.dbapi.Connection,
) -> None:
    with pytest.raises(QueryError) as near:
        connection.execute("SELECT * FROM peple")
    assert "did you mean people" in str(near.value)
    with pytest.raises(QueryError) as far:
        connection.execute("SELECT * FROM tables")  # close only to a DuckDB internal table
    message = str(far.value)
    assert "information_schema" not in message and "people, pets" in message
