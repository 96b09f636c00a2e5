"""A number's RND copy fitted to its loaded values (issue 40: TPC-DS onion space).

An onion load's copies take the bits of their loaded values' span, not their
type's; every value the type admits must still round-trip, written after the
load too (in the type's width, at or above ``2**fit``), and a value beyond the
type is refused, never cut.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from tests.ciphers.test_narrow_rnd import SALES, TYPES, check_boundaries
from tests.support.oracle import server_url
from veil.ciphers.fitted_rnd import FIT_PARAM, FittedRowBound, fitted_range
from veil.crypto.rowrnd import RowRnd
from veil.design.domains import rnd_bits, type_domain
from veil.design.model import RND, RND_BITS
from veil.encoding import SqlType
from veil.errors import DomainError
from veil.load.loader import load
from veil.session.session import Session


@pytest.mark.parametrize("type_name", TYPES)
def test_every_value_of_the_type_round_trips(type_name: str) -> None:
    bits = rnd_bits(SqlType(type_name))
    domain = type_domain(SqlType(type_name))
    assert bits is not None and domain is not None
    low, high = domain
    pick = random.Random(type_name)
    for _ in range(20):
        a, b = sorted(pick.randint(low, high) for _ in range(2))
        b = min(b, a + pick.choice([0, 1, 5, 1000, 2**20]))
        fit = fitted_range(a, b, bits)
        if fit is None:
            continue
        cipher = FittedRowBound(RowRnd(bytes(32), column="c"), bits=bits, low=fit[0], fit=fit[1])
        inside = [a, b, (a + b) // 2]
        values = pa.array([*inside, low, high, 0, None, a - 1, b + 1], pa.int64())
        values = pa.array(
            [v if v is None or low <= v <= high else None for v in values.to_pylist()]
        )
        ids = np.arange(7, 7 + len(values), dtype=np.int64)
        stored = cipher.encrypt_rows(ids, values)
        assert stored.null_count == values.null_count
        assert all(0 <= s < 2 ** fit[1] for s in stored.to_pylist()[: len(inside)])
        kept = [s for s in stored.to_pylist() if s is not None]
        assert all(0 <= s < 2 ** fit[1] + 2**bits for s in kept)
        assert cipher.decrypt_rows(ids, stored).to_pylist() == values.to_pylist()
        part = cipher.decrypt_rows(ids[2:6], stored.slice(2, 4))
        assert part.to_pylist() == values.slice(2, 4).to_pylist()


def test_a_fit_that_saves_nothing_is_not_made() -> None:
    assert fitted_range(0, 2**30, 32) is None
    assert fitted_range(-5, 5, 25) == [-5, 6]
    assert fitted_range(7, 7, 32) == [7, 3]


def test_a_value_beyond_the_type_is_refused() -> None:
    cipher = FittedRowBound(RowRnd(bytes(32), column="c"), bits=25, low=0, fit=8)
    with pytest.raises(DomainError, match="25-bit"):
        cipher.encrypt_rows(np.arange(2, dtype=np.int64), pa.array([1, 2**24], pa.int64()))


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def onions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    """An onion load (no workload) of ``SALES`` and plain DuckDB beside it."""
    root = tmp_path_factory.mktemp("fitted-rnd")
    (root / "source").mkdir()
    plain = duckdb.connect()
    plain.execute(f"CREATE TABLE sales AS {SALES}")
    plain.table("sales").write_parquet(str(root / "source" / "sales.parquet"))
    url = server_url(request, root, "veil_test_fitted_rnd")
    load(str(root / "source"), url, str(root / "client"), progress=lambda _: None)
    session = Session(root / "client")
    yield session, plain
    session.close()
    plain.close()


def test_onion_copies_are_fitted_and_every_later_value_works(
    onions: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = onions
    table = session.design.table("sales")
    copies = [e for e in table.encryptions if e.scheme == RND and RND_BITS in e.params]
    if session.backend.compresses_repeated_bytes:
        fits = {e.source: e.params.get(FIT_PARAM) for e in copies}
        assert fits["s_delta"] == [-100, 10] and fits["s_store"] == [0, 7]
    else:
        assert copies == []  # PostgreSQL: no copies, DET onions fetch the numbers
    check_boundaries(session, plain)
