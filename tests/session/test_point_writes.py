"""UPDATE and DELETE planned once per statement shape (``veil.session.point_writes``)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.support.oracle import assert_same, server_url
from veil import statements
from veil.load.loader import load
from veil.session import point_writes, set_values
from veil.session.session import Session
from veil.sql.errors import QueryError

pytestmark = pytest.mark.integration

WORKLOAD = [
    "SELECT * FROM orders WHERE o_orderkey = 7",
    "SELECT count(*) FROM orders WHERE o_custkey = 7",
    "UPDATE orders SET o_comment = 'x' WHERE o_orderkey = 7",
]
CHECK = "SELECT * FROM orders ORDER BY o_orderkey"


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def pair(
    request: pytest.FixtureRequest, tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    root = tmp_path_factory.mktemp("point_writes")
    source = root / "src"
    source.mkdir()
    (source / "orders.parquet").symlink_to(tpch_dir / "orders.parquet")
    plain = duckdb.connect()
    plain.execute(f"CREATE TABLE orders AS SELECT * FROM read_parquet('{tpch_dir}/orders.parquet')")
    url = server_url(request, root, "veil_point_writes")
    load(str(source), url, str(root / "client"), WORKLOAD, progress=lambda _: None)
    session = Session(root / "client")
    yield session, plain
    session.close()
    plain.close()


def _both(
    pair: tuple[Session, duckdb.DuckDBPyConnection], sql: str, params: list[object]
) -> tuple[int, bool]:
    """``sql`` on both sides: Veil's row count (checked against plaintext's) and whether
    its plan was a kept one."""
    session, plain = pair
    expected = plain.execute(sql, params).fetchall()[0][0]
    result = session.run(sql, params)
    assert result.rowcount == expected, (sql, params)
    return result.rowcount, bool(result.stats.plan_hit)


def _same_rows(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = pair
    assert_same(session.run(CHECK).table, plain.execute(CHECK).fetchall(), True, CHECK)


def _keys(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> list[int]:
    return [k for (k,) in pair[1].execute("SELECT o_orderkey FROM orders").fetchall()]


def test_an_update_by_key_plans_twice_then_binds(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    """Fresh values each run: the third and later runs bind into the kept match."""
    keys, rng = _keys(pair), random.Random(41)
    sql = "UPDATE orders SET o_totalprice = o_totalprice + ?, o_comment = ? WHERE o_orderkey = ?"
    hits = [_both(pair, sql, [rng.randint(1, 99), f"c {n}", rng.choice(keys)])[1] for n in range(8)]
    assert hits[:2] == [False, False] and all(hits[2:])
    assert _both(pair, sql, [1, "none", -5]) == (0, True)  # no row: nothing written
    _same_rows(pair)


def test_a_delete_by_key_binds_and_deletes_what_it_matched(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    keys, rng = _keys(pair), random.Random(7)
    sql = "DELETE FROM orders WHERE o_orderkey = ?"
    for key in [*rng.sample(keys, 5), keys[0], keys[0]]:  # the repeat deletes nothing
        _both(pair, sql, [key])
    _same_rows(pair)


def test_writes_keep_the_cached_select_plans(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = pair
    keys = _keys(pair)
    select = "SELECT o_comment, o_totalprice FROM orders WHERE o_orderkey = ?"
    update = "UPDATE orders SET o_comment = ? WHERE o_orderkey = ?"
    for n, key in enumerate(keys[10:16]):
        _both(pair, update, [f"new {n}", key])
        result = session.run(select, [key])
        assert_same(result.table, plain.execute(select, [key]).fetchall(), False, select)
        if n >= 2:  # the SELECT's template survived the writes between its runs
            assert result.stats.plan_hit


def test_a_value_its_slot_cannot_hold_runs_the_general_path(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    """A key beyond the column's type matches nothing, as in plaintext, planned as written."""
    keys = _keys(pair)
    sql = "UPDATE orders SET o_shippriority = o_shippriority + 1 WHERE o_orderkey = ?"
    for key in keys[20:23]:
        _both(pair, sql, [key])
    assert _both(pair, sql, [2**40]) == (0, False)
    _same_rows(pair)


