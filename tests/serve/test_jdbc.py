"""pgjdbc (the PostgreSQL JDBC driver, from Maven Central) against ``veil serve``.

One JVM runs the 22 TPC-H queries, the SQL feature suite in PostgreSQL's
dialect and a prepared statement with parameters (six runs: pgjdbc moves to
a server-prepared statement with binary results after five), through
``tests/serve/jdbc/WireClient.java``; every answer is compared with plaintext
DuckDB's.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest
import sqlglot

from tests.support.oracle import read_fixture
from tests.support.tpch import tpch_queries
from tests.support.wire_compare import assert_text_rows, sections
from veil._native import WireServer
from veil.serve.engine import Engine

PGJDBC = "org.postgresql:postgresql:42.7.14"
CLIENT = Path(__file__).parent / "jdbc" / "WireClient.java"
PREPARED = (
    "SELECT o_orderkey, o_totalprice, o_orderdate FROM orders "
    "WHERE o_custkey = ? AND o_orderpriority = ? ORDER BY o_orderkey"
)

pytestmark = pytest.mark.skipif(
    shutil.which("java") is None or shutil.which("mvn") is None,
    reason="pgjdbc's test needs java and mvn (apt-get install openjdk-17-jdk-headless maven)",
)


def pgjdbc_jar() -> Path:
    """The driver's jar, fetched once with mvn into the user's cache."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "veil" / "jdbc"
    jar = base / f"postgresql-{PGJDBC.rsplit(':', 1)[1]}.jar"
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not jar.exists():
            subprocess.run(
                ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={PGJDBC}",
                 f"-DoutputDirectory={base}"],
                cwd=base, check=True, capture_output=True, timeout=300,
            )  # fmt: skip
    return jar


def _cases() -> list[tuple[str, str, str]]:
    """(name, SQL sent, SQL for plaintext DuckDB)."""
    cases = [(name, sql, sql) for name, sql in tpch_queries()]
    for i, (_, sql) in enumerate(read_fixture("features.sql")):
        postgres = sqlglot.parse_one(sql, read="duckdb").sql(dialect="postgres")
        if postgres.strip():
            cases.append((f"f{i:03d}", postgres, sql))
    literal = PREPARED.replace("= ?", "= 370", 1).replace("= ?", "= '2-HIGH'", 1)
    cases.append(("prepared", f"-- params: 370, 2-HIGH\n{PREPARED}", literal))
    return cases


@pytest.fixture(scope="module")
def jdbc_output(
    veil_env: dict[str, object], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[str]]:
    work = tmp_path_factory.mktemp("jdbc")
    files = []
    for name, sent, _ in _cases():
        path = work / f"{name}.sql"
        path.write_text(sent)
        files.append(str(path))
    server = WireServer(Engine(str(veil_env["client"])), "127.0.0.1:0", None, None, True)
    try:
        port = server.address.rsplit(":", 1)[1]
        done = subprocess.run(
            ["java", "-cp", str(pgjdbc_jar()), str(CLIENT),
             f"jdbc:postgresql://127.0.0.1:{port}/veil?user=jdbc", *files],
            capture_output=True, text=True, timeout=600, check=True,
        )  # fmt: skip
    finally:
        server.stop()
    return dict(sections(done.stdout))


CASES = _cases()


@pytest.mark.parametrize(("name", "sent", "plain_sql"), CASES, ids=[c[0] for c in CASES])
def test_through_pgjdbc(
    jdbc_output: dict[str, list[str]],
    plain: duckdb.DuckDBPyConnection,
    name: str,
    sent: str,
    plain_sql: str,
) -> None:
    lines = jdbc_output[name]
    if lines and lines[-1].startswith("== error 42601") and name.startswith("f"):
        pytest.skip("sqlglot's PostgreSQL form of this DuckDB syntax is not valid SQL")
    assert lines and lines[-1].startswith("== rows"), "\n".join(lines)
    assert_text_rows([line.split("\t") for line in lines[:-1]], plain, plain_sql, sent)


def test_database_browser_metadata(veil_env: dict[str, object]) -> None:
    """What DBeaver-style tools ask through JDBC's DatabaseMetaData: schemas, tables,
    columns with their JDBC types, primary keys and indexes."""
    server = WireServer(Engine(str(veil_env["client"])), "127.0.0.1:0", None, None, True)
    try:
        port = server.address.rsplit(":", 1)[1]
        done = subprocess.run(
            ["java", "-cp", str(pgjdbc_jar()), str(CLIENT),
             f"jdbc:postgresql://127.0.0.1:{port}/veil?user=jdbc", "--metadata"],
            capture_output=True, text=True, timeout=300, check=True,
        )  # fmt: skip
    finally:
        server.stop()
    lines = done.stdout.splitlines()
    assert lines[0] == "== product PostgreSQL 16.0"
    tables = [line.split("\t")[2] for line in lines if line.startswith("veil\tmain\t")]
    assert {"lineitem", "orders", "region"} <= set(tables)
    start = lines.index("== columns")
    section = lines[start + 1 : lines.index("== primary keys")]
    columns = [line.split("\t") for line in section if line.startswith("veil\tmain\tregion\t")]
    assert [(c[3], c[4], c[5]) for c in columns] == [
        ("r_regionkey", "-5", "int8"),  # java.sql.Types.BIGINT
        ("r_name", "12", "varchar"),  # VARCHAR
        ("r_comment", "12", "varchar"),
    ]
    keys = lines.index("== primary keys")
    assert lines[keys + 1] == "== rows 0" and lines[-1] == "== rows 0"  # no keys, no indexes
