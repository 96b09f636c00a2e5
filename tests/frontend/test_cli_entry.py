"""``python -m veil`` is the same command line as ``veil``."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_python_dash_m_veil_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "veil", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "usage: veil" in done.stdout and "query" in done.stdout
