"""A first load: a CSV's types are inferred over the whole file, and a load that fails
leaves no half-made client directory behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from veil.dbapi import connect
from veil.errors import VeilError
from veil.load.loader import load


def test_a_csv_column_that_changes_kind_late_loads_as_text(tmp_path: Path) -> None:
    source = tmp_path / "codes.csv"
    rows = [f"{i},{i}" for i in range(30_000)] + ["30000,A-17"]  # past DuckDB's sample
    source.write_text("id,code\n" + "\n".join(rows) + "\n")
    load(str(source), f"duckdb:///{tmp_path / 's.duckdb'}", str(tmp_path / "c"),
         progress=lambda _: None)  # fmt: skip
    with connect(str(tmp_path / "c")) as con:
        assert con.execute("SELECT code FROM codes WHERE id = 30000").fetchall() == [("A-17",)]
        assert con.execute("SELECT typeof(code) FROM codes LIMIT 1").fetchone() == ("VARCHAR",)


@pytest.mark.parametrize("existed", [False, True])
def test_a_failed_first_load_leaves_no_client_directory(tmp_path: Path, existed: bool) -> None:
    source = tmp_path / "people.csv"
    source.write_text("id,name\n1,a\n")
    client = tmp_path / "c"
    if existed:
        client.mkdir()
    with pytest.raises(VeilError, match="sums"):
        load(str(source), f"duckdb:///{tmp_path / 's.duckdb'}", str(client), sums="bogus",
             progress=lambda _: None)  # fmt: skip
    assert client.exists() == existed and not (existed and any(client.iterdir()))
    load(str(source), f"duckdb:///{tmp_path / 's.duckdb'}", str(client), progress=lambda _: None)
    with connect(str(client)) as con:
        assert con.execute("SELECT name FROM people").fetchall() == [("a",)]
