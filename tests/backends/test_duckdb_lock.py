"""An embedded DuckDB server held by another process: the error names the holder."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.tpch import copy_veil_env
from veil.dbapi import connect
from veil.errors import VeilError


@pytest.fixture
def copied(veil_env: dict[str, object], tmp_path: Path) -> Path:
    """A copy of the TPC-H client directory and its server file; returns the directory."""
    return copy_veil_env(veil_env, tmp_path)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def serving(copied: Path) -> Iterator[int]:
    """``veil serve`` on the copy, in its own process, with the server file open."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "veil", "serve", str(copied), "--insecure-local",
         "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(f"host=127.0.0.1 port={port} user=u dbname=veil") as con:
                    con.execute("SELECT count(*) FROM region")  # opens the server file
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.5)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_file_held_by_veil_serve_names_it_and_its_address(copied: Path, serving: int) -> None:
    with pytest.raises(VeilError) as held:
        connect(str(copied)).close()
    message = str(held.value)
    assert "`veil serve`" in message and f"127.0.0.1:{serving}" in message
    assert "one process at a time" in message and "postgresql://" in message


def test_a_file_held_by_another_program_names_its_pid(copied: Path) -> None:
    server_file = copied.parent / "server.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         f"import duckdb, sys; c = duckdb.connect({str(server_file)!r}); print('open', flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with pytest.raises(VeilError) as held:
            connect(str(copied)).close()
            assert f"PID {holder.pid}" in str(held.value) and "veil serve" not in str(held.value)
    finally:
        holder.communicate("")  # closes its pipes; it exits at the end of its input
