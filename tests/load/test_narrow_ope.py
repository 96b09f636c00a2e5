"""Narrow OPE ranges (``veil.load.narrow_ope``): int64 OPE columns in ``bits + 16`` bits.

On DuckDB an OPE column of a DECIMAL(7,2) (25-bit plaintexts) and one of an
INTEGER (32 bits) are encrypted into ``bits + 16``-bit ciphertexts instead of
``bits + 31``; ranges, BETWEEN, ORDER BY, MIN/MAX and writes of the types'
extreme values must give plaintext DuckDB's answers. PostgreSQL keeps the
default range. Which scopes narrow: ``choose`` on designs made by hand.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.support.oracle import check_query, check_writes, load_tables
from veil.ciphers.columns import BYTES_FORM, OPE_CIPHER_BITS
from veil.design.model import OPE, Column, Encryption, PhysicalDesign, TableDesign
from veil.load import narrow_ope
from veil.session.session import Session

SALES = (
    "SELECT i AS s_id, CAST(((i * 7919) % 2000001 - 1000000) / 100 AS DECIMAL(7, 2)) AS s_paid, "
    "CAST((i * 104729) % 100000 AS INTEGER) AS s_units FROM range(40000) t(i)"
)
QUERIES = [
    "SELECT count(*) FROM sales WHERE s_paid > 1234.56",
    "SELECT count(*) FROM sales WHERE s_paid BETWEEN -50.25 AND 75.5",
    "SELECT s_id, s_paid FROM sales WHERE s_units < 40 ORDER BY s_units, s_id",
    "SELECT min(s_paid), max(s_paid), min(s_units), max(s_units) FROM sales",
    "SELECT s_id FROM sales ORDER BY s_paid DESC, s_id LIMIT 5",
    "SELECT count(*) FROM sales WHERE s_units >= 99990 OR s_paid <= -9999.5",
]
STATEMENTS = [
    "INSERT INTO sales VALUES (90000, 99999.99, 2147483647), (90001, -99999.99, -2147483648), "
    "(90002, NULL, NULL), (90003, 0.01, 0)",
    "UPDATE sales SET s_paid = -99999.98, s_units = 2147483646 WHERE s_id = 17",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(
        request, tmp_path_factory.mktemp("narrow_ope"), {"sales": SALES}, QUERIES
    )
    yield session, plain
    session.close()


def test_ope_columns_take_the_narrow_range_on_duckdb(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, _ = pair
    table = session.design.table("sales")
    for source, bits in (("s_paid", 25), ("s_units", 32)):
        enc = table.find(source, OPE)
        assert enc is not None
        if session.backend.dialect != "duckdb":
            assert OPE_CIPHER_BITS not in enc.params
            continue
        assert enc.params[OPE_CIPHER_BITS] == bits + 16
        stored = session.backend.execute(
            f'SELECT min("{enc.name}"), max("{enc.name}") FROM "{table.server_name}"'
        )
        assert 0 <= stored.column(0)[0].as_py() <= stored.column(1)[0].as_py() < 2 ** (bits + 16)


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_match_plaintext(pair: tuple[Session, duckdb.DuckDBPyConnection], sql: str) -> None:
    session, plain = pair
    check_query(session, plain, sql)


def test_writes_of_the_types_extreme_values(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    check_writes(*pair, STATEMENTS, QUERIES)


def _design(*tables: TableDesign) -> PhysicalDesign:
    return PhysicalDesign(key_fingerprint="", tables={t.name: t for t in tables})


def _table(name: str, *encryptions: Encryption) -> TableDesign:
    columns = [Column(e.source, e.type) for e in encryptions]
    return TableDesign(
        name=name, server_name=f"t_{name}", row_id="r", columns=columns, encryptions=[*encryptions]
    )


def _ope(source: str, scope: str, sql_type: str = "INTEGER", **params: object) -> Encryption:
    bits = params.pop("bits", 32)
    return Encryption(
        name=f"c_{source}",
        source=source,
        scheme=OPE,
        type=sql_type,
        key_scope=scope,
        params={"bits": bits, **params},
    )


def test_choose_narrows_whole_scopes_of_int64_ope_only() -> None:
    shared_a, shared_b = _ope("a", "ope:shared"), _ope("b", "ope:shared")
    mixed_a, mixed_b = _ope("c", "ope:mixed"), _ope("d", "ope:mixed", bits=25)
    few = _ope("e", "ope:few", form=BYTES_FORM)
    wide = _ope("f", "ope:wide", "BIGINT", bits=64)
    onion = _ope("g", "ope:onion", outer="RND")
    fresh = _design(_table("t", shared_a, shared_b, mixed_a, mixed_b, few, wide, onion))
    narrow_ope.choose(fresh, _design())
    assert shared_a.params[OPE_CIPHER_BITS] == shared_b.params[OPE_CIPHER_BITS] == 48
    for unchanged in (mixed_a, mixed_b, few, wide, onion):
        assert OPE_CIPHER_BITS not in unchanged.params


def test_a_scope_loaded_earlier_keeps_its_range() -> None:
    old_wide, old_narrow = _ope("a", "ope:wide"), _ope("b", "ope:narrow", cipher_bits=48)
    loaded = _design(_table("old", old_wide, old_narrow))
    new_wide, new_narrow = _ope("x", "ope:wide"), _ope("y", "ope:narrow")
    fresh = _design(_table("new", new_wide, new_narrow))
    narrow_ope.choose(fresh, loaded)
    assert OPE_CIPHER_BITS not in new_wide.params
    assert new_narrow.params[OPE_CIPHER_BITS] == 48
