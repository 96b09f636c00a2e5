"""The Spark warehouse: a local path or a Hadoop URL, one writer at a time, no dirty reads.

Hadoop URLs run through Hadoop's own ``FileSystem`` client in Spark's JVM; ``file://``
(Hadoop's local file system) is the scheme this machine can test, the code path is the
one ``hdfs://`` or ``s3a://`` take.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import veil.backends.spark_warehouse as warehouse_module
from veil.backends import BackendError, connect
from veil.backends.spark import SparkBackend
from veil.backends.spark_files import HadoopFiles, LocalFiles
from veil.backends.spark_warehouse import LOCK, RETIRED, Warehouse
from veil.load.loader import load
from veil.session.session import Session
from veil_dev.servers.spark import local_url

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(params=["path", "file-url"])
def url(request: pytest.FixtureRequest, spark_local: None, tmp_path: Path) -> str:
    place = tmp_path / "warehouse"
    location = str(place) if request.param == "path" else f"file://{place}"
    return local_url(location)  # type: ignore[arg-type]


@pytest.fixture
def two(url: str) -> Iterator[tuple[SparkBackend, SparkBackend]]:
    first, second = connect(url), connect(url)
    assert isinstance(first, SparkBackend) and isinstance(second, SparkBackend)
    yield first, second
    first.close()
    second.close()


def _rows(backend: SparkBackend, table: str = "t") -> list[int]:
    return sorted(backend.execute(f"SELECT k FROM {table}").column(0).to_pylist())


def _table(keys: list[int]) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([b"x"] * len(keys))})


def test_files_live_where_the_url_says(two: tuple[SparkBackend, SparkBackend], url: str) -> None:
    first, _ = two
    first.bulk_load("t", _table([1, 2, 3]))
    files = first._warehouse.files
    assert isinstance(files, HadoopFiles if "file://" in url else LocalFiles)
    root = Path(url.split("warehouse=", 1)[1].removeprefix("file://"))
    assert (root / "t" / "CURRENT").exists()
    assert list((root / "t").glob("v*/*.parquet"))
    assert first.table_names() == ["t"] and first.table_bytes("t") > 0


def test_a_transaction_is_seen_by_others_only_once_committed(
    two: tuple[SparkBackend, SparkBackend],
) -> None:
    first, second = two
    first.bulk_load("t", _table([1, 2]))
    with first.transaction():
        first.append("t", _table([3]))
        first.execute("UPDATE t SET v = X'79' WHERE k = 1")
        first.append("t", _table([4]))
        assert _rows(first) == [1, 2, 3, 4]  # its own writes
        # another client reads without waiting for the lock, and sees the committed rows
        assert _rows(second) == [1, 2]
    assert _rows(second) == [1, 2, 3, 4]
    with pytest.raises(RuntimeError), first.transaction():
        first.append("t", _table([5]))
        first.execute("DELETE FROM t WHERE k = 2")
        raise RuntimeError("the client fails mid-transaction")
    assert _rows(first) == _rows(second) == [1, 2, 3, 4]


def test_drop_and_rename_roll_back(two: tuple[SparkBackend, SparkBackend]) -> None:
    first, second = two
    first.bulk_load("t", _table([1]))
    with pytest.raises(RuntimeError), first.transaction():
        first.rename_table("t", "u")
        first.drop_table("u")
        raise RuntimeError("undo both")
    assert second.table_names() == ["t"] and _rows(second) == [1]
    first.rename_table("t", "u")
    assert second.table_names() == ["u"] and _rows(second, "u") == [1]
    first.drop_table("u")
    assert second.table_names() == []


def test_writers_take_turns(two: tuple[SparkBackend, SparkBackend]) -> None:
    """A second writer waits for the first's commit, then sees what it wrote."""
    first, second = two
    first.bulk_load("t", _table([1]))
    entered, seen = threading.Event(), []

    def later_writer() -> None:
        with second.transaction():
            entered.set()
            seen.append(_rows(second))
            second.append("t", _table([3]))

    with first.transaction():
        first.append("t", _table([2]))
        thread = threading.Thread(target=later_writer)
        thread.start()
        assert not entered.wait(1.0)  # blocked on the lock while the first writes
    thread.join(60)
    assert seen == [[1, 2]] and _rows(first) == [1, 2, 3]