def test_a_set_value_that_does_not_convert_is_the_users_error(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, _ = pair
    keys = _keys(pair)
    sql = "UPDATE orders SET o_shippriority = ? WHERE o_orderkey = ?"
    for key in keys[30:33]:
        _both(pair, sql, ["4", key])
    with pytest.raises(QueryError, match=r"[Cc]onver"):
        session.run(sql, ["four", keys[33]])
    _same_rows(pair)


def test_other_shapes_run_the_general_path(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    """RETURNING, a subquery, FROM: planned per value, as before."""
    session, plain = pair
    keys = _keys(pair)
    returning = "UPDATE orders SET o_comment = ? WHERE o_orderkey = ? RETURNING o_orderkey"
    for key in keys[40:43]:
        got = session.run(returning, ["r", key])
        assert got.table.column(0).to_pylist() == [key]
        plain.execute(returning, ["r", key])
    nested = "DELETE FROM orders WHERE o_orderkey = (SELECT max(o_orderkey) FROM orders WHERE o_custkey = ?)"
    for customer in (1, 2, 4):
        _both(pair, nested, [customer])
    _same_rows(pair)


def test_in_a_transaction_a_kept_write_sees_and_rolls_back_with_it(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = pair
    keys = _keys(pair)
    sql = "UPDATE orders SET o_totalprice = o_totalprice + ? WHERE o_orderkey = ?"
    for key in keys[50:53]:
        _both(pair, sql, [1, key])
    before = session.run(CHECK).table
    session.begin()
    for _ in range(3):
        session.run(sql, [10, keys[60]])
    read = "SELECT o_totalprice FROM orders WHERE o_orderkey = ?"
    expected = plain.execute(read, [keys[60]]).fetchall()[0][0] + 30
    assert session.run(read, [keys[60]]).table.column(0)[0].as_py() == expected
    session.rollback()
    assert session.run(CHECK).table.equals(before)


def test_set_values_over_several_rows_and_awkward_text(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    """Values read from each matched row; text that looks like the statement's own marks."""
    customers = [c for (c,) in pair[1].execute("SELECT DISTINCT o_custkey FROM orders").fetchall()]
    sql = (
        "UPDATE orders SET o_totalprice = o_totalprice * ?, "
        "o_comment = o_orderstatus || ? || o_comment WHERE o_custkey = ?"
    )
    texts = ["__veil_param_0", "__veil_point_rows", "'; x", 'é"q']
    for n, customer in enumerate(customers[:8]):
        _both(pair, sql, [2, texts[n % len(texts)], customer])
    _same_rows(pair)


def test_integer_set_values_made_in_python_as_duckdb_makes_them(
    pair: tuple[Session, duckdb.DuckDBPyConnection], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``col = col + ?`` and ``col = ?`` (``veil.session.set_values``): the same rows as
    plaintext DuckDB's, and where a value overflows, DuckDB's refusal and nothing written."""
    session, plain = pair
    made: list[bool] = []
    computed = set_values.computed

    def counted(*args: Any) -> Any:
        done = computed(*args)
        made.append(done is not None)
        return done

    monkeypatch.setattr(set_values, "computed", counted)
    key = _keys(pair)[70]
    add = "UPDATE orders SET o_shippriority = o_shippriority + ? WHERE o_orderkey = ?"
    both = (
        "UPDATE orders SET o_shippriority = ?, o_custkey = o_shippriority - ? WHERE o_orderkey = ?"
    )
    for values in ([5, key], [-3, key], [7, key]):
        _both(pair, add, values)
    for values in ([4, 2, key], [9, 1, key]):  # the second SET reads the row as it was
        _both(pair, both, values)
    _both(pair, "UPDATE orders SET o_comment = ? WHERE o_orderkey = ?", ["it's", key])
    for delta in ("-5", "- -6", "+ -7"):  # written in (pgbench -M simple: ``+ -2750``)
        _both(
            pair,
            f"UPDATE orders SET o_shippriority = o_shippriority {delta} WHERE o_orderkey = {key}",
            [],
        )
    for value in (2**31 - 1, 2**31, -(2**40)):  # overflows: INTEGER, BIGINT, the cast
        with pytest.raises(duckdb.Error):
            plain.execute(add, [value, key])
        with pytest.raises(QueryError):
            session.run(add, [value, key])
    assert made[:9] == [True] * 9 and made[-3:] == [False] * 3  # overflows: DuckDB's
    _same_rows(pair)


def test_writes_inside_transactions_get_the_row_id_index(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    """pgbench writes only inside transactions: its tables' row ids are indexed all the
    same (on the second connection), and not while another open transaction holds the
    table (the wait gives up; a later write makes it)."""
    session = pair[0]
    if session.backend.dialect != "postgres":
        pytest.skip("DuckDB's writes take no row-id index")
    statements.run(session, "CREATE TABLE tx_accounts (aid int PRIMARY KEY, abalance int)")
    statements.run(session, "INSERT INTO tx_accounts SELECT i, 0 FROM range(1, 201) t(i)")
    server = session.design.table("tx_accounts").server_name
    indexed = f"SELECT count(*) FROM pg_indexes WHERE tablename = '{server}' AND indexname LIKE '%row_ids'"
    # made with the declared key (test below); dropped, as a table keyed before it was
    assert session.backend.execute(indexed).column(0)[0].as_py() == 1
    session.backend.execute(
        f'DROP INDEX "{point_writes.row_id_index_name(session.design.table("tx_accounts"))}"'
    )
    other = Session(session.client.path)
    try:
        other.begin()  # holds the table (ROW EXCLUSIVE) until it ends
        other.run("INSERT INTO tx_accounts VALUES (201, 1)")
        update = "UPDATE tx_accounts SET abalance = abalance + ? WHERE aid = ?"
        for aid in (1, 2):
            session.begin()
            assert session.run(update, [5, aid]).rowcount == 1
            session.commit()
        assert session.backend.execute(indexed).column(0)[0].as_py() == 0
        other.commit()
        point_writes._INDEX_LATER.clear()  # no waiting for the retry's pause in a test
        for aid in (3, 4, 3):
            session.begin()
            assert session.run(update, [5, aid]).rowcount == 1
            session.commit()
        assert session.backend.execute(indexed).column(0)[0].as_py() == 1
        total = session.run("SELECT sum(abalance), count(*) FROM tx_accounts").table.to_pylist()
        assert total == [{"sum(abalance)": 26, "count_star()": 201}]
    finally:
        other.close()
        statements.run(session, "DROP TABLE tx_accounts")


def test_a_table_with_a_declared_key_has_its_row_ids_indexed_at_once(
    pair: tuple[Session, duckdb.DuckDBPyConnection], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL, CREATE TABLE with a key (and ALTER TABLE ... ADD PRIMARY KEY, as
    ``pgbench -i`` does) makes the row-id index with the key's: 8 pgbench clients always
    hold a transaction that wrote the table, so made by the first write it waited in vain.
    A write then only reads the catalog, and never tries to make it."""
    session = pair[0]
    if session.backend.dialect != "postgres":
        pytest.skip("DuckDB's writes take no row-id index")
    statements.run(session, "CREATE TABLE keyed_later (aid int NOT NULL, abalance int)")
    statements.run(session, "INSERT INTO keyed_later SELECT i, 0 FROM range(1, 101) t(i)")
    statements.run(session, "ALTER TABLE keyed_later ADD PRIMARY KEY (aid)")
    table = session.design.table("keyed_later")
    indexed = (
        "SELECT count(*) FROM pg_indexes WHERE indexname = "
        f"'{point_writes.row_id_index_name(table)}'"
    )
    assert session.backend.execute(indexed).column(0)[0].as_py() == 1
    monkeypatch.setattr(point_writes, "row_id_index", lambda _: pytest.fail("made again"))
    other = Session(session.client.path)
    try:
        other.begin()  # holds the table (ROW EXCLUSIVE) until it ends
        other.run("INSERT INTO keyed_later VALUES (101, 1)")
        session.begin()
        update = "UPDATE keyed_later SET abalance = abalance + ? WHERE aid = ?"
        assert session.run(update, [5, 7]).rowcount == 1
        session.commit()
        other.commit()
        total = session.run("SELECT sum(abalance), count(*) FROM keyed_later").table.to_pylist()
        assert total == [{"sum(abalance)": 6, "count_star()": 101}]
    finally:
        other.close()
        statements.run(session, "DROP TABLE keyed_later")
