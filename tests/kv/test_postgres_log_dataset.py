"""The ``postgres-log`` dataset: entries, the cache, clear errors, and one real run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from veil.backends.base import ServerUnavailableError
from veil_dev.bench.kv import datasets, postgres_log
from veil_dev.bench.kv.postgres_log import PostgresLogError
from veil_dev.servers.postgres import ThrowawayCluster

LOG = b"""\
2026-11-27 00:25:39.608 UTC [14672] [unknown]@[unknown] LOG:  connection received: host=127.0.0.1 port=49760
2026-11-27 00:25:39.613 UTC [14672] veil@bench LOG:  statement: END;
2026-11-27 00:25:54.087 UTC [17835] LOG:  automatic vacuum of table "bench.public.pgbench_tellers": index scans: 0
\tpages: 0 removed, 1 remain, 1 scanned (100.00% of total)
\ttuples: 188 removed, 10 remain, 0 are dead but not yet removable

2026-11-27 00:25:41.633 UTC [14665] LOG:  database system is shut down
"""


def test_an_entry_keeps_its_continuation_lines() -> None:
    records = postgres_log.entries(LOG)
    assert len(records) == 4
    assert records[2].count(b"\n") == 2 and records[2].endswith(b"not yet removable")
    assert records[3].endswith(b"database system is shut down")


def test_a_cached_log_is_read_without_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VEIL_DATASET_CACHE", str(tmp_path))
    postgres_log.cache_path().write_bytes(LOG)

    def no_server(*args: object) -> None:
        raise AssertionError("a cached log must not be generated again")

    monkeypatch.setattr(postgres_log, "generate", no_server)
    assert datasets.load_records("postgres-log", limit=2) == postgres_log.entries(LOG)[:2]
    source = datasets.source_file("postgres-log")
    assert source["bytes"] == len(LOG) and source["path"] == str(postgres_log.cache_path())
    assert re.fullmatch(r"[0-9a-f]{64}", str(source["sha256"]))


def test_no_server_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VEIL_DATASET_CACHE", str(tmp_path))

    def unavailable(self: ThrowawayCluster) -> None:
        raise ServerUnavailableError("initdb failed")

    monkeypatch.setattr(ThrowawayCluster, "start", unavailable)
    with pytest.raises(PostgresLogError, match="apt-get install postgresql-15"):
        datasets.load_records("postgres-log")
    assert not postgres_log.cache_path().exists()  # no half-written cache file


def test_source_files_of_other_datasets(tmp_path: Path) -> None:
    text = tmp_path / "lines.txt"
    text.write_bytes(b"one\ntwo\n")
    assert datasets.source_file(str(text))["bytes"] == 8
    assert datasets.source_file("debian-packages") == {}  # many index files
    assert datasets.source_file(str(tmp_path / "missing")) == {}


@pytest.mark.postgres
def test_a_real_server_writes_the_same_statements_each_run(tmp_path: Path) -> None:
    """Two runs of a short workload log the same statements (times and ids differ)."""
    statements = []
    for run in ("a", "b"):
        path = tmp_path / run / "postgres.log"
        postgres_log.generate(path, transactions_per_client=20)
        records = postgres_log.entries(path.read_bytes())
        assert any(b"connection authorized" in r for r in records)
        assert any(b"checkpoint complete" in r for r in records)
        statements.append(
            sorted(r.split(b"statement: ", 1)[1] for r in records if b"statement: " in r)
        )
    assert sum(b"UPDATE pgbench_accounts" in s for s in statements[0]) == 2 * 20
    assert statements[0] == statements[1]
