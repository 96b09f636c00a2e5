"""Fixtures shared by every test directory: server URLs for each backend.

``backend_url`` gives each test a fresh, empty server on every backend: a DuckDB
file under the test's tmp_path and, for tests that may use PostgreSQL, a new
schema in one throwaway cluster started for the whole session
(``veil_dev.servers.postgres``; its ``read_log()`` holds every statement the
server received). PostgreSQL cases carry the ``postgres`` mark, so
``-m "not postgres"`` skips them. Spark (``spark_url``: a fresh warehouse on the
process's one local Spark, started once by ``spark_local``) carries ``spark``; the
suites that run on it ask for it by name (``any_session``, the DML suite, canaries).

The TPC-H fixtures (``session``, ``plain``, ``any_session``, ...) are in
``tests/support/tpch.py``, a plugin of this file, so every test folder sees them.

In the SQL suites (``FALLBACK_CHECKED``) a test fails when a query it ran fell back
to fetching whole tables (``veil.sql.fallbacks``) for a shape not on the documented
list; a test that provokes one on purpose says so with ``@pytest.mark.fallback_expected``.
The fuzzer counts them per seed (``tests.fuzz.harness``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

import veil.load.loader as loader
from veil.crypto.keys import write_key_file
from veil.sql import fallbacks
from veil_dev.servers.postgres import ThrowawayCluster
from veil_dev.servers.spark import local_url, start_local

SPARK_CORES = 2
# The server backends in turn, as fixture params: PostgreSQL and Spark carry their marks.
SERVERS = [
    "duckdb",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("spark", marks=pytest.mark.spark),
]

pytest_plugins = ("tests.support.tpch",)


@pytest.fixture(scope="session", autouse=True)
def small_tables_take_the_bytes_form() -> Iterator[None]:
    """The tests' tables are small: let them store few-valued keys as bytes, as large
    ones do (``veil.load.loader.BYTES_FORM_MIN_ROWS``), so both forms stay tested."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loader, "BYTES_FORM_MIN_ROWS", 0)
        yield


# the folders whose tests may not fall back outside docs/sql.md's list of shapes
FALLBACK_CHECKED = frozenset({"sql", "session", "tpcds"})


@pytest.fixture(autouse=True)
def no_unexpected_fallback(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if a query it ran fell back for a shape Veil should split."""
    folder = request.node.path.parent.name
    if folder not in FALLBACK_CHECKED or request.node.get_closest_marker("fallback_expected"):
        yield
        return
    before = fallbacks.counts()
    yield
    found = [f for f in fallbacks.since(before) if f[1] not in fallbacks.DOCUMENTED]
    if found:
        pytest.fail(
            "fell back to fetching whole tables (not a documented shape, docs/sql.md):\n"
            + "\n".join(f"  {n} x {stage}/{shape}: {detail}" for stage, shape, n, detail in found),
            pytrace=False,
        )


_schema_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThrowawayCluster]:
    """One throwaway PostgreSQL 15 cluster for the session (stopped at the end)."""
    cluster = ThrowawayCluster(tmp_path_factory.mktemp("postgres"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster: ThrowawayCluster) -> str:
    """A fresh, empty schema in the session's cluster."""
    return postgres_cluster.create_schema(f"veil_test_{next(_schema_numbers)}")


@pytest.fixture(scope="session")
def spark_local() -> None:
    """This run's one local Spark (spark-local[2]); fails clearly when Java is missing."""
    start_local(SPARK_CORES)


@pytest.fixture
def spark_url(spark_local: None, tmp_path: Path) -> str:
    """A fresh, empty warehouse on the run's local Spark."""
    return local_url(tmp_path / "warehouse", SPARK_CORES)


@pytest.fixture
def duckdb_url(tmp_path: Path) -> str:
    return f"duckdb://{tmp_path / 'server.duckdb'}"


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend_url(request: pytest.FixtureRequest) -> str:
    """A fresh, empty server on each backend in turn."""
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture(params=SERVERS)
def server_url(request: pytest.FixtureRequest) -> str:
    """A fresh, empty server on each backend in turn, Spark included (the backend tests)."""
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    """A fresh Veil key file (0600) in the test's own directory."""
    path = tmp_path / "veil.key"
    write_key_file(path)
    return path
