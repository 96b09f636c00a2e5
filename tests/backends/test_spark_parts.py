"""The Spark backend's pure parts: URLs, literals, DML as queries (no Spark needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from veil.backends import canonical_url
from veil.backends.base import BackendError
from veil.backends.spark import literal_of, with_literals
from veil.backends.spark_dml import parse, rewrite
from veil.backends.spark_session import parse_url

pytestmark = pytest.mark.unit

COLUMNS = {"a": "bigint", "c": "binary", "p": "boolean"}


def test_urls_name_a_master_and_a_warehouse() -> None:
    assert parse_url("spark-local[4]?warehouse=/w").master == "local[4]"
    assert parse_url("spark-local?warehouse=/w").master == "local[2]"
    cluster = parse_url("spark://10.0.0.1:7077?warehouse=/shared/w")
    assert (cluster.master, cluster.warehouse) == ("spark://10.0.0.1:7077", "/shared/w")
    hadoop = parse_url("spark-local[2]?warehouse=hdfs://namenode:8020/veil/wh")
    assert hadoop.warehouse == "hdfs://namenode:8020/veil/wh"  # not a path of this machine
    with pytest.raises(BackendError, match="warehouse"):
        parse_url("spark-local[2]")
    with pytest.raises(BackendError, match="not a Spark URL"):
        parse_url("spark-locale?warehouse=/w")


def test_a_relative_warehouse_is_stored_absolute(tmp_path: Path, monkeypatch: object) -> None:
    monkeypatch.chdir(tmp_path)  # type: ignore[attr-defined]
    assert canonical_url("spark-local[2]?warehouse=wh") == f"spark-local[2]?warehouse={tmp_path}/wh"


def test_parameters_become_spark_literals() -> None:
    assert literal_of(b"\x0a\xff").sql("spark") == "X'0aff'"
    assert literal_of([1, None]).sql("spark") == "ARRAY(1, NULL)"
    assert literal_of("it's").sql("spark") == "'it\\'s'"
    sql = with_literals("SELECT '$1', $2 FROM t WHERE c = $1", [b"\x01", 7])
    assert sql == "SELECT '$1', 7 FROM t WHERE c = X'01'"


def test_delete_keeps_the_rows_its_condition_is_not_true_for() -> None:
    done = rewrite(parse('DELETE FROM "t" WHERE "a" IN (1, 2)'), COLUMNS)
    assert (done.table, done.appends) == ("t", False)
    assert "NOT COALESCE((`a` IN (1, 2)), FALSE)" in done.rows


def test_update_with_returning_reads_the_old_version() -> None:
    done = rewrite(parse("UPDATE t SET a = a + 5 WHERE p RETURNING a - 5"), COLUMNS)
    assert "CASE WHEN COALESCE((p), FALSE) THEN a + 5 ELSE `a` END AS `a`" in done.rows
    assert done.returning is not None and done.returning.startswith("SELECT a - 5 FROM (SELECT")


def test_insert_fills_missing_columns_with_typed_nulls() -> None:
    done = rewrite(parse("INSERT INTO t (c, a) VALUES (X'01', 3)"), COLUMNS)
    assert done.appends
    assert "v1 AS `a`, v0 AS `c`, CAST(NULL AS BOOLEAN) AS `p`" in done.rows


def test_unsupported_dml_is_refused() -> None:
    with pytest.raises(BackendError, match="does not run"):
        rewrite(parse("UPDATE t SET a = m.x FROM m WHERE t.a = m.a"), COLUMNS)
    with pytest.raises(BackendError, match="does not have"):
        rewrite(parse("UPDATE t SET nope = 1"), COLUMNS)
