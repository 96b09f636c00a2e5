"""The in-process A/B harness of issue 14's rounds (veil_dev.bench.kv.inprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veil_dev.bench.kv.inprocess import Timings, alternate, main, run


class Counting:
    def __init__(self, name: str, log: list[str]):
        self.name, self.log = name, log

    def get(self, key: int) -> bytes | None:
        self.log.append(self.name)
        return None

    def range(self, low: int, high: int) -> list[tuple[int, bytes]]:
        self.log.append(self.name + ":range")
        return []


def test_rounds_rotate_the_order_of_the_readers() -> None:
    log: list[str] = []
    readers = [Counting("a", log), Counting("b", log), Counting("c", log)]
    timings = alternate(readers, 100, rounds=3, gets=1, ranges=1)
    firsts = [log[i] for i in (0, 6, 12)]  # each round: 3 gets, then 3 ranges
    assert firsts == ["a", "b", "c"]
    assert all(len(v) == 3 for v in timings.points.values())
    assert all(len(v) == 3 for v in timings.ranges.values())


def test_ratios_are_medians_of_per_round_ratios() -> None:
    timings = Timings(
        points={"veil": [2.0, 3.0, 30.0], "per_row": [1.0, 2.0, 10.0]},
        ranges={"veil": [1.0, 1.0, 2.0], "per_row": [5.0, 6.0, 4.0]},
    )
    assert timings.point_ratio("veil") == pytest.approx(2.0)  # of 2.0, 1.5, 3.0
    assert timings.range_speedup("veil") == pytest.approx(5.0)  # of 5, 6, 2


def test_stores_and_the_per_row_client_answer_the_same(tmp_path: Path) -> None:
    values = [b"line %d of a small log\n" % i for i in range(300)]
    timings, facts = run(values, [0, 10], tmp_path, rounds=2, gets=20, ranges=1)
    assert set(timings.points) == {"veil_chosen", "veil_10", "per_row"}
    assert facts["veil_10"]["block_rows"] == 10
    assert all(f["stored_bytes"] for f in facts.values())


@pytest.mark.cassandra
def test_on_cassandra_every_client_is_a_table_of_the_keyspace(cassandra_url: str) -> None:
    values = [b"line %d of a small log\n" % i for i in range(300)]
    timings, facts = run(
        values, [0], Path("/nonexistent"), rounds=2, gets=20, ranges=1, server=cassandra_url
    )
    assert set(timings.points) == {"veil_chosen", "per_row"}
    assert facts["veil_chosen"]["stored_bytes"]
    assert all(t > 0 for t in timings.ranges["per_row"])


def test_the_command_line_prints_one_line_a_store(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    values = [b"record %d\n" % i for i in range(200)]
    monkeypatch.setattr("veil_dev.bench.kv.datasets.load_records", lambda name, limit: values)
    assert main(["any", "--records", "200", "--blocks", "5", "--rounds", "2", "--gets", "10"]) == 0
    out = capsys.readouterr().out
    assert "veil_5" in out and "UTC, load" in out


def test_the_command_line_appends_its_figures_to_a_json_list(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    values = [b"record %d\n" % i for i in range(200)]
    monkeypatch.setattr("veil_dev.bench.kv.datasets.load_records", lambda name, limit: values)
    out = tmp_path / "ab.json"
    argv = ["any", "--blocks", "5", "--rounds", "2", "--gets", "10", "--ranges", "1"]
    for _ in range(2):
        assert main([*argv, "--json", str(out)]) == 0
    runs = json.loads(out.read_text())
    assert len(runs) == 2
    assert set(runs[0]["point_ratio"]) == {"veil_5"}
    assert len(runs[0]["points_us"]["per_row"]) == 2
