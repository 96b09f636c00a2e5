"""DuckDB's bulk insert reads a load's batches as one stream per schema: rows in order,
the producer's own error, batches whose columns come in another order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from veil.backends import connect


def test_many_batches_keep_their_order(tmp_path: Path) -> None:
    backend = connect(f"duckdb:///{tmp_path / 'db.duckdb'}")
    batches = (pa.record_batch({"id": pa.array(range(n * 997, (n + 1) * 997))}) for n in range(60))
    assert backend.bulk_load("t", batches) == 60 * 997
    ids = backend.execute("SELECT id FROM t ORDER BY rowid").column(0).to_pylist()
    assert ids == list(range(60 * 997))
    backend.close()


def test_a_producer_error_comes_out_as_itself_and_leaves_no_table(tmp_path: Path) -> None:
    backend = connect(f"duckdb:///{tmp_path / 'db.duckdb'}")

    def failing() -> Iterator[pa.RecordBatch]:
        for n in range(5):
            yield pa.record_batch({"id": pa.array([n])})
            if n == 2:
                raise ValueError("batch 3 is refused")

    with pytest.raises(ValueError, match="batch 3 is refused"):
        backend.bulk_load("t", failing())
    assert backend.table_names() == []
    backend.close()


def test_batches_of_another_column_order_are_inserted_by_name(tmp_path: Path) -> None:
    backend = connect(f"duckdb:///{tmp_path / 'db.duckdb'}")
    batches = [
        pa.record_batch({"a": [1, 2], "b": ["p", "q"]}),
        pa.record_batch({"b": ["z"], "a": [3]}),
        pa.record_batch({"a": [4], "b": ["w"]}),
    ]
    assert backend.bulk_load("t", iter(batches)) == 4
    rows = backend.execute("SELECT a, b FROM t ORDER BY rowid").to_pylist()
    assert rows == [{"a": 1, "b": "p"}, {"a": 2, "b": "q"}, {"a": 3, "b": "z"}, {"a": 4, "b": "w"}]
    assert backend.append("t", pa.table({"b": ["n"], "a": [5]})) == 1
    backend.close()
