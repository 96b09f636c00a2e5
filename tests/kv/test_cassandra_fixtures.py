"""The Cassandra server of the key-value tests, shared by the whole session.

``cassandra_url`` yields ``cassandra://127.0.0.1:<port>/<fresh keyspace>``: a
new keyspace per test, because a MiniCrypt database (its catalog and key
fingerprint) is a keyspace and every test writes with its own key file. The
server itself is one private single-node Cassandra 5.0 (fetched from Maven
Central on first use, then cached), started when the first test asks for it
and stopped when the session ends. ``tests/kv/conftest.py`` re-exports the
fixture so every test parametrised by ``kv_url`` also runs on Cassandra; only
those tests (marker ``cassandra``) start the server. Set VEIL_CASSANDRA_URL
(``cassandra://host:port``) to use a server that is already running instead.

Tests of modules in SINGLE_PARTITION_MODULES build scenarios around one pack
(a split of "the" pack holding keys 0..6); on Cassandra's 8 hash partitions
those keys would sit in different packs, so they get ``?partitions=1``. The
hash-partitioned layout itself is exercised by every other test.

The fixture depends on no other fixture on purpose: conftest.py imports just
this name, and a dependency defined here would not be visible from there.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import pytest

from veil_dev.servers import cassandra as cassandra_server

_SERVER: dict[str, str] = {}
SINGLE_PARTITION_MODULES = ("test_split", "test_pack_format")


def _server_contact(config: pytest.Config) -> str:
    if "contact" in _SERVER:
        return _SERVER["contact"]
    if os.environ.get("VEIL_CASSANDRA_URL"):
        _SERVER["contact"] = os.environ["VEIL_CASSANDRA_URL"].removeprefix("cassandra://")
        return _SERVER["contact"].split("/")[0]
    workdir = tempfile.TemporaryDirectory(prefix="veil-cassandra-")
    try:
        info = cassandra_server.start(Path(workdir.name), fast_schema=True)
    except cassandra_server.CassandraServerError as exc:
        workdir.cleanup()
        pytest.fail(f"could not start Cassandra for the tests: {exc}")

    def stop() -> None:
        cassandra_server.stop(Path(workdir.name))
        workdir.cleanup()
        _SERVER.clear()

    config.add_cleanup(stop)
    _SERVER["contact"] = info.contact
    return info.contact


@pytest.fixture
def cassandra_url(request: pytest.FixtureRequest) -> str:
    """A fresh keyspace on the session's Cassandra server."""
    contact = _server_contact(request.config).split("/")[0]
    url = f"cassandra://{contact}/t{uuid.uuid4().hex[:16]}"
    module = getattr(request, "module", None)
    if module is not None and module.__name__.rsplit(".", 1)[-1] in SINGLE_PARTITION_MODULES:
        url += "?partitions=1"
    return url
