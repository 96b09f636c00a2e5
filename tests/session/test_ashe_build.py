"""An onion load's ASHE words: NULL until the first SUM/AVG that needs them builds them.

The planner sees unbuilt sums as absent (the sum runs on the client, inside a
transaction too); the first statement summing one of the table's columns builds
every word of every row, rows written since the load too, under the layers lock.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute

from tests.concurrency.conftest import race, rows
from tests.session import test_onion_build
from tests.session.test_onion_safety import ROWS, source  # noqa: F401 (a fixture)
from veil.design.model import TableDesign
from veil.session import onions
from veil.session.ashe_build import ashe_layer, ashe_words, unbuilt_sums
from veil.session.session import Session
from veil.sql.remote import LAYER_COLUMN, LAYER_PEELED, layer_states_statement

loaded = test_onion_build.loaded  # a cold onion load of ``source``: its client directory
_session = test_onion_build._session


def _words(session: Session, table: TableDesign) -> pa.Table:
    assert table.sums is not None
    names = table.sums.summed_columns(list(range(len(table.sums.sources))))
    columns = ", ".join(f'"{n}"' for n in [table.row_id, *names])
    return session.backend.execute(f'SELECT {columns} FROM "{table.server_name}" ORDER BY 1')


def _layer_built(session: Session, table: TableDesign) -> bool:
    assert table.sums is not None
    states = session.backend.execute(layer_states_statement(table).sql(dialect="duckdb"))
    names, peeled = (states.column(c).to_pylist() for c in (LAYER_COLUMN, LAYER_PEELED))
    found = dict(zip(names, peeled, strict=True))
    return bool(found[ashe_layer(table.sums).name])


def _assert_words_built(session: Session, table: TableDesign) -> None:
    """Every row's words are the ASHE encryption of its plaintext under its id."""
    assert table.sums is not None
    stored = _words(session, table)
    ids = stored.column(0).combine_chunks()
    forms = {s: table.fetchable(s) for s in table.sums.sources}
    fetched_ids, values = onions._fetched_values(session, table, list(forms.values()))
    order = pa.compute.sort_indices(fetched_ids)
    assert fetched_ids.take(order).equals(ids.cast(fetched_ids.type))
    plain = {s: (values[f.name].take(order), f.sql_type) for s, f in forms.items()}
    expected = ashe_words(session.master, table.sums, plain, ids)
    for name, column in expected.items():
        assert stored.column(name).combine_chunks().equals(column), name


def test_a_cold_load_stores_no_ashe_word(loaded: Path) -> None:
    with _session(loaded) as session:
        table = session.design.table("items")
        assert unbuilt_sums(table) is not None
        stored = _words(session, table)
        assert all(stored.column(i).null_count == ROWS for i in range(1, stored.num_columns))
        assert not _layer_built(session, table)


def test_a_sum_in_a_transaction_runs_on_the_client_and_builds_nothing(loaded: Path) -> None:
    with _session(loaded) as session:
        session.begin()
        found = session.run("SELECT sum(amount), avg(amount) FROM items").table
        session.commit()
        amounts = [(i * 37) % 1000 for i in range(ROWS)]
        assert found.column(0)[0].as_py() == sum(amounts)
        assert unbuilt_sums(session.design.table("items")) is not None


def test_the_first_sum_builds_every_rows_words(loaded: Path) -> None:
    amounts: list[int | None] = [(i * 37) % 1000 for i in range(ROWS)]
    groups = [i % 7 for i in range(ROWS)]
    with _session(loaded) as session:
        session.run("INSERT INTO items VALUES (5000, 3, 7, 'a'), (5001, 4, NULL, 'b')")
        session.run("UPDATE items SET amount = 1 WHERE id = 2")
        amounts[2] = 1
        amounts += [7, None]
        groups += [3, 4]
        found = session.run(
            "SELECT grp, sum(amount) AS s, count(amount) AS n FROM items GROUP BY grp ORDER BY grp"
        ).table.to_pylist()
        expected = [
            {
                "grp": g,
                "s": sum(a for a, h in zip(amounts, groups, strict=True) if h == g and a),
                "n": sum(
                    1 for a, h in zip(amounts, groups, strict=True) if h == g and a is not None
                ),
            }
            for g in range(7)
        ]
        assert found == expected
        table = session.design.table("items")
        assert unbuilt_sums(table) is None and _layer_built(session, table)
        _assert_words_built(session, table)
        events = [e for e in session.client.peel_log() if e.get("layer") == "ASHE"]
        assert len(events) == 1 and events[0]["table"] == "items"
        session.run("INSERT INTO items VALUES (5002, 5, 999, 'c')")  # words written as usual
        total = session.run("SELECT sum(amount) FROM items").table.column(0)[0].as_py()
        assert total == sum(a for a in amounts if a) + 999
        _assert_words_built(session, session.design.table("items"))


def test_a_build_the_design_missed_is_repaired(loaded: Path) -> None:
    with _session(loaded) as session:
        table = session.design.table("items")
        sums = unbuilt_sums(table)
        assert sums is not None
        assert onions._sums_on_server(session, table, sums)  # the server's commit, no save
        assert unbuilt_sums(session.design.table("items")) is not None
        missed = onions.reconcile(session)
        assert [(m.table, getattr(m, "scheme", None)) for m in missed] == [("items", "ASHE")]
        assert unbuilt_sums(session.design.table("items")) is None
        _assert_words_built(session, session.design.table("items"))


def test_a_build_racing_writers_loses_and_repeats_no_row(loaded: Path) -> None:
    writers = [
        [f"INSERT INTO items VALUES ({10_000 + 100 * k + i}, 1, 2, 'r')" for i in range(8)]
        for k in range(2)
    ]
    summing = ["SELECT sum(amount) FROM items WHERE grp = 1"] * 3
    done = race(loaded, [*writers, summing])
    assert set(done.failures()) <= {"SerializationError"}, done.failures()
    written = len(done.succeeded("INSERT"))
    base = sum((i * 37) % 1000 for i in range(ROWS) if i % 7 == 1)
    assert rows(loaded, "SELECT sum(amount), count(*) FROM items WHERE grp = 1") == [
        (base + 2 * written, ROWS // 7 + (1 if ROWS % 7 > 1 else 0) + written)
    ]
    with _session(loaded) as session:
        table = session.design.table("items")
        assert unbuilt_sums(table) is None
        _assert_words_built(session, table)
