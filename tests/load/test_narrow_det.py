"""Narrow DET key scopes (``veil.load.narrow_det``): loaded keys keep narrow ciphertexts.

On DuckDB the DET integers of many distinct values (``k_id``, joined with
``e_key``) are encrypted so that values of the loaded range stay in a
narrow range (bit-packed by the server); joins, equality, IN, GROUP BY and
writes of values far outside that range, negative and NULL, must give
plaintext DuckDB's answers. PostgreSQL keeps 64-bit DET.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.support.oracle import check_query, load_tables
from veil.design.model import DET
from veil.load.narrow_det import NARROW_PARAM
from veil.session.session import Session

KEYS = "SELECT i * 3 AS k_id, 'key ' || i AS k_name FROM range(30000) t(i)"
EVENTS = "SELECT i AS e_id, (i * 7919) % 90000 AS e_key, i % 5 AS e_kind FROM range(60000) t(i)"
QUERIES = [
    "SELECT k_name FROM keys WHERE k_id = 2997",
    "SELECT COUNT(*) FROM keys JOIN events ON k_id = e_key WHERE e_kind = 3",
    "SELECT e_key, COUNT(*) FROM events WHERE e_key IN (0, 3, 89997, 1099511627776) "
    "GROUP BY e_key ORDER BY e_key",
    "SELECT k_id, k_name FROM keys WHERE k_id IN (SELECT e_key FROM events WHERE e_id < 40) "
    "ORDER BY k_id",
    "SELECT COUNT(DISTINCT e_key) FROM events",
]
STATEMENTS = [
    "INSERT INTO keys VALUES (1099511627776, 'far'), (-5, 'negative'), (NULL, 'none')",
    "INSERT INTO events VALUES (70000, 1099511627776, 3), (70001, -5, 3), (70002, NULL, 3)",
    "UPDATE events SET e_key = -9223372036854775807 WHERE e_id = 17",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(
        request, tmp_path_factory.mktemp("narrow"), {"keys": KEYS, "events": EVENTS}, QUERIES
    )
    yield session, plain
    session.close()


def test_the_join_group_shares_one_narrow_width_on_duckdb(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, _ = pair
    key = session.design.table("keys").find("k_id", DET)
    event = session.design.table("events").find("e_key", DET)
    assert key is not None and event is not None
    if session.backend.dialect != "duckdb":
        assert NARROW_PARAM not in key.params and NARROW_PARAM not in event.params
        return
    # the largest key is 89,997 (17 bits): with sign and headroom, FF1's floor of 20 bits
    assert key.params[NARROW_PARAM] == event.params[NARROW_PARAM] == 20
    table = session.design.table("events")
    stored = session.backend.execute(
        f'SELECT min("{event.name}"), max("{event.name}") FROM "{table.server_name}"'
    )
    assert stored.column(0)[0].as_py() >= -(2**19) and stored.column(1)[0].as_py() < 2**19


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_match_plaintext(pair: tuple[Session, duckdb.DuckDBPyConnection], sql: str) -> None:
    session, plain = pair
    check_query(session, plain, sql)


def test_writes_far_outside_the_loaded_range(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = pair
    for statement in STATEMENTS:
        session.run(statement)
        plain.execute(statement)
    for sql in QUERIES:
        check_query(session, plain, sql)
