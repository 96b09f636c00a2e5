"""Fixtures: TPC-DS at SF 0.1 as Parquet, loaded once through Veil and once in plain DuckDB.

The queries are not Veil's: they are the 79 TPC-DS queries of the shared
benchmark folder beside the repository (``<repo>/../shared/tpcds/queries``, as CI
copies it next to a fresh clone). The data comes from ``tpcgen-cli`` (a dev
dependency). Where either is missing, the tests skip and say which.

SF 0.1 rather than 0.01: four more queries (q10, q31, q58, q83) return rows,
for 30 to 60 s of generation and load on two shared cores (customer_demographics has
1.9 million rows at every scale factor and dominates the load).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.fuzz.schema import plain_connection
from veil.load.loader import load
from veil.session.session import Session

SF = 0.1
QUERY_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "tpcds" / "queries"


def tpcds_queries() -> list[tuple[str, str]]:
    """The shared TPC-DS queries as (name, SQL), by number; none when the folder is absent."""
    return [(path.stem, path.read_text()) for path in sorted(QUERY_DIR.glob("q*.sql"))]


def generator() -> str | None:
    """The ``tpcgen-cli`` executable: on PATH, or beside this Python's interpreter."""
    beside = Path(sys.executable).parent / "tpcgen-cli"
    return shutil.which("tpcgen-cli") or (str(beside) if beside.exists() else None)


@pytest.fixture(scope="session")
def tpcds_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    command = generator()
    if command is None:
        pytest.skip("tpcgen-cli not installed: pip install -e '.[dev]'")
    out = tmp_path_factory.mktemp("tpcds")
    generated = subprocess.run(
        [command, "tpcds", "parquet", "-s", f"{SF:g}", "-o", str(out), "-q"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert generated.returncode == 0, f"tpcgen-cli failed: {generated.stderr[-2000:]}"
    (out / "dbgen_version.parquet").unlink()  # the generator's own metadata: no query reads it
    return out


@pytest.fixture(scope="session")
def tpcds_session(tpcds_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """The data through Veil into an embedded DuckDB server, designed for the 79 queries."""
    root = tmp_path_factory.mktemp("veil-tpcds")
    workload = [sql for _, sql in tpcds_queries()]
    url = f"duckdb:///{root / 'server.duckdb'}"
    load(str(tpcds_dir), url, str(root / "client"), workload=workload, progress=lambda _: None)
    opened = Session(str(root / "client"))
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def tpcds_plain(tpcds_dir: Path) -> duckdb.DuckDBPyConnection:
    return plain_connection(tpcds_dir)
