"""What a point write sends the server (issue 41): one UPDATE or DELETE by row id.

A write of one row by key is one server statement, which changes that row or
nothing, so in autocommit it runs without a BEGIN and a COMMIT of its own
(PostgreSQL and DuckDB); it still gives the row a fresh row id. Writes of more rows, and every write inside
a transaction, keep their transaction. The backends write one row (DuckDB: a
few) by key with its values as parameters, the rest as before.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from tests.session.test_point_writes import CHECK, WORKLOAD
from tests.support.oracle import assert_same, loaded_tables
from veil.backends.base import OLD_KEY, Backend
from veil.design.model import DET, RND
from veil.session import dml
from veil.session.session import Session

pytestmark = pytest.mark.integration

UPDATE = "UPDATE orders SET o_comment = ? WHERE o_orderkey = ?"
WORDS = ("BEGIN", "COMMIT", "ROLLBACK", "UPDATE", "DELETE")


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def pair(
    request: pytest.FixtureRequest, tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    """TPC-H orders through Veil, loaded with the point statements' workload, and plain."""
    orders = {"orders": f"SELECT * FROM read_parquet('{tpch_dir}/orders.parquet')"}
    root = tmp_path_factory.mktemp("point_write_statements")
    with loaded_tables(request, root, orders, WORKLOAD) as pair:
        yield pair


def _alone(session: Session, write: str) -> list[str]:
    """What one point write sends in autocommit: ``write`` alone."""
    return [write]


def _keys(plain: duckdb.DuckDBPyConnection) -> list[int]:
    return [k for (k,) in plain.execute("SELECT o_orderkey FROM orders ORDER BY 1").fetchall()]


def _sent(session: Session, sql: str, params: list[object]) -> tuple[int, list[str]]:
    """``sql`` run by the session: its row count and the first words of the server
    statements it sent among ``WORDS`` (writes: those of ``orders``' server table, not
    of its row-id counter)."""
    sent: list[str] = []
    table = session.design.table("orders").server_name

    def heard(statement: str, _: object) -> None:
        word = statement.split()[0].upper()
        if word in WORDS and (word not in ("UPDATE", "DELETE") or table in statement):
            sent.append(word)

    stop = session.backend.add_statement_listener(heard)
    try:
        result = session.run(sql, params)
    finally:
        stop()
    return result.rowcount, sent


def _ids(session: Session) -> tuple[int, int]:
    """The server table's row count and its largest row id."""
    table = session.design.table("orders")
    found = session.backend.execute(
        f'SELECT count(*), max("{table.row_id}") FROM "{table.server_name}"'
    )
    return int(found.column(0)[0].as_py()), int(found.column(1)[0].as_py())