def test_a_replaced_version_outlives_its_readers_then_goes(
    two: tuple[SparkBackend, SparkBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two
    first.bulk_load("t", _table([1, 2]))
    assert _rows(second) == [1, 2]  # second now has a view over the first version
    first.execute("DELETE FROM t WHERE k = 1")
    files = first._warehouse.files
    table_dir = files.join(files.root, "t")
    versions = [n for n, is_dir, _ in files.list(table_dir) if is_dir and n.startswith("v")]
    assert len(versions) == 2  # the old one stays (marked) for readers still scanning it
    assert any(files.exists(files.join(table_dir, v, RETIRED)) for v in versions)
    monkeypatch.setattr(warehouse_module, "GRACE_SECONDS", 0.0)
    first.execute("DELETE FROM t WHERE k = 5")
    versions = [n for n, is_dir, _ in files.list(table_dir) if is_dir and n.startswith("v")]
    assert len(versions) == 1 and _rows(second) == [2]


def test_a_dead_writers_lock_is_broken_after_its_lease(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = connect(url)
    assert isinstance(backend, SparkBackend)
    files = backend._warehouse.files
    lock = files.join(files.root, LOCK)
    if isinstance(files, LocalFiles):
        # flock: the system frees a dead process's lock; a stale file alone blocks nobody
        Path(lock).write_text("someone 1 0\n")
        backend.bulk_load("t", _table([1]))
    else:
        files.create_exclusive(lock, "elsewhere 4242 0\n")
        old = time.time() - 3600
        os.utime(lock.removeprefix("file://"), (old, old))
        monkeypatch.setattr(warehouse_module, "_LOCK_WAIT_SECONDS", 30.0)
        backend.bulk_load("t", _table([1]))  # the lease ran out: broken, then taken
        assert not files.exists(lock)  # and released
    assert _rows(backend) == [1]
    backend.close()


def test_a_held_lock_times_out_with_a_clear_error(
    two: tuple[SparkBackend, SparkBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two
    monkeypatch.setattr(warehouse_module, "_LOCK_WAIT_SECONDS", 0.3)
    with first.transaction(), pytest.raises(BackendError, match="another Veil client"):
        second.bulk_load("t", _table([1]))


def test_a_warehouse_changes_only_in_transactions(url: str) -> None:
    backend = connect(url)
    assert isinstance(backend, SparkBackend)
    with pytest.raises(BackendError, match="inside a transaction"):
        Warehouse(backend._warehouse.files).new_version("t")
    backend.close()


def test_sql_over_a_hadoop_url(spark_local: None, tmp_path: Path) -> None:
    """Load and query through Veil with the warehouse at a file:// URL."""
    source = tmp_path / "source"
    source.mkdir()
    plain = duckdb.connect()
    plain.execute(
        "CREATE TABLE readings AS SELECT i AS id, i % 7 AS g, CAST(i * 1.5 AS DECIMAL(12, 2)) AS a, "
        "'n' || (i % 5) AS name FROM range(500) t(i)"
    )
    plain.execute(f"COPY readings TO '{source / 'readings.parquet'}' (FORMAT parquet)")
    queries = [
        "SELECT g, SUM(a), COUNT(*) FROM readings GROUP BY g ORDER BY g",
        "SELECT name, MAX(id) FROM readings WHERE a > 100 GROUP BY name ORDER BY name",
    ]
    url = local_url(f"file://{tmp_path / 'warehouse'}")  # type: ignore[arg-type]
    load(str(source), url, str(tmp_path / "client"), queries, progress=lambda _: None)
    session = Session(tmp_path / "client")
    try:
        session.run("INSERT INTO readings VALUES (1000, 3, 2.5, 'n9')")
        plain.execute("INSERT INTO readings VALUES (1000, 3, 2.5, 'n9')")
        for sql in queries:
            got = [tuple(r.values()) for r in session.run(sql).table.to_pylist()]
            assert got == plain.sql(sql).fetchall()
    finally:
        session.close()
    assert list((tmp_path / "warehouse").glob("*/v*/*.parquet"))
