"""A throwaway PostgreSQL cluster stops when the process that started it is killed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from veil_dev.servers.ports import port_open

pytestmark = pytest.mark.integration

_STARTER = """
import sys
from veil_dev.servers.postgres import ThrowawayCluster
cluster = ThrowawayCluster()
cluster.start()
print(cluster.port, cluster.directory, flush=True)
sys.stdin.read()  # until killed
"""


def test_a_killed_starter_leaves_no_cluster() -> None:
    """SIGKILL runs no atexit handler: the lifeline's watcher stops the server and removes
    its files (a killed test run or bench left clusters running until the machine restarted)."""
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert starter.stdout is not None
    port_text, directory_text = starter.stdout.readline().split()
    port, directory = int(port_text), Path(directory_text)
    assert port_open("127.0.0.1", port)
    starter.kill()
    starter.communicate()
    deadline = time.monotonic() + 60
    while (port_open("127.0.0.1", port) or directory.exists()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not port_open("127.0.0.1", port)
    assert not directory.exists()


def test_a_stopped_cluster_cuts_its_lifeline() -> None:
    """A normal stop removes the files itself; the watcher then exits with nothing to do."""
    from veil_dev.servers.postgres import ThrowawayCluster

    cluster = ThrowawayCluster()
    cluster.start()
    directory = cluster.directory
    cluster.stop()
    assert not directory.exists()
    assert cluster._lifeline is None
