"""A first build of a test server says what it builds, that it is still at it, and its time."""

from __future__ import annotations

import io
import time

import pytest

from veil_dev.servers.builds import announced

pytestmark = pytest.mark.unit


def test_a_long_build_is_announced_with_a_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    with announced("FerretDB 1.24.2 with Go", "about 1-4 minutes", every_s=0.01):
        deadline = time.monotonic() + 60  # a loaded machine may be slow to run the heartbeat
        while "still building" not in err.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = err.getvalue().splitlines()
    assert (
        lines[0] == "veil: building FerretDB 1.24.2 with Go (first use only; about 1-4 minutes)..."
    )
    assert any(
        line.startswith("veil:   ... still building FerretDB 1.24.2 with Go, ") for line in lines
    )
    assert lines[-1].startswith("veil: built FerretDB 1.24.2 with Go in ")
    assert lines[-1].endswith(" s")
