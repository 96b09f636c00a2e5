"""Onion layers the load leaves unbuilt (JOIN-ADJ and OPE): their first peel builds them.

A cold load stores NULL in those columns (``veil.session.onions.defer_layers``);
the first query that needs one builds it from the column's DET onion, on
every row, rows written since the load too, under the same lock as any peel.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.session.test_onion_safety import ROWS, source  # noqa: F401 (a fixture)
from tests.session.test_onions import _assert_forms
from veil.design.model import DET, JOIN, OPE
from veil.load.loader import load
from veil.session.onions import unbuilt
from veil.session.session import Session


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
