"""Fixtures shared by the key-value (MiniCrypt) tests.

``kv_url`` runs a test once per backend: SQLite (a fresh file per test) and
Cassandra, through the session fixture ``cassandra_url`` of
``tests/kv/test_cassandra_fixtures.py`` (it starts the server once per session
and returns ``cassandra://host:port/ks``), re-exported here so every
parametrised test can use it.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import veil.kv
from veil.crypto.keys import write_key_file
from veil.kv import Store

cassandra_url = importlib.import_module("test_cassandra_fixtures").cassandra_url

BACKENDS = ["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)]


@pytest.fixture(params=BACKENDS)
def kv_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty store on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/kv.db"
    url: str = request.getfixturevalue("cassandra_url")
    return url


@pytest.fixture
def kv_table() -> str:
    """A table name no other test uses (Cassandra keyspaces outlive one test)."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def other_key_file(tmp_path: Path) -> Path:
    path = tmp_path / "other.key"
    write_key_file(path)
    return path


class StoreFactory:
    """Opens stores on one URL and key file; closes them all at teardown."""

    def __init__(self, url: str, key: Path, table: str):
        self.url, self.key, self.table = url, key, table
        self.opened: list[Store] = []

    def __call__(self, mode: str = "generic", **options: Any) -> Store:
        options.setdefault("table", self.table)
        if mode == "append":
            options.setdefault("background", False)
        store = veil.kv.open(self.url, options.pop("key_file", self.key), mode, **options)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture
def open_store(kv_url: str, key_file: Path, kv_table: str) -> Iterator[StoreFactory]:
    factory = StoreFactory(kv_url, key_file, kv_table)
    yield factory
    factory.close()
