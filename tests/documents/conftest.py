"""The session's MongoDB-wire servers: FerretDB (built once, cached under target/ferretdb)
and, for the tests that ask for it, mongo-java-server (under target/mongo-java-server)."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator
from typing import TypeVar

import pymongo
import pytest

from veil_dev.servers.ferretdb import FerretDBServer
from veil_dev.servers.mongojava import MongoJavaServer
from veil_dev.servers.process import ServerProcess

_databases = itertools.count(1)
# tests/concurrency imports this module under another name than pytest's conftest, so two
# counters run: a prefix of each import's own keeps their databases apart on one server
_PREFIX = f"veil_test_{secrets.token_hex(4)}_"
Server = TypeVar("Server", bound=ServerProcess)


def _serve(server: Server, config: pytest.Config) -> Iterator[Server]:
    """The session's server of this kind, started by the first fixture that asks for it.
    Tests outside tests/documents import these fixtures (tests/concurrency), as another
    module than pytest's conftest: the running servers, with how many fixtures hold
    each, are kept on the session's config, which both copies see."""
    _running: dict[type, tuple[ServerProcess, int]] = config.__dict__.setdefault(
        "veil_document_servers", {}
    )
    kind = type(server)
    if kind in _running:
        shared, holders = _running[kind]
        _running[kind] = shared, holders + 1
    else:
        server.start()
        _running[kind] = server, 1
    try:
        yield _running[kind][0]  # type: ignore[misc]
    finally:
        shared, holders = _running[kind]
        if holders == 1:
            del _running[kind]
            shared.stop()
        else:
            _running[kind] = shared, holders - 1


def _plain_database(server: ServerProcess, name: str) -> Iterator[pymongo.database.Database]:
    client: pymongo.MongoClient = pymongo.MongoClient(server.url)
    try:
        yield client[f"{name}_plain"]
    finally:
        client.close()


@pytest.fixture(scope="session")
def ferretdb(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[FerretDBServer]:
    """One FerretDB for the whole session; a build failure fails loudly, never skips."""
    yield from _serve(FerretDBServer(tmp_path_factory.mktemp("ferretdb")), pytestconfig)


@pytest.fixture
def database_name() -> str:
    return f"{_PREFIX}{next(_databases)}"


@pytest.fixture
def url(ferretdb: FerretDBServer, database_name: str) -> str:
    """A URL naming a fresh database on the session's server."""
    return f"{ferretdb.url}{database_name}"


@pytest.fixture
def plain(ferretdb: FerretDBServer, database_name: str) -> Iterator[pymongo.database.Database]:
    """The same server through plain pymongo, in a database of its own (the oracle)."""
    yield from _plain_database(ferretdb, database_name)


@pytest.fixture(scope="session")
def mongo_java(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[MongoJavaServer]:
    """One mongo-java-server for the session, started by the first test that asks for it."""
    yield from _serve(MongoJavaServer(tmp_path_factory.mktemp("mongo_java")), pytestconfig)


@pytest.fixture
def mongo_java_url(mongo_java: MongoJavaServer, database_name: str) -> str:
    """A URL naming a fresh database on the session's mongo-java-server."""
    return f"{mongo_java.url}{database_name}"


@pytest.fixture
def mongo_java_plain(
    mongo_java: MongoJavaServer, database_name: str
) -> Iterator[pymongo.database.Database]:
    """The session's mongo-java-server through plain pymongo, in a database of its own."""
    yield from _plain_database(mongo_java, database_name)
