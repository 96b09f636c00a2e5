"""The onion and JOIN-ADJ server functions give on every backend what the client computes.

``veil_layer_xor_int`` / ``veil_layer_xor_bytes`` (key, row id, value) must equal
``RowRnd(key).decrypt`` (the DuckDB UDFs call it; the PostgreSQL extension has its
own AES-CTR in C), and ``veil_joinadj_rekey`` (token, ciphertext) must equal
``joinadj.rekey`` (dalek on the client, libsodium in PostgreSQL), byte for byte.
The upgrade of an older extension (0.1, 0.2) to 0.3 is checked in
tests/backends/test_server_functions.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

from veil.backends import Backend, BackendError, connect
from veil.crypto.joinadj import JoinAdj, rekey
from veil.crypto.rowrnd import RowRnd

RNG = np.random.default_rng(12)
ROWS = 300
LAYER_KEY = bytes(RNG.integers(0, 256, 32, dtype=np.uint8))
IDS = np.concatenate(
    [[0, 1, 2**63 - 1, -1, -(2**63)], RNG.integers(-(2**63), 2**63 - 1, ROWS - 5, np.int64)]
).astype(np.int64)
INTS = pa.array(
    [0, -1, 2**63 - 1, -(2**63), None]
    + [None if i % 7 == 0 else int(v) for i, v in enumerate(RNG.integers(-(2**63), 2**63 - 1, ROWS - 5))],
    pa.int64(),
)  # fmt: skip
# Lengths around the AES block (16) and the C extension's keystream chunk (4,096).
LENGTHS = [0, 1, 15, 16, 17, 4095, 4096, 4097, 10_000, *RNG.integers(0, 100, ROWS - 9)]
BLOBS = pa.array(
    [None if i % 11 == 5 else RNG.bytes(int(n)) for i, n in enumerate(LENGTHS)], pa.binary()
)


@pytest.fixture
def backend(server_url: str) -> Iterator[Backend]:
    server = connect(server_url)
    yield server
    server.close()


def _column(backend: Backend, sql: str, params: list[object]) -> pa.Array:
    return backend.execute(sql, params).column(0).combine_chunks()


def _load_layered(backend: Backend, key: bytes) -> None:
    """The plaintext columns under an RND layer, as the loader would store them."""
    layer = RowRnd(key)
    table = pa.table(
        {"id": IDS, "i": layer.encrypt(IDS, INTS), "b": layer.encrypt(IDS, BLOBS)}
    )  # fmt: skip
    backend.bulk_load("t_l", table)


@pytest.mark.parametrize("values", [INTS, BLOBS], ids=["int", "bytes"])
def test_layer_xor_equals_client_side_rowrnd(backend: Backend, values: pa.Array) -> None:
    function = "veil_layer_xor_int" if pa.types.is_integer(values.type) else "veil_layer_xor_bytes"
    backend.bulk_load("t_x", pa.table({"n": np.arange(ROWS), "id": IDS, "v": values}))
    sql = f'SELECT {function}($1, "id", "v") FROM "t_x" ORDER BY "n"'
    server = _column(backend, sql, [LAYER_KEY])
    assert server.to_pylist() == RowRnd(LAYER_KEY).decrypt(IDS, values).to_pylist()
    assert server.null_count == values.null_count


def test_peeling_restores_the_plaintext_and_twice_restores_the_layer(backend: Backend) -> None:
    _load_layered(backend, LAYER_KEY)
    before = backend.execute('SELECT "i", "b" FROM "t_l" ORDER BY "id"')
    peel = (
        'UPDATE "t_l" SET "i" = veil_layer_xor_int($1, "id", "i"), '
        '"b" = veil_layer_xor_bytes($1, "id", "b")'
    )
    order = np.argsort(IDS, kind="stable")
    backend.execute(peel, [LAYER_KEY])
    peeled = backend.execute('SELECT "i", "b" FROM "t_l" ORDER BY "id"')
    assert peeled.column(0).to_pylist() == INTS.take(order).to_pylist()
    assert peeled.column(1).to_pylist() == BLOBS.take(order).to_pylist()
    backend.execute(peel, [LAYER_KEY])
    assert backend.execute('SELECT "i", "b" FROM "t_l" ORDER BY "id"').equals(before)


def test_layer_functions_give_null_for_null_and_refuse_a_short_key(backend: Backend) -> None:
    backend.bulk_load("t_x", pa.table({"id": pa.array([1, None], pa.int64())}))
    sql = 'SELECT veil_layer_xor_int($1, "id", NULL), veil_layer_xor_bytes($1, "id", $2) FROM "t_x"'
    rows = backend.execute(sql + ' ORDER BY "id" NULLS LAST', [LAYER_KEY, b"abc"])
    assert rows.column(0).to_pylist() == [None, None]
    assert rows.column(1).to_pylist()[1] is None  # a NULL row id
    with pytest.raises(BackendError):
        backend.execute('SELECT veil_layer_xor_int($1, "id", 5) FROM "t_x"', [bytes(16)])


JOIN_VALUES = [
    pa.array([0, 1, -1, 2**63 - 1, -(2**63), None, 1] + [int(v) for v in IDS[:50]], pa.int64()),
    pa.array(["", "alpha", None, "alpha", "x" * 5000, "naïve"], pa.string()),
]


@pytest.mark.parametrize("values", JOIN_VALUES, ids=["int", "string"])
def test_joinadj_rekey_equals_client_side_rekey(backend: Backend, values: pa.Array) -> None:
    a, b = JoinAdj(bytes(range(32))), JoinAdj(bytes(range(1, 33)))
    stored = a.encrypt(values)
    backend.bulk_load("t_j", pa.table({"n": np.arange(len(values)), "c": stored}))
    token = a.token_to(b)
    server = _column(backend, 'SELECT veil_joinadj_rekey($1, "c") FROM "t_j" ORDER BY "n"', [token])
    assert server.to_pylist() == rekey(token, stored).to_pylist()
    assert server.to_pylist() == b.encrypt(values).to_pylist()


def test_joinadj_rekey_refuses_bad_tokens_and_ciphertexts(backend: Backend) -> None:
    a, b = JoinAdj(bytes(range(32))), JoinAdj(bytes(range(1, 33)))
    good, token = a.encrypt_one(5), a.token_to(b)
    sql = "SELECT veil_joinadj_rekey($1, $2)"
    assert backend.execute(sql, [token, good]).column(0).to_pylist() == [b.encrypt_one(5)]
    null = backend.execute("SELECT veil_joinadj_rekey($1, NULL)", [token])
    assert null.column(0).to_pylist() == [None]
    order = b"\x01" + bytes.fromhex("edd3f55c1a631258d69cf7a2def9de14" + "00" * 15 + "10")
    for bad_token in [token[:32], b"\x02" + token[1:], b"\x01" + bytes(32), order]:
        with pytest.raises(BackendError):
            backend.execute(sql, [bad_token, good])
    for bad in [good[:32], b"\x00" + good[1:], b"\x01" + b"\xff" * 32, b"\x01" + bytes(32)]:
        with pytest.raises(BackendError):
            backend.execute(sql, [token, bad])
