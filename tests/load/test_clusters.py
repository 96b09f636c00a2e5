"""Clustered loads (``veil.load.clusters``): a GROUP BY's rows get consecutive ids.

The readings of the ASHE tests, loaded with a workload that groups by ``g``
(four values), on both backends: the loader orders the rows by a keyed hash
of ``g``, so each group's ids form one run, and every sum stays exact, also
after writes that add rows at the end.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

import veil.load.loader as loader
from tests.exec.test_ashe_sums import QUERIES, WIDE
from tests.support.oracle import check_query, server_url
from veil.crypto.keys import MasterKey
from veil.design.model import DET, OPE, AsheSums, Column, Encryption, TableDesign
from veil.load import clusters
from veil.load.loader import load
from veil.session.session import Session


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("clustered-readings")
    duckdb.sql(WIDE).write_parquet(str(folder / "readings.parquet"))
    return folder


@pytest.fixture(scope="module")
def plain(source: Path, session: Session) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE readings AS SELECT * FROM '{source / 'readings.parquet'}'")
    return con


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def session(
    request: pytest.FixtureRequest, source: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    root = tmp_path_factory.mktemp("clusters")
    url = server_url(request, root, "veil_sql_clusters")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clusters, "MIN_ROWS_PER_GROUP", 100)  # 3,000 rows, 4 groups
        patch.setattr(loader, "BATCH_ROWS", 700)  # the order holds across load batches
        load(str(source), url, str(root / "client"), QUERIES, progress=lambda _: None)
    opened = Session(root / "client")
    yield opened
    opened.close()


def _runs(session: Session) -> int:
    """How many runs of equal DET ``g`` the rows make in row-id order."""
    table = session.design.table("readings")
    g = table.find("g", DET)
    assert g is not None
    sql = f'SELECT "{g.name}" FROM "{table.server_name}" ORDER BY "{table.row_id}"'
    values = session.backend.execute(sql).column(0).to_pylist()
    return 1 + sum(1 for a, b in itertools.pairwise(values) if a != b)


def test_the_loader_clusters_by_the_grouped_key(session: Session) -> None:
    table = session.design.table("readings")
    assert table.cluster_by == ["g"]
    assert _runs(session) == 4  # one run of ids per value of g


@pytest.mark.parametrize("sql", QUERIES)
def test_sums_over_clustered_rows_match_plaintext(
    session: Session, plain: duckdb.DuckDBPyConnection, sql: str
) -> None:
    check_query(session, plain, sql)


def test_rows_follow_the_most_range_filtered_column_within_each_cluster(
    session: Session,
) -> None:
    """The workload filters ``b`` by ranges three times, ``id`` once: ``b`` orders the rows."""
    table = session.design.table("readings")
    assert table.sort_candidates[:2] == ["b", "id"]
    if not session.backend.skips_row_blocks:  # PostgreSQL: nothing to skip, source order
        assert table.sort_by == ""
        return
    assert table.sort_by == "b"
    g, b = table.find("g", DET), table.find("b", OPE)
    assert g is not None and b is not None
    steps_down = f"""
        SELECT count(*) FROM (
            SELECT "{b.name}" < lag("{b.name}") OVER (PARTITION BY "{g.name}"
                                                      ORDER BY "{table.row_id}") AS down
            FROM "{table.server_name}") AS steps WHERE down"""
    assert session.backend.execute(steps_down).column(0).to_pylist() == [0]


def test_a_wrapped_ope_never_orders_rows() -> None:
    """Before its onion is peeled, the server must not learn the column's order from the rows."""
    table = TableDesign(
        name="t",
        server_name="t_x",
        row_id="c_id",
        columns=[Column("d", "DATE"), Column("e", "DATE")],
        encryptions=[
            Encryption("c_d", "d", OPE, "DATE", "ope:d", {"outer": "RND"}),
            Encryption("c_e", "e", OPE, "DATE", "ope:e"),
        ],
        sort_candidates=["d", "e"],
    )
    clusters.choose(table, 1_000_000)
    assert table.sort_by == "e"
    table.encryptions[1].params["outer"] = "RND"
    clusters.choose(table, 1_000_000)
    assert table.sort_by == ""
    assert clusters.order_by(table, MasterKey.generate()) is None


def test_sums_stay_exact_after_writes(session: Session, plain: duckdb.DuckDBPyConnection) -> None:
    statements = [
        "INSERT INTO readings VALUES (7000, 'odd', 1.25, 3, 7, 12), (7001, 'new', NULL, -4, 1, 5)",
        "UPDATE readings SET b = b + 1 WHERE id % 300 = 3",
        "DELETE FROM readings WHERE id = 10",
    ]
    for statement in statements:
        plain.execute(statement)
        session.run(statement)
    assert _runs(session) > 4  # written rows sit at the end, outside the runs
    for sql in QUERIES:
        check_query(session, plain, sql)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (1_000_000, ["a", "b"]),  # 6 groups beat 50
        (20_000, []),  # 6 groups of 3,333 rows: too small to pay
    ],
)
def test_the_candidate_with_fewest_groups_wins(rows: int, expected: list[str]) -> None:
    counts = {"a": 2, "b": 3, "k": 50}
    table = TableDesign(
        name="t",
        server_name="t_x",
        row_id="c_id",
        columns=[Column(name, "INTEGER") for name in [*counts, "u"]],
        encryptions=[
            Encryption(
                name=f"c_{n}",
                source=n,
                scheme=DET,
                type="INTEGER",
                key_scope=f"det:{n}",
                params={"distinct": d},
            )
            for n, d in counts.items()
        ]
        + [Encryption(name="c_u", source="u", scheme=DET, type="INTEGER", key_scope="det:u")],
        sums=AsheSums(sources=["v"], types=["INTEGER"], columns=[["c_w"]], key_scope="ashe:s"),
        cluster_candidates=[["k"], ["a", "b"], ["u"]],  # u: no distinct count, never chosen
    )
    clusters.choose(table, rows)
    assert table.cluster_by == expected
