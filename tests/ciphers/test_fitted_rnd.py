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


@pytest.mark.parametrize("rows", [9, 200])  # one native call for all columns; a call each
def test_fitted_values_move_to_new_ids_as_stored(rows: int) -> None:
    """A point UPDATE carries a fitted copy's stored values to new row ids without
    decrypting them (``Resealed``): each is what encrypting its value under the new id
    gives, inside the loaded range or beyond it, NULL or not."""
    from veil.ciphers.encrypt import _resealed

    bits, low, fit = 25, 1000, 10
    cipher = FittedRowBound(RowRnd(bytes(32), column="c"), bits=bits, low=low, fit=fit)
    pick = random.Random(rows)
    choices = [low, low + 1023, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1, low - 1, low + 1024, None]
    values = pa.array([pick.choice(choices) for _ in range(rows)], pa.int64())
    old_ids = np.arange(50, 50 + rows, dtype=np.int64)
    new_ids = old_ids + 10_000
    stored = cipher.encrypt_rows(old_ids, values)
    moved = _resealed(old_ids, new_ids, [("c", cipher, stored)])["c"]
    assert moved.to_pylist() == cipher.encrypt_rows(new_ids, values).to_pylist()
    assert cipher.decrypt_rows(new_ids, moved).to_pylist() == values.to_pylist()


@pytest.mark.parametrize("kind", [pa.int64(), pa.int32()])
def test_a_few_values_open_as_many_do(kind: pa.DataType) -> None:
    """A point statement's few stored values (issue 41: numpy, no Arrow kernels) open to
    what the kernels give a whole column, NULLs, slices and a 32-bit server column too."""
    bits, low, fit = 25, 1000, 12
    cipher = FittedRowBound(RowRnd(bytes(32), column="c"), bits=bits, low=low, fit=fit)
    pick = random.Random(41)
    choices = [low, low + 7, low + 2**fit - 5, low - 1, 2 ** (bits - 1) - 1, None]
    values = pa.array([pick.choice(choices) for _ in range(200)], pa.int64())
    ids = np.arange(300, 500, dtype=np.int64)
    stored = cipher.encrypt_rows(ids, values).cast(kind)
    assert cipher.decrypt_rows(ids, stored).to_pylist() == values.to_pylist()
    for start in range(0, 200, 9):
        part = cipher.decrypt_rows(ids[start : start + 9], stored.slice(start, 9))
        assert part.type == pa.int64()
        assert part.to_pylist() == values.slice(start, 9).to_pylist()


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


POINT_READ = "SELECT * FROM sales WHERE s_id = 3"  # s_id DET: UPDATEs find rows by it


@pytest.fixture(scope="module")
def greedy_fitted(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    """``SALES`` loaded on DuckDB under the greedy design of a fetch and a point UPDATE
    (no sums: a table with ASHE words decrypts whole rows to update them), its RND
    numbers fitted (``packed``: DuckDB bit-packs integers), and plain DuckDB beside it."""
    from tests.ciphers.test_narrow_rnd import QUERIES

    root = tmp_path_factory.mktemp("greedy-fitted")
    (root / "source").mkdir()
    plain = duckdb.connect()
    plain.execute(f"CREATE TABLE sales AS {SALES}")
    plain.table("sales").write_parquet(str(root / "source" / "sales.parquet"))
    load(str(root / "source"), f"duckdb:///{root / 'veil.duckdb'}", str(root / "client"),
         [QUERIES[0], POINT_READ], progress=lambda _: None)  # fmt: skip
    session = Session(root / "client")
    yield session, plain
    session.close()
    plain.close()


def test_greedy_copies_fitted_where_packed_and_point_updates_carry_them(
    greedy_fitted: tuple[Session, duckdb.DuckDBPyConnection], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workload design's RND numbers fitted to the loaded values: every later value
    works, and a point UPDATE carries them to the row's new id as stored (``Resealed``),
    in the loaded range or beyond it."""
    from tests.support.oracle import check_query
    from veil.ciphers import encrypt

    session, plain = greedy_fitted
    table = session.design.table("sales")
    fits = {e.source: e.params.get(FIT_PARAM) for e in table.encryptions if e.scheme == RND}
    assert fits["s_delta"] == [-100, 10] and fits["s_price"] is not None
    carried: list[set[str]] = []
    original = encrypt.TableEncryptor.encrypt

    def spy(self: object, plain_rows: object, first_id: int, **kwargs: object) -> object:
        resealed = kwargs.get("resealed")
        carried.append(set(getattr(resealed, "columns", {})))
        return original(self, plain_rows, first_id, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(encrypt.TableEncryptor, "encrypt", spy)
    check_boundaries(session, plain)  # far beyond the loaded ranges, both ends
    for n, key in enumerate([3, 9000, 9001, 3, 9002, 40, 3]):
        params = [n % 2 == 0, key]
        session.run("UPDATE sales SET s_flag = ? WHERE s_id = ?", params)
        plain.execute("UPDATE sales SET s_flag = ? WHERE s_id = ?", params)
    fitted = {e.name for e in table.encryptions if e.params.get(FIT_PARAM) is not None}
    assert any(fitted & c for c in carried[-5:]), carried
    check_query(session, plain, "SELECT * FROM sales ORDER BY s_id")
