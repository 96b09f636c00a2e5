"""Onion layers the load leaves unbuilt (JOIN-ADJ, OPE, SEARCH): their first peel builds them.

A cold load stores NULL in those columns (``veil.session.onions.defer_layers``);
the first query that needs one builds it from the column's DET onion, on
every row, rows written since the load too, under the same lock as any peel.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.session.test_onion_safety import ROWS, source  # noqa: F401 (a fixture)
from tests.session.test_onions import _assert_forms
from veil.design.model import BLOCKS, DET, JOIN, OPE, RND, SEARCH
from veil.load.loader import load
from veil.session.onions import reconcile, unbuilt
from veil.session.session import Session
from veil.sql.remote import LAYER_COLUMN, LAYER_PEELED, layer_states_statement


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def loaded(request: pytest.FixtureRequest, source: Path, tmp_path: Path) -> Path:  # noqa: F811
    """A cold onion load of ``source``'s items and groups: its client directory."""
    url = request.getfixturevalue(f"{request.param}_url")
    load(str(source), url, str(tmp_path / "client"), progress=lambda _: None)
    return tmp_path / "client"


@contextmanager
def _session(client: Path) -> Iterator[Session]:
    session = Session(str(client))
    try:
        yield session
    finally:
        session.close()


def _amounts() -> list[int | None]:
    return [(i * 37) % 1000 for i in range(ROWS)]


def test_a_cold_load_builds_no_join_or_order_layer(loaded: Path) -> None:
    with _session(loaded) as session:
        table = session.design.table("items")
        for column in ("id", "grp", "amount"):
            for scheme in (JOIN, OPE):
                enc = table.onion_of(column, scheme)
                assert enc is not None and enc.outer is not None and unbuilt(enc)
            det = table.onion_of(column, DET)
            assert det is not None and not unbuilt(det)  # how the column is fetched
        _assert_forms(session)  # unbuilt layers hold NULL on the server


def test_the_first_peel_builds_the_layer_for_rows_written_since_the_load(loaded: Path) -> None:
    amounts = _amounts()
    with _session(loaded) as session:
        session.run(
            "INSERT INTO items VALUES (5000, 3, 7, 'a'), (5001, 4, NULL, 'b'), (5002, 5, 999, 'c')"
        )
        session.run("UPDATE items SET amount = 1 WHERE id = 2")
        amounts[2] = 1
        expected = sum(a is not None and a < 100 for a in amounts) + 1
        found = session.run("SELECT count(*) FROM items WHERE amount < 100").table
        assert found.column(0)[0].as_py() == expected
        enc = session.design.table("items").onion_of("amount", OPE)
        assert enc is not None and enc.outer is None and not unbuilt(enc)
        top = session.run("SELECT id, amount FROM items ORDER BY amount DESC, id LIMIT 2")
        rows = [(i, a) for i, a in enumerate(amounts) if a is not None] + [(5000, 7), (5002, 999)]
        best = sorted(rows, key=lambda r: (-r[1], r[0]))[:2]
        assert top.table.to_pylist() == [{"id": i, "amount": a} for i, a in best]
        _assert_forms(session)  # every row's OPE ciphertext is the peeled layer's


def test_a_join_builds_and_rekeys_both_sides(loaded: Path) -> None:
    with _session(loaded) as session:
        sql = (
            "SELECT g.label, count(*) AS n FROM items i JOIN groups g ON i.grp = g.gid "
            "GROUP BY g.label ORDER BY g.label"
        )
        rows = session.run(sql).table.to_pylist()
        assert rows == [
            {"label": f"group {g}", "n": sum(1 for i in range(ROWS) if i % 7 == g)}
            for g in range(7)
        ]
        for table, column in (("items", "grp"), ("groups", "gid")):
            enc = session.design.table(table).onion_of(column, JOIN)
            assert enc is not None and enc.outer is None and not unbuilt(enc)
        # groups (fewer rows) was built under items' key at once, not built then re-keyed
        moved = [e for e in session.client.peel_log() if str(e["layer"]).startswith("JOIN with")]
        assert [(e["table"], e["column"]) for e in moved] == [("groups", "gid")]
        assert reconcile(session) == []  # the layers table names the key the design does


def test_a_layer_is_built_from_a_peeled_det_onion(loaded: Path) -> None:
    amounts = _amounts()
    with _session(loaded) as session:
        found = session.run("SELECT count(*) FROM items WHERE amount = 37").table
        assert found.column(0)[0].as_py() == amounts.count(37)
        det = session.design.table("items").onion_of("amount", DET)
        assert det is not None and det.outer is None  # DET peeled first
        found = session.run("SELECT min(amount), max(amount) FROM items WHERE amount > 500")
        values = [a for a in amounts if a is not None and a > 500]
        assert found.table.to_pylist() == [{"min(amount)": min(values), "max(amount)": max(values)}]
        _assert_forms(session)


def test_a_search_onion_is_built_by_the_first_like_it_can_prefilter(loaded: Path) -> None:
    names = [f"name {i % 50}" for i in range(ROWS)]
    with _session(loaded) as session:
        enc = session.design.table("items").onion_of("name", SEARCH)
        assert enc is not None and unbuilt(enc) and enc.outer is None
        assert session.design.table("items").find("name", SEARCH) is None  # NULL: never read
        stored = session.backend.execute(
            f'SELECT count("{enc.name}") FROM "{session.design.table("items").server_name}"'
        )
        assert stored.column(0)[0].as_py() == 0
        session.run("INSERT INTO items VALUES (5000, 3, 7, 'name 4 new')")
        names.append("name 4 new")
        sql = "SELECT count(*) FROM items WHERE name LIKE '% 4 %' OR name LIKE '%name 4'"
        found = session.run(sql).table.column(0)[0].as_py()
        assert found == sum(n.endswith("name 4") or " 4 " in n for n in names)
        built = session.design.table("items").onion_of("name", SEARCH)
        assert built is not None and not unbuilt(built)
        assert session.design.table("items").find("name", SEARCH) is not None
        stored = session.backend.execute(
            f'SELECT count("{built.name}") FROM "{session.design.table("items").server_name}"'
        )
        assert stored.column(0)[0].as_py() == ROWS + 1  # every row's words, the new one too
        found = session.run("SELECT count(*) FROM items WHERE name LIKE '%name 7'").table
        assert found.column(0)[0].as_py() == names.count("name 7")


