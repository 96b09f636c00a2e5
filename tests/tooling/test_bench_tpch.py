"""``veil bench tpch`` end to end at SF 0.01 on DuckDB, and its per-query time limit."""

from __future__ import annotations

import json
import time
from pathlib import Path

import duckdb
import pytest

from veil.backends.base import quote
from veil.cli import main
from veil.design.model import PhysicalDesign
from veil_dev.bench.limits import QueryTimeout, deadline
from veil_dev.bench.tpch_servers import design_of, plain_index_sql, veil_index_sql

pytestmark = pytest.mark.unit


def test_bench_tpch_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = ["bench", "tpch", "--sf", "0.01", "--backend", "duckdb", "--runs", "1"]
    argv += ["--queries", "1,6,17", "--work-dir", str(tmp_path / "work")]
    argv += ["--json", str(out / "r.json"), "--png", str(out / "r.png")]
    assert main(argv) == 0
    document = json.loads((out / "r.json").read_text())
    assert [q["query"] for q in document["queries"]] == [1, 6, 17]
    for query in document["queries"]:
        assert query["status"] == "ok" and query["correct"] is True
        assert query["veil_seconds"] > 0 and query["plain_seconds"] > 0
        assert query["veil_link_seconds"] >= query["server_seconds"]
    assert document["summary"]["correct"] == 3
    space = document["space"]
    assert space["veil_bytes"] > 0 and space["plain_bytes"] > 0
    # Every server table is counted: the row-id counters too (a one-row DuckDB table
    # keeps its values as constant segments in the metadata: no data block of its own).
    assert "lineitem (row-id counter)" in space["veil_tables"]
    assert space["veil_tables"]["lineitem (blocks)"] > 0  # sealed blocks stored apart
    assert space["veil_bytes"] == sum(space["veil_tables"].values())
    assert space["veil_bytes"] > space["veil_tables"]["lineitem"]
    assert (out / "r.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert "Q17" in printed and "3/3 correct" in printed
    # A second run reuses the cached databases instead of loading again.
    assert (
        main(
            [
                *argv[:-4],
                "--queries",
                "6",
                "--json",
                str(out / "s.json"),
                "--png",
                str(out / "s.png"),
            ]
        )
        == 0
    )
    assert "reusing" in capsys.readouterr().err
    _veil_indexes_cover_det_columns(tmp_path / "work" / "duckdb_sf0.01" / "client")


def test_deadline_interrupts_a_long_query() -> None:
    con = duckdb.connect()
    slow = "SELECT count(*) FROM range(10000000000) a WHERE a.range % 7 = 3"
    started = time.perf_counter()
    with pytest.raises(QueryTimeout), deadline(0.3, [con.interrupt]):
        con.execute(slow).fetchall()
    assert time.perf_counter() - started < 30  # interrupted, not run to the end


def test_both_sides_get_the_lineitem_indexes() -> None:
    plain = plain_index_sql()
    assert any("lineitem (l_partkey, l_suppkey)" in s for s in plain)
    assert any("lineitem (l_suppkey)" in s for s in plain)
    assert veil_index_sql(PhysicalDesign("fingerprint")) == []


def _veil_indexes_cover_det_columns(client_dir: Path) -> None:
    design = design_of(client_dir)
    lineitem = design.table("lineitem")
    statements = veil_index_sql(design)
    for source in ("l_orderkey", "l_partkey", "l_suppkey"):
        det = lineitem.find(source, "DET")
        assert det is not None and any(det.name in s for s in statements)
    assert all("lineitem" not in s and "l_" not in s for s in statements)  # opaque names only
    # one per row id, but for DuckDB, whose planner never uses them
    rid = f"({quote(lineitem.row_id)})"
    assert any(s.endswith(rid) for s in statements)
    assert not any(s.endswith(rid) for s in veil_index_sql(design, row_ids=False))
