"""``--link``'s plumbing: a Toxiproxy link to a real PostgreSQL, shaped as its preset in
both directions, with queries crossing it.

Toxiproxy is built with ``go install`` the first time (as FerretDB is for the document
tests, cached under target/); without Go the test skips and says so. Timings are not
asserted: the toxics Toxiproxy reports are.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from veil_dev.servers.builds import GO_CANDIDATES
from veil_dev.servers.postgres import ThrowawayCluster
from veil_dev.servers.toxiproxy import BINARY, LINKS, Link

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def _buildable() -> bool:
    go = shutil.which("go") or any(Path(c).exists() for c in GO_CANDIDATES)
    return bool(shutil.which("toxiproxy-server") or BINARY.exists() or go)


@pytest.fixture
def cloud_link(postgres_cluster: ThrowawayCluster, tmp_path: Path) -> Iterator[Link]:
    if not _buildable():
        pytest.skip("no toxiproxy-server and no Go to build it (go install of Toxiproxy)")
    link = Link.start("cloud", f"127.0.0.1:{postgres_cluster.port}", tmp_path / "toxiproxy")
    try:
        yield link
    finally:
        link.close()


def test_cloud_link_shapes_both_directions(
    cloud_link: Link, postgres_cluster: ThrowawayCluster
) -> None:
    toxics = {t["name"]: t for t in cloud_link.toxics()}
    for stream in ("upstream", "downstream"):
        assert toxics[f"latency_{stream}"]["attributes"]["latency"] == 5  # 10 ms round trip
        assert toxics[f"bandwidth_{stream}"]["attributes"]["rate"] == 12_500  # 100 Mbit/s
        assert toxics[f"bandwidth_{stream}"]["stream"] == stream
    routed = cloud_link.route(postgres_cluster.url_for("postgres"))
    assert f":{cloud_link.port}/" in routed and f":{postgres_cluster.port}" not in routed
    with psycopg.connect(routed) as con:
        assert con.execute("SELECT count(*) FROM generate_series(1, 1000)").fetchone() == (1000,)


def test_presets_are_the_issues() -> None:
    assert {name: (p.mbit, p.rtt_ms) for name, p in LINKS.items()} == {
        "lan": (1000.0, 0.5),
        "cloud": (100.0, 10.0),
        "monomi": (10.0, 20.0),
    }
