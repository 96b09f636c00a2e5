"""The session-wide Cassandra server of the key-value tests.

``cassandra_url`` starts one private single-node Cassandra 5.0 (fetched from
Maven Central on first use, then cached) in a temporary directory, yields a
``cassandra://127.0.0.1:<port>/<keyspace>`` URL and stops the server when the
session ends. ``tests/kv/conftest.py`` re-exports it so that every test
parametrised by ``kv_url`` also runs on Cassandra. Only tests that ask for it
(the ``cassandra`` marker) start the server; ``-m "not cassandra"`` skips them.
Set VEIL_CASSANDRA_URL to use a server that is already running instead.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from veil.kv import cassandra_server

KEYSPACE = "veil_tests"


@pytest.fixture(scope="session")
def cassandra_url() -> Iterator[str]:
    """``cassandra://127.0.0.1:<port>/veil_tests`` of a server living for the session.

    Self-contained (no other fixture) because conftest.py imports only this name.
    """
    if os.environ.get("VEIL_CASSANDRA_URL"):
        yield os.environ["VEIL_CASSANDRA_URL"]
        return
    with tempfile.TemporaryDirectory(prefix="veil-cassandra-") as directory:
        try:
            info = cassandra_server.start(Path(directory))
        except cassandra_server.CassandraServerError as exc:
            pytest.fail(f"could not start Cassandra for the tests: {exc}")
        try:
            yield f"cassandra://{info.contact}/{KEYSPACE}"
        finally:
            cassandra_server.stop(Path(directory))
