"""Prepared statements over the wire meet the plan of their shape (issue 41).

psycopg's server-side prepared statements (Parse once, Bind each run) and
pgbench ``-M simple``'s values written into the text both run a point query's
template: planned twice (the second planning checks the first), then every
value is only encrypted and sent. Answers are checked against plaintext DuckDB.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import psycopg
import pytest

from tests.support.tpch import copy_veil_env
from tests.support.translations import counted_translations
from veil._native import WireServer
from veil.serve.engine import Engine
from veil.session.plan_cache import PlanCache

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(
    veil_env: dict[str, object], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("prepared")
    copy_veil_env(veil_env, root)
    engine = Engine(root / "client")
    server = WireServer(engine, "127.0.0.1:0", None, None, True)
    try:
        yield server.address.rsplit(":", 1)[1], root / "client"
    finally:
        server.stop()
        engine.close()


def _templates(client: Path) -> list[str]:
    """The statements kept as verified templates by this process's sessions of ``client``."""
    plans = PlanCache.shared(client, False)._plans
    with plans.lock:
        return [
            key[0]
            for key, cached in plans.entries.items()
            if cached.template is not None and cached.template.verified
        ]


@pytest.mark.parametrize("prepare", [True, False])
def test_a_prepared_point_query_is_planned_once(
    served: tuple[str, Path], plain: duckdb.DuckDBPyConnection, prepare: bool
) -> None:
    port, client = served
    sql = "SELECT n_name, n_regionkey FROM nation WHERE n_nationkey = %s"
    with psycopg.connect(f"host=127.0.0.1 port={port} user=bob", autocommit=True) as con:
        for key in (0, 3, 7, 11, 24, 99, 5):
            got = con.execute(sql, [key], prepare=prepare).fetchall()
            want = plain.execute(sql.replace("%s", "?"), [key]).fetchall()
            assert got == want, key
    assert any("n_nationkey = ?" in text and "n_regionkey" in text for text in _templates(client))


def test_values_in_the_text_meet_the_same_plan(
    served: tuple[str, Path], plain: duckdb.DuckDBPyConnection
) -> None:
    port, client = served
    with psycopg.connect(f"host=127.0.0.1 port={port} user=bob", autocommit=True) as con:
        for key in (1, 2, 6, 20, 40):
            sql = f"SELECT n_comment FROM nation WHERE n_nationkey = {key}"
            assert con.execute(sql).fetchall() == plain.execute(sql).fetchall(), key
            sql = f"SELECT count(*) FROM nation WHERE n_name = 'BRAZIL' AND n_regionkey = {key}"
            assert con.execute(sql).fetchall() == plain.execute(sql).fetchall(), key
    assert any("n_comment" in text and "= ?" in text for text in _templates(client))


def test_integers_in_the_text_are_translated_once_per_shape(
    veil_env: dict[str, object],
    tmp_path_factory: pytest.TempPathFactory,
    plain: duckdb.DuckDBPyConnection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``pgbench -M simple``'s statements (``veil.serve.shapes``): the first of a shape is
    translated by sqlglot, the rest are its translation with their integers written in;
    answers and writes as plaintext DuckDB's; a string is translated every time."""
    root = tmp_path_factory.mktemp("shapes")
    copy_veil_env(veil_env, root)
    engine = Engine(root / "client")
    server = WireServer(engine, "127.0.0.1:0", None, None, True)
    translated = counted_translations(monkeypatch)
    port = server.address.rsplit(":", 1)[1]
    plain.execute("CREATE TEMP TABLE region_copy AS SELECT * FROM region")
    try:
        with psycopg.connect(f"host=127.0.0.1 port={port} user=bob", autocommit=True) as con:
            for key in (1, 2, 6, 20, 40, 3):
                sql = f"SELECT n_name, n_regionkey + 1 FROM nation WHERE n_nationkey = -{key} + {key * 2}"
                assert con.execute(sql).fetchall() == plain.execute(sql).fetchall(), key
            update = "UPDATE region SET r_regionkey = r_regionkey + {d} WHERE r_regionkey = {k}"
            for d, k in ((10, 1), (-10, 11), (7, 2), (-7, 9)):
                assert con.execute(update.format(d=d, k=k)).rowcount == 1
                plain.execute(update.format(d=d, k=k).replace("region ", "region_copy "))
            named = "SELECT count(*) FROM nation WHERE n_name = 'BRAZIL' AND n_nationkey = {k}"
            for key in (2, 3):
                assert con.execute(named.format(k=key)).fetchall() == [(int(key == 2),)]
            check = "SELECT r_regionkey, r_name FROM region ORDER BY 1"
            assert (
                con.execute(check).fetchall()
                == plain.execute(check.replace("region ", "region_copy ")).fetchall()
            )
    finally:
        server.stop()
        engine.close()
    # one translation per shape (the UPDATE has two: a sign is text); with a string: each time
    assert len([t for t in translated if "n_regionkey +" in t]) == 1
    assert len([t for t in translated if t.startswith("UPDATE")]) == 2  # "+ ?", "+ -?"
    assert len([t for t in translated if "BRAZIL" in t]) == 2
