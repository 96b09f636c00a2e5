"""Veil's server functions give on every backend what the client computes itself."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from sqlglot import exp

from veil.backends import Backend, BackendError, connect, n_square_bytes, render
from veil.crypto import hom, search

pytestmark = pytest.mark.integration

GROUPS = [0, 1, 2, 1, 0, 2, 2, 1, 0, 3]
VALUES = [5, -7, 100, 2**40, 0, 3, None, 11, -1, None]


@pytest.fixture(scope="module")
def paillier() -> object:
    return hom.PaillierKey.from_seed(bytes(range(32)), bits=512)


@pytest.fixture
def backend(server_url: str) -> Iterator[Backend]:
    server = connect(server_url)
    yield server
    server.close()


def _ciphertexts(key: object, values: list[int | None]) -> pa.Array:
    present = key.encrypt_ints([v for v in values if v is not None])  # type: ignore[attr-defined]
    stream = iter(present)
    return pa.array([None if v is None else next(stream) for v in values], pa.binary())


def _load(backend: Backend, key: object) -> pa.Array:
    ciphertexts = _ciphertexts(key, VALUES)
    backend.bulk_load("t_h", pa.table({"g": pa.array(GROUPS, pa.int64()), "c": ciphertexts}))
    return ciphertexts


def _grouped_sums(backend: Backend, key: object) -> dict[int, bytes | None]:
    total = backend.hom_sum(exp.column("c", quoted=True), exp.Placeholder(this="1"))
    query = exp.select(exp.column("g", quoted=True), total).from_("t_h").group_by('"g"')
    rows = backend.execute(render(query, backend.dialect), [n_square_bytes(key.public.n_square)])  # type: ignore[attr-defined]
    return dict(zip(rows.column(0).to_pylist(), rows.column(1).to_pylist(), strict=True))


def test_hom_sum_per_group_equals_client_side_sum(backend: Backend, paillier: object) -> None:
    ciphertexts = _load(backend, paillier)
    sums = _grouped_sums(backend, paillier)
    n_square = paillier.public.n_square  # type: ignore[attr-defined]
    for group in set(GROUPS):
        members = pa.array(
            [c for g, c in zip(GROUPS, ciphertexts.to_pylist(), strict=True) if g == group],
            pa.binary(),
        )
        expected_values = [
            v for g, v in zip(GROUPS, VALUES, strict=True) if g == group and v is not None
        ]
        if not expected_values:
            assert sums[group] is None  # SQL: a SUM over only NULLs is NULL
            continue
        assert sums[group] == hom.sum_ciphertexts(members, n_square)
        assert paillier.decrypt_ints([sums[group]]) == [sum(expected_values)]  # type: ignore[attr-defined]


def test_hom_sum_over_no_rows_is_null(backend: Backend, paillier: object) -> None:
    _load(backend, paillier)
    total = backend.hom_sum(exp.column("c", quoted=True), exp.Placeholder(this="1"))
    query = exp.select(total).from_("t_h").where('"g" > 100')
    rows = backend.execute(
        render(query, backend.dialect), [n_square_bytes(paillier.public.n_square)]
    )  # type: ignore[attr-defined]
    assert rows.column(0).to_pylist() == [None]


def test_hom_sum_refuses_a_malformed_ciphertext(backend: Backend, paillier: object) -> None:
    backend.bulk_load(
        "t_h", pa.table({"g": pa.array([1], pa.int64()), "c": pa.array([b"\x01\x02"])})
    )
    total = backend.hom_sum(exp.column("c", quoted=True), exp.Placeholder(this="1"))
    with pytest.raises(BackendError):
        backend.execute(
            render(exp.select(total).from_("t_h"), backend.dialect),
            [n_square_bytes(paillier.public.n_square)],
        )  # type: ignore[attr-defined]


TEXTS = ["the quick brown fox", "Lazy dogs", None, "quick quick", "", "QUICK-silver", "foxes"]


@pytest.mark.parametrize("word", ["quick", "fox", "dogs", "absent"])
def test_search_match_equals_client_side_match(backend: Backend, word: str) -> None:
    scheme = search.Search(bytes(range(32)))
    ciphertexts = scheme.encrypt(pa.array(TEXTS, pa.string()))
    backend.bulk_load(
        "t_s", pa.table({"k": pa.array(range(len(TEXTS)), pa.int64()), "c": ciphertexts})
    )
    token = scheme.token(word)
    matched = backend.search_match(exp.column("c", quoted=True), exp.Placeholder(this="1"))
    query = exp.select(matched).from_("t_s").order_by('"k"')
    server = backend.execute(render(query, backend.dialect), [token]).column(0).to_pylist()
    client = search.search_match(ciphertexts, token).to_pylist()
    assert server == client
    assert server == [None if t is None else word in search.tokenize(t) for t in TEXTS]


def test_search_match_refuses_a_malformed_ciphertext(backend: Backend) -> None:
    token = search.Search(bytes(range(32))).token("word")
    backend.bulk_load("t_s", pa.table({"c": pa.array([b"\x01" + bytes(15)], pa.binary())}))
    matched = backend.search_match(exp.column("c", quoted=True), exp.Placeholder(this="1"))
    with pytest.raises(BackendError):
        backend.execute(render(exp.select(matched).from_("t_s"), backend.dialect), [token])


def test_hom_sum_refuses_mixing_keys(backend: Backend, paillier: object) -> None:
    _load(backend, paillier)
    other = hom.PaillierKey.from_seed(bytes(32), bits=512)
    total = backend.hom_sum(exp.column("c", quoted=True), exp.Placeholder(this="1"))
    query = render(exp.select(total).from_("t_h"), backend.dialect)
    with pytest.raises(BackendError):  # ciphertexts not below the other key's n^2, or wrong width
        backend.execute(query, [n_square_bytes(other.public.n_square // 2**40)])  # type: ignore[attr-defined]


WORDS = [2**63 - 1, 1, -(2**63), -5, 2**62, 2**62, None, 7]
WORD_GROUPS = [0, 0, 1, 1, 2, 2, 2, 3]


def test_wrapping_sum_is_the_sum_mod_2_64(backend: Backend) -> None:
    backend.bulk_load(
        "t_w",
        pa.table({"g": pa.array(WORD_GROUPS, pa.int64()), "w": pa.array(WORDS, pa.int64())}),
    )
    total = backend.wrapping_sum(exp.column("w", quoted=True))
    query = exp.select(exp.column("g", quoted=True), total).from_("t_w").group_by('"g"')
    sql = render(query, backend.dialect)
    if backend.dialect == "spark":  # an exact sum: ANSI mode fails a BIGINT SUM that wraps
        assert "AS DECIMAL(38, 0)" in sql.upper()
    else:
        assert "SUM(" not in sql.upper().replace("_SUM(", "")  # each backend has one
    rows = backend.execute(sql)
    found = dict(zip(rows.column(0).to_pylist(), rows.column(1).to_pylist(), strict=True))
    for group in set(WORD_GROUPS):
        present = [
            w for g, w in zip(WORD_GROUPS, WORDS, strict=True) if g == group and w is not None
        ]
        assert int(found[group]) % 2**64 == sum(present) % 2**64


@pytest.mark.postgres
@pytest.mark.parametrize("old", ["0.1", "0.2"])
def test_an_older_extension_is_updated_on_connect(postgres_cluster: object, old: str) -> None:
    """A database whose extension an earlier Veil created gets what this one adds.

    0.2 added the wrapping sum, 0.3 the onion layer and JOIN-ADJ functions.
    """
    cluster = postgres_cluster
    database = f"veil_old_extension_{old.replace('.', '_')}"
    cluster._admin(f"CREATE DATABASE {database}")  # type: ignore[attr-defined]
    cluster._admin(f"CREATE EXTENSION veil VERSION '{old}'", database)  # type: ignore[attr-defined]
    server = connect(cluster.url_for(database))  # type: ignore[attr-defined]
    try:
        assert server.has_wrapping_sum  # type: ignore[attr-defined]
        version = server.execute("SELECT extversion FROM pg_extension WHERE extname = 'veil'")
        assert version.column(0)[0].as_py() == "0.3"
        peeled = server.execute("SELECT veil_layer_xor_bytes($1, 7, NULL)", [bytes(32)])
        assert peeled.column(0).to_pylist() == [None]
    finally:
        server.close()


def test_registering_opens_no_default_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """The functions' types come from the connection: ``duckdb.list_type`` would open
    DuckDB's default in-memory database first, ~60 ms of a fresh process (issue 41)."""
    import duckdb

    from veil.backends import duckdb_functions

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("DuckDB's default database opened")

    monkeypatch.setattr(duckdb, "list_type", refuse)
    con = duckdb.connect()
    duckdb_functions.register(con)
    found = con.execute(
        "SELECT count(*) FROM duckdb_functions() WHERE function_name = 'veil_hom_sum'"
    ).fetchone()
    assert found == (1,)
