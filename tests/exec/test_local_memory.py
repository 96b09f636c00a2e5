"""The client's local DuckDB keeps a stated memory limit, and past it fails in the user's terms."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.support.oracle import check_query
from veil.errors import ParameterError
from veil.exec.local_duckdb import (
    DEFAULT_SHARE,
    machine_memory,
    memory_limit_bytes,
    source_duckdb,
    sweep_spills,
)
from veil.session.session import Session
from veil.sql.errors import OutOfMemoryError
from veil.sqlstates import sqlstate

pytestmark = pytest.mark.integration


@pytest.fixture()
def small(veil_env: dict[str, object]) -> Iterator[Session]:
    """A session whose local engine may use 32 MiB."""
    opened = Session(str(veil_env["client"]), memory_limit="32MiB")
    yield opened
    opened.close()


def _limit(session: Session) -> str:
    return str(session.local.sql("SELECT current_setting('memory_limit')").fetchall()[0][0])


@pytest.mark.unit
def test_the_limit_is_stated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VEIL_MEMORY_LIMIT", raising=False)
    assert memory_limit_bytes() == int(machine_memory() * DEFAULT_SHARE)
    monkeypatch.setenv("VEIL_MEMORY_LIMIT", "25%")
    assert memory_limit_bytes() == int(machine_memory() * 0.25)
    assert memory_limit_bytes("4GB") == 4 * 10**9 and memory_limit_bytes("512MiB") == 2**29
    for wrong in ("lots", "4 parsecs", "1MB"):
        with pytest.raises(ParameterError, match="memory limit"):
            memory_limit_bytes(wrong)


def test_a_session_runs_under_its_limit(small: Session, plain: duckdb.DuckDBPyConnection) -> None:
    assert small.memory_limit == 32 * 2**20 and _limit(small) == "32.0 MiB"
    # sorting and grouping every lineitem row: DuckDB spills what does not fit
    check_query(
        small,
        plain,
        "SELECT l_orderkey, l_comment, sum(l_quantity) FROM lineitem "
        "GROUP BY l_orderkey, l_comment ORDER BY l_comment, l_orderkey LIMIT 5",
    )


def test_past_the_limit_is_a_clear_error(small: Session) -> None:
    """What cannot spill (lists being gathered) fails, and the session goes on."""
    with pytest.raises(OutOfMemoryError, match="VEIL_MEMORY_LIMIT") as raised:
        small.run(
            "SELECT max(len(l)) FROM (SELECT list(range(0, 20000 + l_linenumber)) AS l "
            "FROM lineitem GROUP BY l_orderkey % 7)"
        )
    assert "MiB of 32.0 MiB in use" in str(raised.value) and sqlstate(raised.value) == "53200"
    assert small.run("SELECT count(*) FROM nation").table.column(0).to_pylist() == [25]


def test_sessions_of_a_process_share_one_engine(
    veil_env: dict[str, object], small: Session
) -> None:
    """One limit for the process however many sessions it opens (``veil serve``)."""
    other = Session(str(veil_env["client"]), memory_limit="32MiB")
    try:
        small.local.execute("CREATE TABLE engine_probe AS SELECT 1 AS x")  # the engine's
        small.local.execute("CREATE TEMP VIEW mine AS SELECT 1")  # the connection's
        assert other.local.sql("SELECT x FROM engine_probe").fetchall() == [(1,)]
        with pytest.raises(duckdb.CatalogException):  # what a session registers is its own
            other.local.sql("SELECT * FROM mine")
    finally:
        small.local.execute("DROP VIEW mine")
        small.local.execute("DROP TABLE engine_probe")
        other.close()


def test_the_dbapi_takes_a_limit(veil_env: dict[str, object]) -> None:
    import veil

    connection = veil.connect(str(veil_env["client"]), memory_limit="48MiB")
    try:
        assert _limit(connection.session) == "48.0 MiB"
    finally:
        connection.close()


@pytest.mark.unit
def test_a_load_reads_its_source_under_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a load orders (a fact table by its date key) spills past the limit instead of
    taking DuckDB's default 80% of the machine (TPC-H SF 10's lineitem was killed at 18 GB)."""
    monkeypatch.setenv("VEIL_MEMORY_LIMIT", "48MiB")
    source = source_duckdb()
    try:
        limit = source.sql("SELECT current_setting('memory_limit')").fetchall()[0][0]
        assert str(limit).replace(" ", "") in ("48.0MiB", "48MiB")
        ordered = source.sql(
            "SELECT i, hash(i) AS h FROM range(6000000) t(i) ORDER BY h, i"
        ).to_arrow_reader(1_000_000)
        assert sum(batch.num_rows for batch in ordered) == 6_000_000
    finally:
        source.close()


@pytest.mark.unit
def test_a_killed_process_spills_are_swept(tmp_path: Path) -> None:
    """A killed client's spill directory (plaintext sorts, gigabytes) is removed by the next
    process that spills; a live process's, and anything not named as a spill, are left."""
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = tmp_path / f"veil-spill-{int(ended.stdout)}-abc"
    live = tmp_path / f"veil-spill-{os.getpid()}-def"
    other = tmp_path / "veil-spill-unnamed"
    for directory in (dead, live, other):
        directory.mkdir(mode=0o700)
        (directory / "duckdb_temp_storage.tmp").write_bytes(b"x" * 1024)
    assert sweep_spills(tmp_path) == [dead]
    assert not dead.exists() and live.exists() and other.exists()
