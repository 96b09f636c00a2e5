"""``veil kv packsize``: ratios per pack size, thresholds, outputs, datasets."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from veil.cli import main
from veil_dev.bench.kv import datasets, packsize
from veil_dev.bench.kv.datasets import DatasetError


def _records(count: int = 600) -> list[bytes]:
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "status", "install", "ok", "version"]
    return [
        json.dumps({"id": i, "text": " ".join(rng.choice(words) for _ in range(12))}).encode()
        for i in range(count)
    ]


def test_ratios_grow_with_pack_size_towards_the_whole() -> None:
    curves = packsize.measure(_records())
    for curve in curves.values():
        sizes = sorted(curve.ratios)
        assert sizes[0] == 1 and 500 in sizes and 1000 not in sizes  # only sizes < records
        assert curve.ratios[1] < curve.ratios[50] <= curve.whole * 1.05
        assert curve.rows_for_target[0.75] is not None
        assert curve.rows_for_target[0.75] <= curve.rows_for_target[0.90]  # type: ignore[operator]


def test_rows_for_fraction_interpolates_on_a_log_scale() -> None:
    ratios = {1: 1.0, 10: 3.0, 100: 4.0}
    assert packsize.rows_for_fraction(ratios, 4.0, 0.25) == 1.0
    assert packsize.rows_for_fraction(ratios, 4.0, 0.5) == pytest.approx(10**0.5)
    assert packsize.rows_for_fraction(ratios, 5.0, 0.9) is None


def test_cli_writes_json_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "records.jsonl"
    source.write_bytes(b"\n".join(_records(300)))
    out_json, out_png = tmp_path / "p.json", tmp_path / "p.png"
    assert (
        main(["kv", "packsize", str(source), "--json", str(out_json), "--png", str(out_png)]) == 0
    )
    result = json.loads(out_json.read_text())
    assert result["records"] == 300
    assert set(result["algorithms"]) == {"zlib", "zstd", "lz4"}
    assert result["algorithms"]["zlib"]["fraction_of_whole_at_50"] > 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "zlib" in out
    # The same recommendation a store would record for these records as its first batch.
    chosen = result["recommended"]["zlib"]
    assert chosen == packsize.recommend(_records(300), ("zlib",))["zlib"]
    assert f"recommended pack_rows (zlib): {chosen['pack_rows']}," in out
    blocked = result["recommended"]["zstd-dict"]  # blocked packs: rows per block too
    assert blocked["pack_rows"] % blocked["block_rows"] == 0
    assert f"recommended pack_rows (zstd-dict): {blocked['pack_rows']} in blocks of" in out


def test_file_datasets_json_documents_and_lines(tmp_path: Path) -> None:
    document = tmp_path / "doc.json"
    document.write_text(json.dumps({"items": [{"a": 1}, {"a": 2}], "name": "x"}))
    assert datasets.load_records(str(document)) == [b'{"a":1}', b'{"a":2}']
    text = tmp_path / "lines.txt"
    text.write_text("one\n\ntwo\nthree\n")
    assert datasets.load_records(str(text), limit=2) == [b"one", b"two"]


def test_debian_stanzas_split_on_blank_lines() -> None:
    assert datasets.stanzas(b"Package: a\nVersion: 1\n\nPackage: b\n\n\n") == [
        b"Package: a\nVersion: 1",
        b"Package: b",
    ]


def test_unknown_dataset_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="debian-packages"):
        datasets.load_records(str(tmp_path / "missing"))
