"""The Cassandra launcher's generated configuration and its error messages (no server)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from veil.cli import main
from veil_dev.servers import cassandra as cassandra_server
from veil_dev.servers.cassandra import CassandraServerError


def test_yaml_binds_to_loopback_on_the_given_ports(tmp_path: Path) -> None:
    text = cassandra_server.cassandra_yaml(tmp_path, "127.0.0.1", 40001, 40002)
    assert "listen_address: 127.0.0.1" in text and "rpc_address: 127.0.0.1" in text
    assert "native_transport_port: 40001" in text and "storage_port: 40002" in text
    assert str(tmp_path / "data" / "commitlog") in text


def test_java_command_carries_the_jvm17_module_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    command = cassandra_server.java_command(tmp_path, tmp_path / "lib", 512)
    assert command[-1] == "org.apache.cassandra.service.CassandraDaemon"
    assert "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED" in command
    assert "-Xmx512m" in command
    assert f"-Dcassandra.config=file://{tmp_path / 'cassandra.yaml'}" in command


def test_missing_java_or_mvn_is_reported_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(CassandraServerError, match="'java' was not found on PATH"):
        cassandra_server.java_command(tmp_path, tmp_path, 512)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing cached there
    assert main(["kv", "cassandra", "start", "--dir", str(tmp_path / "srv")]) == 2
    assert "'mvn' was not found on PATH" in capsys.readouterr().err


def test_status_and_stop_of_an_empty_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cassandra_server.status(tmp_path) is None
    assert main(["kv", "cassandra", "status", "--dir", str(tmp_path)]) == 1
    assert main(["kv", "cassandra", "stop", "--dir", str(tmp_path)]) == 0
    assert "no cassandra was running" in capsys.readouterr().out


def test_lean_configuration_shrinks_caches_and_pretouches_the_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lean = cassandra_server.cassandra_yaml(tmp_path, "127.0.0.1", 1, 2, lean=True)
    assert "file_cache_size: 16MiB" in lean
    assert "file_cache_size" not in cassandra_server.cassandra_yaml(tmp_path, "127.0.0.1", 1, 2)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    command = cassandra_server.java_command(tmp_path, tmp_path, 512, lean=True)
    assert "-XX:+AlwaysPreTouch" in command


def test_no_memory_budget_means_no_cgroup() -> None:
    with cassandra_server.memory_budget(None) as group:
        assert group is None


def test_memory_budget_without_a_cgroup_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cassandra_server, "_own_cgroup", lambda controller: None)
    with (
        pytest.raises(CassandraServerError, match="no memory cgroup"),
        cassandra_server.memory_budget(100),
    ):
        pass
