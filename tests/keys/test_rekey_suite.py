"""The SQL suite's queries beside a re-key (issue 42's Done-when), DuckDB and PostgreSQL.

The database the SQL suite (tests/sql/test_oracle.py) queries, TPC-H SF 0.01
loaded under the suite's workload, is re-keyed; in the middle of it (the
re-key held at lineitem's copy by its hook: customer already under the new
key, lineitem copied but not swapped in, the other tables under the old key)
every feature query and TPC-H query runs through another session and must
equal plaintext DuckDB's answer; a few again once the old key is destroyed.
At SF 1 the same runs beside a whole re-key (``veil bench rekey --suite``).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tests.sql.test_oracle import _ordered
from tests.support.oracle import read_fixture
from tests.support.tpch import tpch_queries
from veil.keys import key_status
from veil.load import rekey_copy
from veil.load.loader import load
from veil.load.rekey import rekey
from veil.session.session import Session
from veil_dev.bench.compare import difference

pytestmark = pytest.mark.integration

SUITE = read_fixture("features.sql") + tpch_queries()
AFTER = {"q1", "q3", "q6", "q18", "count star", "OPE date range"}


def suite_problems(
    client: Path, plain: duckdb.DuckDBPyConnection, suite: list[tuple[str, str]]
) -> list[str]:
    """Each query whose answer through a new session differs from plaintext's."""
    session = Session(client)
    problems = []
    try:
        for title, sql in suite:
            try:
                got = session.run(sql).table
            except Exception as exc:
                problems.append(f"{title}: {type(exc).__name__}: {exc}"[:300])
                continue
            problem = difference(got, plain.execute(sql).fetchall(), _ordered(sql))
            if problem is not None:
                problems.append(f"{title}: {problem}"[:300])
    finally:
        session.close()
    return problems


def test_the_sql_suite_beside_a_rekey(
    backend_url: str,
    tpch_dir: Path,
    plain: duckdb.DuckDBPyConnection,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = tmp_path / "client"
    load(str(tpch_dir), backend_url, str(client), [sql for _, sql in SUITE], lambda _: None)
    during: list[list[str]] = []

    def hook(stage: str, name: str) -> None:
        if (stage, name) == ("copied", "lineitem"):
            during.append(suite_problems(client, plain, SUITE))

    monkeypatch.setattr(rekey_copy, "hook", hook)
    report = rekey(client)
    assert during == [[]]  # one whole pass, every answer right
    assert "lineitem" in report.tables
    assert key_status(client / "key.json").next_fingerprint == ""
    # under the new key alone (the whole suite under it is tests/keys/test_rekey.py's kind
    # of check, kept short here): a join, a sum, a range
    after = [t for t in SUITE if t[0] in AFTER]
    assert len(after) == len(AFTER) and suite_problems(client, plain, after) == []
