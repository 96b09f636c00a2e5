"""``veil bench crypto`` runs end to end and writes the JSON the issue names."""

from __future__ import annotations

import json

import pytest

from veil.cli import main as veil_main
from veil_dev.bench.crypto import TARGETS

pytestmark = pytest.mark.unit


def test_bench_crypto_writes_every_figure(tmp_path, capsys):
    out = tmp_path / "crypto.json"
    png = tmp_path / "crypto.png"
    code = veil_main(
        [
            "bench",
            "crypto",
            "--scale",
            "0.001",
            "--repeats",
            "1",
            "--json",
            str(out),
            "--png",
            str(png),
        ]
    )
    assert code == 0
    figures = json.loads(out.read_text())
    assert set(figures) == set(TARGETS)
    assert all(value > 0 for value in figures.values())
    assert png.stat().st_size > 0
    table = capsys.readouterr().out
    assert "aes_ecb_blocks" in table and "paillier_add" in table
