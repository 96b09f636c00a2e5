"""The server sums' fixture (ASHE and Paillier): a folder loaded through Veil on each server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import veil.load.loader as loader
from tests.conftest import SERVERS
from tests.support.oracle import server_url
from veil.load.loader import load
from veil.session.session import Session

LoadOnServer = Callable[..., Session]


@pytest.fixture(scope="module", params=SERVERS)
def load_on_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoadOnServer]:
    """``load_on_server(source, name, workload, batch_rows=None, **options)``: a session over
    ``source`` (a folder of Parquet files) loaded with ``options`` on the module's server,
    each backend in turn, under a client directory and server schema named after ``name``.

    ``batch_rows`` cuts the load into batches of that many rows, so that what the loader
    numbers (row ids, HOM slots and packs) must continue across batches. The sessions
    close with the module.
    """
    opened: list[Session] = []

    def load_source(
        source: Path, name: str, workload: list[str], batch_rows: int | None = None, **options: Any
    ) -> Session:
        root = tmp_path_factory.mktemp(name)
        url = server_url(request, root, f"veil_sums_{name}")
        with pytest.MonkeyPatch.context() as patch:
            if batch_rows is not None:
                patch.setattr(loader, "BATCH_ROWS", batch_rows)
            load(str(source), url, str(root / "client"), workload, lambda _: None, **options)
        opened.append(Session(root / "client"))
        return opened[-1]

    yield load_source
    for session in opened:
        session.close()
