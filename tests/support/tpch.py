"""Fixtures: TPC-H SF 0.01 as Parquet, loaded once through Veil and once in plain DuckDB.

A pytest plugin of the root conftest (``pytest_plugins``), so every test folder
sees them: ``session`` (the DuckDB server), ``postgres_session``,
``spark_session``, ``paillier_session``, ``any_session`` (each backend in turn),
``plain``, ``tpch_dir``, ``veil_env``, ``server_log`` and ``first_scan_fails``.
Each is made once per run, on first use; ``fresh_session`` gives a test a session of
its own over a copy of the data as loaded (for tests whose answer depends on what
earlier queries left in the shared one).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.conftest import SERVERS, SPARK_CORES
from tests.support.oracle import read_fixture
from veil.load.loader import load
from veil.session.session import Session
from veil_dev.servers.spark import local_url
from veil_dev.tpch.gen import generate
from veil_dev.tpch.queries import query_texts

SF = 0.01


def copy_veil_env(veil_env: dict[str, object], root: Path) -> Path:
    """A writable copy of the shared TPC-H client directory and server under ``root``;
    returns the client directory (its server.json names the copied server)."""
    source = Path(str(veil_env["root"]))
    shutil.copytree(source / "client", root / "client")
    shutil.copy(source / "server.duckdb", root / "server.duckdb")
    settings = (root / "client" / "server.json").read_text()
    (root / "client" / "server.json").write_text(settings.replace(str(source), str(root)))
    return root / "client"


def tpch_queries() -> list[tuple[str, str]]:
    """The 22 TPC-H queries, as (name, SQL)."""
    return [(f"q{n}", sql) for n, sql in query_texts().items()]


@pytest.fixture(scope="session")
def tpch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tpch")
    generate(SF, out)
    return out


@pytest.fixture(scope="session")
def veil_env(tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("veil")
    workload = [sql for _, sql in read_fixture("features.sql") + tpch_queries()]
    url = f"duckdb:///{root / 'server.duckdb'}"
    load(str(tpch_dir), url, str(root / "client"), workload=workload, progress=lambda _: None)
    env: dict[str, object] = {"client": root / "client", "url": url, "root": root}
    # as loaded, before any query peels an onion or leaves a plan: ``fresh_session``'s source
    pristine = tmp_path_factory.mktemp("veil-pristine")
    copy_veil_env(env, pristine)
    env["pristine"] = pristine
    return env


@pytest.fixture(scope="session")
def session(veil_env: dict[str, object]) -> Iterator[Session]:
    opened = Session(str(veil_env["client"]))
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def paillier_session(tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """The same data loaded with packed Paillier sums instead of ASHE (DuckDB server)."""
    root = tmp_path_factory.mktemp("veil-paillier")
    workload = [sql for _, sql in read_fixture("features.sql") + tpch_queries()]
    url = f"duckdb:///{root / 'server.duckdb'}"
    load(str(tpch_dir), url, str(root / "client"), workload, lambda _: None, sums="paillier")
    opened = Session(str(root / "client"))
    opened.hom_pushdown = "always"  # at SF 0.01 the cost rule prefers the client
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def postgres_session(
    tpch_dir: Path, postgres_cluster: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    """The same data loaded through Veil into PostgreSQL."""
    root = tmp_path_factory.mktemp("veil-pg")
    url = postgres_cluster.create_schema("veil_sql_oracle")  # type: ignore[attr-defined]
    workload = [sql for _, sql in read_fixture("features.sql") + tpch_queries()]
    before = len(postgres_cluster.read_log())  # type: ignore[attr-defined]
    load(str(tpch_dir), url, str(root / "client"), workload=workload, progress=lambda _: None)
    opened = Session(str(root / "client"))
    opened.load_log = postgres_cluster.read_log()[before:]  # type: ignore[attr-defined]
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def spark_session(
    tpch_dir: Path, spark_local: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    """The same data loaded through Veil into a Spark warehouse (the run's local Spark)."""
    root = tmp_path_factory.mktemp("veil-spark")
    url = local_url(root / "warehouse", SPARK_CORES)
    workload = [sql for _, sql in read_fixture("features.sql") + tpch_queries()]
    load(str(tpch_dir), url, str(root / "client"), workload=workload, progress=lambda _: None)
    opened = Session(str(root / "client"))
    yield opened
    opened.close()


def pristine_session(veil_env: dict[str, object], root: Path) -> Session:
    """A session of its own over a copy (under ``root``) of the TPC-H data as loaded: what
    ``session``'s queries left (peeled onions, cached and sealed plans) cannot reach it.
    Sealed plans outlive ``plans.clear()``: a test comparing plans made under other passes
    opens one such session per set of passes."""
    return Session(copy_veil_env({"root": veil_env["pristine"]}, root))


@pytest.fixture
def fresh_session(veil_env: dict[str, object], tmp_path: Path) -> Iterator[Session]:
    """``pristine_session`` for one test: its answers do not depend on the tests before."""
    opened = pristine_session(veil_env, tmp_path)
    yield opened
    opened.close()


BACKEND_SESSIONS = {"duckdb": "session", "postgres": "postgres_session", "spark": "spark_session"}


@pytest.fixture(scope="session", params=SERVERS)
def any_session(request: pytest.FixtureRequest) -> Session:
    """The Veil session on each server backend in turn."""
    return request.getfixturevalue(BACKEND_SESSIONS[request.param])  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def plain(tpch_dir: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for file in sorted(tpch_dir.glob("*.parquet")):
        con.execute(f"CREATE TABLE {file.stem} AS SELECT * FROM read_parquet('{file}')")
    return con


@pytest.fixture()
def server_log(session: Session):  # type: ignore[no-untyped-def]
    statements: list[tuple[str, object]] = []
    remove = session.backend.add_statement_listener(
        lambda sql, params: statements.append((sql, params))
    )
    yield statements
    remove()


@pytest.fixture()
def first_scan_fails(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The next query's first server scan raises (as a RemoteSQL bug would); the rest run."""
    import veil.session.session as session_module

    real = session_module.run_scan
    calls: list[object] = []

    def flaky(scan, *args):  # type: ignore[no-untyped-def]
        calls.append(scan)
        if len(calls) == 1:
            raise duckdb.BinderException("a RemoteSQL bug")
        return real(scan, *args)

    monkeypatch.setattr(session_module, "run_scan", flaky)
    return calls
