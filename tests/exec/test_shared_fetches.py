"""One query's repeated server statements are sent once (``veil.exec.server.shared_fetches``).

TPC-DS repeats a CTE per sales channel, each with the same dimension filter as an
IN-subquery (q33, q56, q60): the plan sends that filter's statement once per channel.
"""

from __future__ import annotations

import contextlib
from collections import Counter

import duckdb
import pytest

import veil.exec.server as server
import veil.session.session as session_module
from tests.support.oracle import assert_same
from veil.session.session import Session

pytestmark = pytest.mark.integration

# the same customer filter as an IN-subquery of two channels
CHANNELS = """
WITH o AS (
    SELECT o_custkey AS k, sum(o_totalprice) AS v FROM orders
    WHERE o_custkey IN (SELECT c_custkey FROM customer WHERE c_mktsegment IN ('BUILDING'))
    GROUP BY o_custkey),
l AS (
    SELECT l_suppkey AS k, sum(l_quantity) AS v FROM lineitem
    WHERE l_suppkey IN (SELECT c_custkey FROM customer WHERE c_mktsegment IN ('BUILDING'))
    GROUP BY l_suppkey)
SELECT k, sum(v) AS total FROM (SELECT * FROM o UNION ALL SELECT * FROM l)
GROUP BY k ORDER BY k
"""


def _repeated(statements: list[str]) -> list[str]:
    return [sql for sql, n in Counter(statements).items() if n > 1]


def test_a_repeated_statement_is_sent_once(
    session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    for _ in range(2):  # the first run plans, the second runs the kept plan
        result = session.run(CHANNELS)
        assert_same(result.table, plain.execute(CHANNELS).fetchall(), True, CHANNELS)
        assert _repeated(result.stats.remote_sql) == []
        assert result.stats.statements == len(result.stats.remote_sql)


def test_without_sharing_the_plan_sends_it_twice(
    session: Session, plain: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The case above exercises the sharing: the same plan sends a statement twice without it."""
    monkeypatch.setattr(session_module, "shared_fetches", contextlib.nullcontext)
    result = session.run(CHANNELS)
    assert_same(result.table, plain.execute(CHANNELS).fetchall(), True, CHANNELS)
    assert _repeated(result.stats.remote_sql) != []


def test_a_kept_plan_renders_no_statement_again(
    session: Session, plain: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each statement with run-time filters is rendered once per shape of its filters, also
    one that reads only some of them (a joined fetch's reduction: ``server._fills``)."""
    for _ in range(2):
        session.run(CHANNELS)
    rendered: list[object] = []
    render = server.render
    monkeypatch.setattr(server, "render", lambda *a: rendered.append(a) or render(*a))
    result = session.run(CHANNELS)
    assert_same(result.table, plain.execute(CHANNELS).fetchall(), True, CHANNELS)
    assert rendered == []