def test_a_built_search_onion_missing_from_the_design_is_repaired(loaded: Path) -> None:
    """A client killed after the build's commit, before the design's save."""
    with _session(loaded) as session:
        before = session.design.to_json()
        session.run("SELECT count(*) FROM items WHERE name LIKE '%name 7'")
        table = session.design.table("items")
        states = session.backend.execute(layer_states_statement(table).sql()).to_pylist()
        enc = table.onion_of("name", SEARCH)
        assert enc is not None
        assert {r[LAYER_COLUMN]: r[LAYER_PEELED] for r in states}[enc.name] is True  # built
        session.client.design_path.write_text(before)  # the design as before the build
    with _session(loaded) as session:
        enc = session.design.table("items").onion_of("name", SEARCH)
        assert enc is not None and not unbuilt(enc)  # reconciled on reading the design
        assert reconcile(session) == []
        found = session.run("SELECT count(*) FROM items WHERE name LIKE '%name 7'").table
        assert found.column(0)[0].as_py() == ROWS // 50


def test_a_text_column_is_fetched_from_blocks_until_its_det_onion_is_built(loaded: Path) -> None:
    names = [f"name {i % 50}" for i in range(ROWS)]
    with _session(loaded) as session:
        table = session.design.table("items")
        det = table.onion_of("name", DET)
        assert det is not None and det.outer is not None and unbuilt(det)
        assert table.fetchable("name").scheme == BLOCKS  # the DET onion holds NULL
        session.run("INSERT INTO items VALUES (5000, 3, 7, 'name 7')")
        session.run("UPDATE items SET name = 'name 9' WHERE id = 4")  # blocks of fresh ids
        names[4] = "name 9"
        names.append("name 7")
        _assert_forms(session)
        found = session.run("SELECT count(*) FROM items WHERE name = 'name 7'").table
        assert found.column(0)[0].as_py() == names.count("name 7")
        det = session.design.table("items").onion_of("name", DET)
        assert det is not None and det.outer is None and not unbuilt(det)
        grouped = session.run("SELECT name, count(*) AS n FROM items GROUP BY name ORDER BY name")
        assert grouped.table.to_pylist() == [
            {"name": n, "n": names.count(n)} for n in sorted(set(names))
        ]
        rows = session.run("SELECT id, name FROM items WHERE id IN (3, 5000) ORDER BY id")
        assert rows.table.to_pylist() == [
            {"id": 3, "name": "name 3"},
            {"id": 5000, "name": "name 7"},
        ]
        _assert_forms(session)


@pytest.mark.parametrize(
    "backend", ["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_narrow_number_is_fetched_as_rnd_in_its_types_bits(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    """A DATE or INTEGER column: an RND copy of 32 bits, not a wrapped DET of 64, where the
    server bit-packs integers (DuckDB); PostgreSQL stores 8 bytes either way: no copy."""
    packs = backend == "duckdb"
    folder = tmp_path / "source"
    folder.mkdir()
    days = [datetime.date(1995, 1, 1) + datetime.timedelta(days=i % 40) for i in range(ROWS)]
    counts = pa.array([i % 9 for i in range(ROWS)], pa.int32())
    pq.write_table(pa.table({"day": days, "n": counts}), folder / "events.parquet")
    url = request.getfixturevalue(f"{backend}_url")
    load(str(folder), url, str(tmp_path / "c"), progress=lambda _: None)
    with _session(tmp_path / "c") as session:
        table = session.design.table("events")
        for column in ("day", "n"):
            fetched = table.fetchable(column)
            det = table.onion_of(column, DET)
            assert det is not None and unbuilt(det) == packs
            if packs:
                assert fetched.scheme == RND and fetched.params.get("bits") == 32
            else:
                assert fetched is det and not table.encryptions_of(column, RND)
        sql = "SELECT n, count(*) AS k FROM events WHERE day = DATE '1995-01-03' GROUP BY n ORDER BY n"
        found = session.run(sql).table.to_pylist()
        expected: dict[int, int] = {}
        for i in range(ROWS):
            if i % 40 == 2:
                expected[i % 9] = expected.get(i % 9, 0) + 1
        assert found == [{"n": n, "k": k} for n, k in sorted(expected.items())]
        for column in ("day", "n"):
            det = session.design.table("events").onion_of(column, DET)
            assert det is not None and det.outer is None and not unbuilt(det)
        later = session.run("SELECT max(day) AS d FROM events WHERE n = 4").table.to_pylist()
        assert later == [{"d": max(d for i, d in enumerate(days) if i % 9 == 4)}]
        _assert_forms(session)


def test_the_layers_one_statement_takes_off_are_logged_as_this_clients(loaded: Path) -> None:
    with _session(loaded) as session:
        sql = "SELECT name, count(*) FROM items WHERE grp = 3 AND amount < 500 GROUP BY name"
        session.run(sql)
        log = session.client.peel_log()
        assert {(e["column"], e["layer"]) for e in log} >= {("grp", DET), ("amount", OPE)}
        assert {e["by"] for e in log} == {"this client"}  # not repaired as an interrupted peel
        assert reconcile(session) == []
