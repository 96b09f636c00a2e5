"""``veil kv bench``: a tiny run on each backend checks the harness, not speed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from veil.cli import main
from veil.errors import ParameterError
from veil_dev.bench.kv import ycsb


def _dataset(tmp_path: Path, count: int = 1200) -> Path:
    path = tmp_path / "records.txt"
    path.write_text(
        "\n".join(f"Package: p{i}\nVersion: 1.{i % 7}".replace("\n", " ") for i in range(count))
    )
    return path


def _check(result: dict) -> None:
    assert set(result["workloads"]) == set(ycsb.WORKLOADS)
    for by_client in result["workloads"].values():
        assert set(by_client) == set(ycsb.CLIENTS)
        for summary in by_client.values():
            assert summary["ops"] > 0
            assert summary["wrong_answers"] == 0
            assert summary["p50_ms"] <= summary["p99_ms"]
    sizes = result["server_bytes"]
    assert sizes["veil"] < sizes["per_row"] and sizes["veil"] < sizes["vanilla"]
    assert set(result["ratios"]) >= {"range_1000_veil_over_per_row"}


def test_cli_bench_on_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json, out_png = tmp_path / "b.json", tmp_path / "b.png"
    argv = ["kv", "bench", "--dataset", str(_dataset(tmp_path)), "--records", "1200"]
    argv += ["--ops", "20", "--seconds", "5", "--json", str(out_json), "--png", str(out_png)]
    assert main(argv) == 0
    result = json.loads(out_json.read_text())
    _check(result)
    assert out_png.read_bytes()[:4] == b"\x89PNG"
    out = capsys.readouterr().out
    assert "point_uniform" in out and "as one zlib blob in one row" in out
    # The reference blob stored on the same server: its pages hold at least its bytes.
    whole = result["server"]["disk_bytes"]["whole"]
    assert whole >= result["raw_bytes"] / result["whole_ratio_zlib"] * 0.99
    share = result["ratios"]["veil_disk_share_of_whole_stored"]
    assert share == round(whole / result["server"]["disk_bytes"]["veil"], 3)


@pytest.mark.cassandra
def test_bench_on_cassandra(tmp_path: Path, cassandra_url: str) -> None:
    config = ycsb.BenchConfig(
        backend="cassandra",
        url=cassandra_url,
        dataset=str(_dataset(tmp_path)),
        records=1200,
        ops=10,
    )
    result = ycsb.run(config)
    _check(result)


def test_bench_refuses_remote_servers() -> None:
    config = ycsb.BenchConfig(backend="cassandra", url="cassandra://10.0.0.1:9042/ks")
    with pytest.raises(ParameterError, match=r"127\.0\.0\.1"), ycsb.store_url(config):
        pass


def test_zipfian_ranks_favour_low_ranks() -> None:
    ranks = ycsb.zipfian_ranks(1000, 5000, np.random.default_rng(1))
    assert ranks.min() >= 0 and ranks.max() < 1000
    assert (ranks == 0).sum() > (ranks == 500).sum() * 20


def test_plan_repeats_values_over_a_larger_key_space() -> None:
    plan = ycsb.Plan.draw([b"a", b"b", b"c"], 10, 50, seed=3)
    assert [v for _, v in plan.items()] == [b"a", b"b", b"c"] * 3 + [b"a"]
    assert plan.uniform.max() < 10 and plan.zipfian.max() < 10


def test_disk_bytes_sums_each_clients_table_directories(tmp_path: Path) -> None:
    for table, size in [("packs-1a", 10), ("packs-1a/snap", 5), ("rows-2b", 7), ("other-3c", 99)]:
        (tmp_path / table).mkdir(parents=True, exist_ok=True)
        (tmp_path / table / "Data.db").write_bytes(b"x" * size)
    facts = {"tables": {"veil": ["packs"], "per_row": ["rows"], "vanilla": ["missing"]}}
    assert ycsb.disk_bytes(tmp_path, facts) == {"veil": 15, "per_row": 7, "vanilla": 0}
    (tmp_path / "packs-1a" / "Statistics.db").write_bytes(b"s" * 4)
    facts["dictionary_bytes"] = {"veil": 100}
    assert ycsb.disk_bytes(tmp_path, facts) == {"veil": 119, "per_row": 7, "vanilla": 0}
    assert ycsb.disk_bytes(tmp_path, facts, only="Data.db")["veil"] == 115


def test_disk_components_split_each_clients_sstables_by_file_kind(tmp_path: Path) -> None:
    for table, name, size in [
        ("packs-1a", "nb-1-big-Data.db", 10),
        ("packs-1a", "nb-2-big-Data.db", 3),
        ("packs-1a", "nb-1-big-Statistics.db", 4),
        ("rows-2b", "nb-1-big-TOC.txt", 7),
    ]:
        (tmp_path / table).mkdir(exist_ok=True)
        (tmp_path / table / name).write_bytes(b"x" * size)
    facts = {"tables": {"veil": ["packs"], "per_row": ["rows"], "vanilla": ["missing"]}}
    assert ycsb.disk_components(tmp_path, facts) == {
        "veil": {"Data.db": 13, "Statistics.db": 4},
        "per_row": {"TOC.txt": 7},
        "vanilla": {},
    }


def test_parallel_reads_split_the_operations_between_threads() -> None:
    seen: list[int] = []
    outcome = ycsb.Clock(ops=40, seconds=30, threads=4).run(
        lambda i: seen.append(i) is None and i % 10 != 0, parallel=True
    )
    assert sorted(seen) == list(range(40))
    assert len(outcome.latencies_ns) == 40 and outcome.wrong == 4


def test_sweep_measures_every_configuration(tmp_path: Path) -> None:
    from veil_dev.bench.kv import sweep

    out = tmp_path / "s.json"
    result = sweep.run(str(_dataset(tmp_path, 900)), records=900, reads=5, json_path=out)
    # Two pack codecs per pack size, blocked packs per block size, the store's choice.
    assert len(result["configs"]) == 2 * len(sweep.PACK_ROWS) + len(sweep.BLOCK_ROWS) + 1
    for config in result["configs"]:
        assert config["stored_ratio"] > 1 and config["point_read_us"] > 0
    assert json.loads(out.read_text())["per_row_point_read_us"] > 0
    summary = "\n".join(sweep.summary_lines(result))
    assert "zstd-dict/10" in summary and "blocks/8" in summary and "chosen" in summary
