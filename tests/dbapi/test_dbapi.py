"""DB-API 2.0 and the command line.

DuckDB lets one process open a server file once, so the CLI runs in a
subprocess and the cursor tests share the suite's session.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import veil
from veil.dbapi import Connection
from veil.session.session import Session


class _Out:
    def __init__(self, done: subprocess.CompletedProcess[str]):
        self.out, self.err, self.code = done.stdout, done.stderr, done.returncode


def main(argv: list[str]) -> _Out:
    command = [sys.executable, "-m", "veil.cli", *argv]
    return _Out(subprocess.run(command, capture_output=True, text=True, check=False))


def test_connect(tpch_dir: Path, tmp_path: Path) -> None:
    from veil.load.loader import load

    load(
        str(tpch_dir / "region.parquet"),
        f"duckdb:///{tmp_path}/s.duckdb",
        str(tmp_path / "c"),
        progress=print,
    )
    with veil.connect(tmp_path / "c") as con:
        assert con.execute("SELECT COUNT(*) FROM region").fetchall() == [(5,)]


def test_two_connections_to_one_embedded_server(
    veil_env: dict[str, object], session: Session
) -> None:
    with (
        veil.connect(str(veil_env["client"])) as first,
        veil.connect(str(veil_env["client"])) as second,
    ):
        assert first.execute("SELECT COUNT(*) FROM region").fetchall() == [(5,)]
        assert second.execute("SELECT COUNT(*) FROM nation").fetchall() == [(25,)]
    assert (
        session.run("SELECT COUNT(*) FROM region").rowcount == 1
    )  # the suite's session still works


def test_dbapi_cursor(session: Session) -> None:
    assert veil.dbapi.paramstyle == "qmark"
    with Connection(session) as con:
        cur = con.cursor()
        cur.execute("SELECT n_nationkey, n_name FROM nation WHERE n_regionkey = ? ORDER BY 1", [1])
        assert [d[0] for d in cur.description] == ["n_nationkey", "n_name"]
        first = cur.fetchone()
        assert first == (1, "ARGENTINA")
        assert len(cur.fetchmany(2)) == 2
        assert len(cur.fetchall()) == 2
        assert cur.fetchone() is None
        table = cur.execute("SELECT COUNT(*) AS n FROM region").fetch_arrow_table()
        assert isinstance(table, pa.Table) and table.to_pylist() == [{"n": 5}]
        con._session = None  # the suite's session stays open for other tests


def test_cli(tpch_dir: Path, tmp_path: Path) -> None:
    client, url = str(tmp_path / "c"), f"duckdb:///{tmp_path}/s.duckdb"
    loaded = main(
        [
            "load",
            "--source",
            str(tpch_dir / "nation.parquet"),
            "--server",
            url,
            "--client-dir",
            client,
        ]
    )
    assert loaded.code == 0, loaded.err
    assert "nation" in loaded.err and "25 rows" in loaded.out
    as_json = main(["query", client, "SELECT n_name FROM nation ORDER BY 1", "--format", "json"])
    assert json.loads(as_json.out)[0] == {"n_name": "ALGERIA"}
    assert "(1 row)" in main(["query", client, "SELECT COUNT(*) AS n FROM nation"]).out
    assert main(
        ["query", client, "SELECT COUNT(*) AS n FROM nation", "--format", "csv"]
    ).out.splitlines() == ["n", "25"]
    explained = main(["explain", client, "SELECT n_name FROM nation WHERE n_regionkey = 1"]).out
    assert "RemoteSQL 1" in explained and "local plan" in explained and "reveals" in explained
    failed = main(["query", client, "SELEC 1"])
    assert failed.code == 2 and "syntax error" in failed.err
