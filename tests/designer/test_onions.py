"""The onion design stores only the layers a column's data can use (issue 40).

A text column of a short fixed vocabulary (flags, modes, codes) gets no
search onion: SWP only pre-filters LIKE, which the client checks again, and
over a few values it keeps most rows while costing the most bytes. A LIKE on
such a column still gives plaintext DuckDB's answer, run on the client.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.support.oracle import check_query
from veil.design.model import DET, SEARCH, Column
from veil.designer.onions import VOCABULARY_MIN_ROWS, onion_design, vocabulary
from veil.load.loader import available_schemes, load
from veil.session.session import Session

ROWS = 2 * VOCABULARY_MIN_ROWS
MODES = ("AIR", "MAIL", "REG AIR", "TRUCK", "SHIP")


def test_vocabulary_needs_few_values_in_many_rows() -> None:
    assert vocabulary(7, 600_000)
    assert not vocabulary(150_000, 150_000)  # a comment or a name
    assert not vocabulary(5, 25)  # a small table: its words cost little


def test_a_vocabulary_column_gets_no_search_onion() -> None:
    schema = {"t": [Column("mode", "VARCHAR"), Column("note", "VARCHAR")]}
    design = onion_design(schema, available_schemes(), "fp", vocabularies={("t", "mode")})
    schemes = {(e.source, e.scheme) for e in design.tables["t"].encryptions}
    assert ("mode", DET) in schemes and ("mode", SEARCH) not in schemes
    assert ("note", SEARCH) in schemes


@pytest.fixture(scope="module")
def loaded(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    root = tmp_path_factory.mktemp("vocabulary")
    plain = duckdb.connect()
    modes = ", ".join(f"'{m}'" for m in MODES)
    plain.execute(
        f"CREATE TABLE ship AS SELECT i AS id, ([{modes}])[i % {len(MODES)} + 1] AS mode, "
        f"'note ' || i || CASE WHEN i % 3 = 0 THEN ' special requests' ELSE '' END AS note "
        f"FROM range({ROWS}) r(i)"
    )
    plain.execute(f"COPY ship TO '{root / 'ship.parquet'}' (FORMAT parquet)")
    load(str(root), f"duckdb:///{root / 'server.duckdb'}", str(root / "c"), progress=lambda _: None)
    session = Session(str(root / "c"))
    yield session, plain
    session.close()
    plain.close()


def test_load_finds_the_vocabulary(loaded: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    held = {(e.source, e.scheme) for e in loaded[0].design.tables["ship"].encryptions}
    assert ("mode", SEARCH) not in held and ("mode", DET) in held
    assert ("note", SEARCH) in held


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM ship WHERE mode LIKE '% AIR'",
        "SELECT mode, count(*) FROM ship WHERE mode LIKE 'REG %' GROUP BY mode",
        "SELECT count(*) FROM ship WHERE mode NOT LIKE '%AI%' AND mode = 'SHIP'",
        "SELECT count(*) FROM ship WHERE note LIKE '% special requests'",
    ],
)
def test_like_on_a_vocabulary_is_right(
    loaded: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    check_query(loaded[0], loaded[1], sql)
