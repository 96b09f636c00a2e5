"""``veil tpcds gen`` and ``veil bench tpcds`` end to end at SF 0.01 on DuckDB, on a query
set of two, and the worker's memory cap.

The queries come from the shared TPC-DS folder beside the repository; the bench runs
the set it is given, so a folder holding two of them makes the load design for those
two only (a few seconds of encryption instead of the 79 queries' minute).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from veil.cli import main
from veil_dev.bench.limits import MemoryCapExceeded
from veil_dev.bench.worker import VeilWorker
from veil_dev.tpcds.queries import DEFAULT_QUERY_DIR

pytestmark = pytest.mark.integration

QUERIES = ("q42", "q52")


@pytest.fixture(scope="module")
def query_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not all((DEFAULT_QUERY_DIR / f"{q}.sql").exists() for q in QUERIES):
        pytest.skip(f"no TPC-DS queries at {DEFAULT_QUERY_DIR} (shared/ beside the clone)")
    folder = tmp_path_factory.mktemp("queries")
    for name in QUERIES:
        shutil.copy(DEFAULT_QUERY_DIR / f"{name}.sql", folder)
    return folder


def test_gen_then_bench(
    tmp_path: Path, query_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    data = work / "data_sf0.01"  # where the bench looks for its data: generated once
    assert main(["tpcds", "gen", "--sf", "0.01", "--out", str(data)]) == 0
    files = {p.stem for p in data.glob("*.parquet")}
    assert len(files) == 24 and "store_sales" in files and "dbgen_version" not in files
    out = tmp_path / "out"
    argv = ["bench", "tpcds", "--sf", "0.01", "--runs", "1", "--queries", str(query_dir)]
    argv += ["--work-dir", str(work), "--json", str(out / "r.json"), "--png", str(out / "r.png")]
    assert main(argv) == 0
    document = json.loads((out / "r.json").read_text())
    assert document["benchmark"] == "tpcds" and document["commit"]
    assert len(document["load_average"]["before"]) == 3
    assert [q["query"] for q in document["queries"]] == list(QUERIES)
    for query in document["queries"]:
        assert query["status"] == "ok" and query["correct"] is True
        assert query["peak_client_bytes"] > 0 and "fallback" in query
    summary = document["summary"]
    assert summary["correct"] == 2 and summary["memory"] == [] and summary["timeouts"] == []
    space = document["space"]
    assert space["veil_bytes"] == sum(space["veil_tables"].values())
    assert "store_sales (row-id counter)" in space["veil_tables"]  # side tables counted
    assert document["load_seconds"]["veil_load"] > 0
    assert (out / "r.png").stat().st_size > 0
    assert "2/2 correct" in capsys.readouterr().out
    _memory_cap_stops_the_client(work / "duckdb_sf0.01" / "client")


def _memory_cap_stops_the_client(client_dir: Path) -> None:
    """A client process past its cap is stopped and the query recorded, not waited for;
    the next query gets a fresh process."""
    worker = VeilWorker(client_dir, timeout=60, memory_cap=32 * 2**20)  # below Python + Veil
    try:
        with pytest.raises(MemoryCapExceeded):
            worker.run("SELECT count(*) FROM store")
        worker.memory_cap = 4 * 2**30
        run = worker.run("SELECT count(*) FROM store")
        assert run.table.num_rows == 1 and run.peak_bytes > 32 * 2**20
    finally:
        worker.close()
