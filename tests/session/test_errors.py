"""Bad input gets a clear error, before anything reaches the server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from veil.backends import ServerUnavailableError
from veil.crypto.keys import write_key_file
from veil.errors import KeyFileError, WrongKeyError
from veil.session.session import Session
from veil.sql.errors import (
    ClientDirectoryError,
    QueryError,
    QuerySyntaxError,
    UnsupportedStatementError,
)


def test_syntax_error_has_position(session: Session) -> None:
    with pytest.raises(QuerySyntaxError, match="line 1, column") as info:
        session.run("SELECT n_name FROM nation WHERE")
    assert info.value.line == 1


def test_unknown_table(session: Session, server_log: list[object]) -> None:
    with pytest.raises(QueryError, match="no_such_table"):
        session.run("SELECT * FROM no_such_table")
    assert server_log == []


def test_unknown_column(session: Session, server_log: list[object]) -> None:
    with pytest.raises(QueryError, match="n_nme"):
        session.run("SELECT n_nme FROM nation")
    assert server_log == []


def test_type_mismatch(session: Session) -> None:
    with pytest.raises(QueryError):
        session.run("SELECT n_name + 1 FROM nation")


def test_wrong_parameter_count(session: Session) -> None:
    with pytest.raises(QueryError, match="parameter"):
        session.run("SELECT * FROM nation WHERE n_nationkey = ?", [])


def test_ddl_is_refused(session: Session) -> None:
    with pytest.raises(UnsupportedStatementError):
        session.run("CREATE TABLE x (a INTEGER)")


def test_missing_client_dir(tmp_path: Path) -> None:
    with pytest.raises(ClientDirectoryError, match="does not exist"):
        Session(tmp_path / "nope")


def test_wrong_key(veil_env: dict[str, object], tmp_path: Path) -> None:
    copy = tmp_path / "client"
    shutil.copytree(Path(str(veil_env["client"])), copy)
    (copy / "key.json").unlink()
    write_key_file(copy / "key.json")
    with pytest.raises(WrongKeyError, match="not the key"):
        Session(copy)


def test_missing_key(veil_env: dict[str, object], tmp_path: Path) -> None:
    copy = tmp_path / "client"
    shutil.copytree(Path(str(veil_env["client"])), copy)
    (copy / "key.json").unlink()
    with pytest.raises(KeyFileError):
        Session(copy)


def test_server_down(veil_env: dict[str, object], tmp_path: Path) -> None:
    copy = tmp_path / "client"
    shutil.copytree(Path(str(veil_env["client"])), copy)
    (copy / "server.json").write_text(
        json.dumps({"url": "duckdb:////nonexistent/dir/server.duckdb"})
    )
    with pytest.raises(ServerUnavailableError):
        Session(copy)


def test_postgres_server_down(veil_env: dict[str, object], tmp_path: Path) -> None:
    copy = tmp_path / "client"
    shutil.copytree(Path(str(veil_env["client"])), copy)
    (copy / "server.json").write_text(json.dumps({"url": "postgresql://veil@127.0.0.1:1/nowhere"}))
    with pytest.raises(ServerUnavailableError):
        Session(copy)
