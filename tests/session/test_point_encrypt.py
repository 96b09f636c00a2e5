"""A few rows' encryption, the row-bound columns in one native call, equals a call per
column (``veil.ciphers.encrypt``, issue 41), on a loaded table's real design."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from veil.ciphers import encrypt
from veil.load.loader import load
from veil.session import dml
from veil.session.session import Session

pytestmark = pytest.mark.integration

WORKLOAD = [  # ``veil bench point``'s: most columns row-bound RND
    "SELECT * FROM orders WHERE o_orderkey = 1",
    "SELECT count(*) FROM orders WHERE o_custkey = 1",
    "UPDATE orders SET o_comment = 'x' WHERE o_orderkey = 1",
]


@pytest.fixture(scope="module")
def session(tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    root = tmp_path_factory.mktemp("point_encrypt")
    source = root / "src"
    source.mkdir()
    (source / "orders.parquet").symlink_to(tpch_dir / "orders.parquet")
    url = f"duckdb://{root / 'veil.duckdb'}"
    load(str(source), url, str(root / "client"), WORKLOAD, progress=lambda _: None)
    made = Session(root / "client")
    yield made
    made.close()


def _with_nulls(rows: pa.Table) -> pa.Table:
    """``rows`` with every other value of each column but the key NULL."""
    columns = [
        c
        if name == "o_orderkey"
        else pa.array([v if i % 2 == 0 else None for i, v in enumerate(c.to_pylist())], c.type)
        for name, c in zip(rows.column_names, rows.columns, strict=True)
    ]
    return pa.table(columns, names=rows.column_names)


def test_together_equals_a_call_per_column(
    session: Session, tpch_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = session.design.table("orders")
    rows = pq.read_table(tpch_dir / "orders.parquet").slice(0, 80)
    rows = rows.rename_columns([c.name for c in table.columns])
    encryptor = dml.encryptor(session, table)
    assert sum(e.row_bound for e in table.encryptions) >= 2
    for batch in (rows.slice(0, 1), rows.slice(5, 3), _with_nulls(rows.slice(10, 6)), rows):
        together = encryptor.encrypt(batch, 1000)
        with monkeypatch.context() as alone:
            alone.setattr(encrypt, "_SEALED_TOGETHER", 0)
            apart = encryptor.encrypt(batch, 1000)
        assert together.schema == apart.schema
        assert together.equals(apart)


def test_unwritten_columns_are_left_out(session: Session, tpch_dir: Path) -> None:
    table = session.design.table("orders")
    rows = pq.read_table(tpch_dir / "orders.parquet").slice(0, 3)
    rows = rows.rename_columns([c.name for c in table.columns])
    kept = dml.unchanged_columns(table, {c.name for c in table.columns} - {"o_comment"})
    assert kept  # the key's DET, at least
    encryptor = dml.encryptor(session, table)
    whole = encryptor.encrypt(rows, 500)
    written = encryptor.encrypt(rows, 500, unwritten=kept)
    assert written.column_names == [c for c in whole.column_names if c not in kept]
    assert written.equals(whole.drop_columns(kept))