def test_a_point_update_is_one_statement(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = pair
    keys = _keys(plain)
    plain.execute(UPDATE, ["first", keys[6]])
    session.run(UPDATE, ["first", keys[6]])  # on PostgreSQL, makes the row-id index
    for n, key in enumerate(keys[:6]):
        plain.execute(UPDATE, [f"alone {n}", key])
        before = _ids(session)
        count, sent = _sent(session, UPDATE, [f"alone {n}", key])
        assert count == 1 and sent == _alone(session, "UPDATE")
        rows, last = _ids(session)
        assert rows == before[0] and last > before[1]  # a fresh row id, no row added
    result = session.run(UPDATE, ["stats", keys[0]])
    plain.execute(UPDATE, ["stats", keys[0]])
    assert result.stats.statements >= 2  # the match's SELECT and the write, in the split
    assert_same(session.run(CHECK).table, plain.execute(CHECK).fetchall(), True, CHECK)


def test_a_point_delete_is_one_statement(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = pair
    sql = "DELETE FROM orders WHERE o_orderkey = ?"
    for key in _keys(plain)[-4:]:
        plain.execute(sql, [key])
        assert _sent(session, sql, [key]) == (1, _alone(session, "DELETE"))
    assert _sent(session, sql, [-1]) == (0, [])
    assert_same(session.run(CHECK).table, plain.execute(CHECK).fetchall(), True, CHECK)


def test_writes_of_several_rows_and_inside_transactions_keep_theirs(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = pair
    customer = plain.execute(
        "SELECT o_custkey FROM orders GROUP BY 1 HAVING count(*) > 2 ORDER BY 1 LIMIT 1"
    ).fetchall()[0][0]
    several = "UPDATE orders SET o_comment = ? WHERE o_custkey = ?"
    expected = plain.execute(several, ["several", customer]).fetchall()[0][0]
    count, sent = _sent(session, several, ["several", customer])
    assert count == expected and sent[0] == "BEGIN" and sent[-1] == "COMMIT"
    key = _keys(plain)[20]
    before = session.run(CHECK).table
    session.begin()
    for n in range(3):
        count, sent = _sent(session, UPDATE, [f"inside {n}", key])
        assert count == 1 and sent == ["UPDATE"]  # within the session's transaction
    session.rollback()
    assert session.run(CHECK).table.equals(before)
    assert_same(before, plain.execute(CHECK).fetchall(), True, CHECK)


def _scratch(backend: Backend, name: str, exact: bool) -> pa.Table:
    """A server table of eight rows; ``exact``: with a DECIMAL column (which DuckDB's
    writes by key take joined, not as parameters)."""
    rows = pa.table(
        {
            "id": pa.array(range(8), pa.int64()),
            "n": pa.array([10 * i for i in range(8)], pa.int32()),
            "b": pa.array([bytes([i]) * 3 for i in range(8)], pa.binary()),
            "s": pa.array([f"s{i}" for i in range(8)], pa.string()),
            "f": pa.array([i / 4 for i in range(8)], pa.float64()),
            "t": pa.array([i % 2 == 0 for i in range(8)], pa.bool_()),
            "d": pa.array([datetime.date(2020, 1, 1 + i) for i in range(8)], pa.date32()),
            "m": pa.array([decimal.Decimal(i) / 100 for i in range(8)], pa.decimal128(12, 2)),
        }
    )
    rows = rows if exact else rows.drop_columns(["m"])
    backend.bulk_load(name, rows)
    return rows


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("count", [1, 3, 6])
def test_backends_update_rows_by_key(
    pair: tuple[Session, duckdb.DuckDBPyConnection], count: int, exact: bool
) -> None:
    """One row (DuckDB: up to four) with its values as parameters, more joined: the same
    rows set either way, and a key no row has counts nothing."""
    backend = pair[0].backend
    name = f"h41_scratch_{count}_{int(exact)}"
    rows = _scratch(backend, name, exact)
    changed = rows.slice(0, count)
    new = {
        "id": pa.array([100 + i for i in range(count)], pa.int64()),
        "n": pa.array([-i for i in range(count)], pa.int32()),
        "b": pa.array([b"\x00'\xff"] * count, pa.binary()),
        "s": pa.array(["é'\"x"] * count, pa.string()),
        "f": pa.array([1e-300] * count, pa.float64()),
        "t": pa.array([None] * count, pa.bool_()),
        "d": pa.array([datetime.date(1999, 12, 31)] * count, pa.date32()),
        "m": pa.array([decimal.Decimal("-12.34")] * count, pa.decimal128(12, 2)),
    }
    if not exact:
        del new["m"]
    data = pa.table(new).append_column(OLD_KEY, changed.column("id"))
    assert backend.update_rows(name, "id", data) == count
    columns = ", ".join(f'"{c}"' for c in rows.column_names)  # PostgreSQL: widest first
    stored = backend.execute(f'SELECT {columns} FROM "{name}" ORDER BY id')
    kept = rows.slice(count)
    expected = pa.concat_tables([kept, pa.table(new).cast(rows.schema)]).sort_by("id")
    assert stored.cast(rows.schema).equals(expected)
    gone = pa.table(new).append_column(OLD_KEY, pa.array([-1] * count, pa.int64()))
    assert backend.update_rows(name, "id", gone) == 0
    backend.drop_table(name)


def test_encryptors_are_made_once_per_session_and_design(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session = pair[0]
    table = session.design.table("orders")
    made = dml.encryptor(session, table)
    assert dml.encryptor(session, table) is made
    session.reload_design()
    again = session.design.table("orders")
    assert again is not table and dml.encryptor(session, again) is not made


def _written(
    pair: tuple[Session, duckdb.DuckDBPyConnection], sql: str, params: list[object]
) -> str:
    """``sql`` run on both sides (same row count, same rows after): the server's UPDATE."""
    session, plain = pair
    table = session.design.table("orders")
    sent: list[str] = []
    stop = session.backend.add_statement_listener(lambda text, _: sent.append(text))
    try:
        expected = plain.execute(sql, params).fetchall()[0][0]
        assert session.run(sql, params).rowcount == expected, (sql, params)
    finally:
        stop()
    for check in (CHECK, "SELECT * FROM orders WHERE o_orderkey = 7", COUNT):
        assert_same(session.run(check).table, plain.execute(check).fetchall(), True, check)
    updates = [s for s in sent if s.upper().startswith("UPDATE") and table.server_name in s]
    assert len(updates) == 1, sent
    return updates[0]


COUNT = "SELECT count(*) FROM orders WHERE o_custkey = 371"


def _columns(session: Session, scheme: str, source: str) -> str:
    table = session.design.table("orders")
    (found,) = [e.name for e in table.encryptions if e.scheme == scheme and e.source == source]
    return found


def test_a_det_column_left_alone_is_not_written(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    """Its ciphertext is the same for the same value and bound to no row id
    (``dml.unchanged_columns``); every row-bound column changes with the fresh id."""
    session = pair[0]
    keys = [_columns(session, DET, c) for c in ("o_orderkey", "o_custkey")]
    for number, key in enumerate([7, 32, 7]):  # the second runs a kept plan
        update = _written(pair, UPDATE, [f"kept {number}", key])
        assert not any(name in update for name in keys), update
        assert all(_columns(session, RND, c) in update for c in ("o_clerk", "o_comment"))


def test_an_assigned_det_column_is_written(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session = pair[0]
    customer, key = (_columns(session, DET, c) for c in ("o_custkey", "o_orderkey"))
    update = _written(pair, "UPDATE orders SET o_custkey = 371 WHERE o_orderkey = ?", [7])
    assert customer in update and key not in update.split("WHERE")[0], update
    # the general path (a WHERE the server cannot match alone) leaves them out too
    general = "UPDATE orders SET o_comment = o_comment || '!' WHERE o_orderkey + 0 = ?"
    update = _written(pair, general, [32])
    assert key not in update.split("WHERE")[0] and customer not in update, update
