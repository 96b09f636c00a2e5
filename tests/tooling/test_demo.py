"""``veil demo`` end to end, at a small scale factor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veil_dev.demo import demo


@pytest.mark.slow
def test_demo_agrees_with_plaintext(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert demo(0.01, str(tmp_path), str(tmp_path / "demo.json"))
    out = capsys.readouterr().out
    assert "22 of 22 queries gave the plaintext answer" in out
    assert "bytes received" in out
    written = json.loads((tmp_path / "demo.json").read_text())
    assert written["summary"]["correct"] == written["summary"]["queries"] == 22
    assert all(q["planned_ahead"] for q in written["queries"].values())  # by the load
