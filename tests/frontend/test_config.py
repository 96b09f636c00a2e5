"""``veil config``: a client directory follows its server to a new place."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from veil.dbapi import connect


@pytest.fixture
def moved(veil_env: dict[str, object], tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the TPC-H client directory, and its server file copied elsewhere."""
    source = Path(str(veil_env["root"]))
    shutil.copytree(source / "client", tmp_path / "client")
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(source / "server.duckdb", tmp_path / "elsewhere" / "copy.duckdb")
    return tmp_path / "client", tmp_path / "elsewhere" / "copy.duckdb"


def _veil(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "veil", *args], capture_output=True, text=True, timeout=120
    )


def test_a_client_directory_follows_its_moved_server(moved: tuple[Path, Path]) -> None:
    client, server = moved
    shown = _veil("config", str(client))
    assert shown.returncode == 0 and "server: duckdb://" in shown.stdout
    done = _veil("config", str(client), "--server", f"duckdb:///{server}")
    assert done.returncode == 0, done.stderr
    assert json.loads((client / "server.json").read_text()) == {"url": f"duckdb://{server}"}
    with connect(str(client)) as con:
        assert con.execute("SELECT count(*) FROM region").fetchone() == (5,)


def test_a_server_without_the_tables_is_refused(moved: tuple[Path, Path], tmp_path: Path) -> None:
    client, _ = moved
    before = (client / "server.json").read_text()
    empty = tmp_path / "empty.duckdb"

    duckdb.connect(str(empty)).close()
    refused = _veil("config", str(client), "--server", f"duckdb:///{empty}")
    assert refused.returncode != 0
    assert "does not hold the tables" in refused.stderr and "--no-check" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert (client / "server.json").read_text() == before  # nothing changed
    missing = _veil("config", str(client), "--server", f"duckdb:///{tmp_path / 'none.duckdb'}")
    assert missing.returncode != 0 and "does not exist" in missing.stderr
    assert (client / "server.json").read_text() == before
