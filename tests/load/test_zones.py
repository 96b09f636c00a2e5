"""Zones: each range-filtered column's span per block of rows as loaded, and the share of
the blocks a range filter reads (the cost model's, for a server that skips blocks by min/max)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlglot import exp

import veil.load.zones as zones
from veil.design.model import OPE
from veil.load.loader import load
from veil.session.session import Session

ROWS = 2_000
ZONE = 100
WORKLOAD = [
    "SELECT count(*) FROM events WHERE day BETWEEN 100 AND 199",
    "SELECT count(*) FROM events WHERE seen BETWEEN 100 AND 199",
    "SELECT count(*) FROM events WHERE noise BETWEEN 100 AND 199",
]


@pytest.fixture
def client(tmp_path: Path, duckdb_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(zones, "ZONE_ROWS", ZONE)
    source = tmp_path / "source"
    source.mkdir()
    days = list(range(ROWS))
    pq.write_table(
        pa.table(
            {
                "day": days,
                "seen": [d + d % 7 for d in days],  # a few days after: as narrow per block
                "noise": [(d * 7919) % ROWS for d in days],  # all over every block
            }
        ),
        source / "events.parquet",
    )
    load(str(source), duckdb_url, str(tmp_path / "client"), WORKLOAD, lambda _: None)
    return tmp_path / "client"


def test_the_load_records_each_blocks_span_as_quantile_ranks(client: Path) -> None:
    session = Session(str(client))
    try:
        table = session.design.tables["events"]
        for column in ("day", "seen", "noise"):
            enc = table.find(column, OPE)
            assert enc is not None
            spans = enc.params["zones"]
            assert enc.params["zone_rows"] == ZONE
            assert len(spans) == ROWS // ZONE
            assert all(0.0 <= low <= high <= 1.0 for low, high in spans)
    finally:
        session.close()


@pytest.mark.parametrize(("column", "most"), [("day", 0.15), ("seen", 0.2), ("noise", 1.0)])
def test_a_range_reads_the_blocks_its_column_spans(client: Path, column: str, most: float) -> None:
    session = Session(str(client))
    try:
        sql = f"SELECT count(*) FROM events WHERE {column} BETWEEN 100 AND 199"
        plan = session.plan(exp.maybe_parse(sql, dialect="duckdb"))
        (scan,) = plan.scans
        assert scan.zone_share is not None
        assert scan.zone_share <= most
        if column == "noise":
            assert scan.zone_share == 1.0
        assert session.run(sql).table.column(0).to_pylist() == [100]
    finally:
        session.close()
