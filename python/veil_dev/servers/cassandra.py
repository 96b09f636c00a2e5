"""A private single-node Apache Cassandra 5.0 for tests, benchmarks and demos.

Cassandra comes from Maven Central: ``org.apache.cassandra:cassandra-all`` and
its runtime dependencies are copied by ``mvn dependency:copy-dependencies``
into ``~/.cache/veil/cassandra/<version>/lib`` once (about 70 MB, 20 s on a
fast link); later starts reuse the cache. A server directory holds a generated
``cassandra.yaml`` (bound to 127.0.0.1 on free ports, everything but the
native CQL transport and the storage port switched off), a logback
configuration at INFO, the data and the logs, and ``server.json`` with the
pid and ports of the running server.

The JVM is launched directly (``org.apache.cassandra.service.CassandraDaemon``)
rather than through ``bin/cassandra``: the refusal to run as root ("use -R") is
a check of that shell script, not of the daemon, so starting as root works.
On Java 17 the daemon needs the module flags of Cassandra's
``conf/jvm17-server.options`` (copied below, ``JPMS`` section).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from veil.errors import VeilError
from veil_dev.servers.builds import locked
from veil_dev.servers.maven import copy_dependencies, require_tool
from veil_dev.servers.ports import free_port, port_open

CASSANDRA_VERSION = "5.0.9"
DEFAULT_HEAP_MB = 1024
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0

# From apache/cassandra conf/jvm17-server.options ("JPMS" and "Netty Options").
JVM17_SERVER_OPTIONS = (
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports=java.sql/java.sql=ALL-UNNAMED",
    "--add-exports=java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports=jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
)

# GC settings of the same file, plus what bin/cassandra and cassandra-env.sh add.
JVM_BASE_OPTIONS = (
    "-XX:+UseG1GC",
    "-XX:+ParallelRefProcEnabled",
    "-XX:MaxTenuringThreshold=1",
    "-XX:G1HeapRegionSize=16m",
    "-XX:MaxGCPauseMillis=300",
    "-Xss256k",
    "-XX:+ExitOnOutOfMemoryError",
    "-Dcassandra-foreground=yes",
    # A fresh single node has nobody to gossip with; do not wait for it.
    "-Dcassandra.skip_wait_for_gossip_to_settle=0",
    "-Dcassandra.superuser_setup_delay_ms=0",
)

POM_TEMPLATE = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>veil</groupId>
  <artifactId>veil-cassandra-fetch</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.cassandra</groupId>
      <artifactId>cassandra-all</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""

LOGBACK_XML = """<configuration scan="false">
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%-5level [%thread] %date{{ISO8601}} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


class CassandraServerError(VeilError):
    """The private Cassandra server could not be fetched, started or stopped."""

    anchor = "cassandra-server"


@dataclass(frozen=True)
class ServerInfo:
    """Where a running server listens; stored as ``server.json`` in its directory."""

    pid: int
    host: str
    native_port: int
    storage_port: int
    directory: str

    @property
    def contact(self) -> str:
        return f"{self.host}:{self.native_port}"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "veil" / "cassandra"


def default_server_dir() -> Path:
    return cache_dir() / "server"


def fetch_jars(version: str = CASSANDRA_VERSION) -> Path:
    """Return the directory of Cassandra's jars, downloading them with mvn on first use."""
    lib = cache_dir() / version / "lib"
    stamp = lib / ".complete"
    if stamp.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    # Several test processes may start at once; one downloads, the others wait.
    with locked(lib.parent / ".lock"):
        if not stamp.exists():
            pom = POM_TEMPLATE.format(version=version)
            copy_dependencies(pom, lib, f"cassandra-all {version}", CassandraServerError)
            stamp.write_text(version)
    return lib


# Under a memory budget, keep Cassandra's own memory small and fixed so the
# budget's remainder is the page cache that holds the table (paper §8.1).
LEAN_YAML = (
    "file_cache_size: 16MiB",
    "memtable_allocation_type: heap_buffers",
    "networking_cache_size: 16MiB",
)
LEAN_JVM = ("-XX:+AlwaysPreTouch", "-XX:MaxDirectMemorySize=256m", "-XX:ReservedCodeCacheSize=64m")


def cassandra_yaml(
    directory: Path, host: str, native_port: int, storage_port: int, *, lean: bool = False
) -> str:
    data = directory / "data"
    return "\n".join(
        [
            "cluster_name: veil",
            "num_tokens: 1",
            "initial_token: 0",
            "partitioner: org.apache.cassandra.dht.Murmur3Partitioner",
            "auto_bootstrap: false",
            "authenticator: AllowAllAuthenticator",
            "authorizer: AllowAllAuthorizer",
            "endpoint_snitch: SimpleSnitch",
            "seed_provider:",
            "  - class_name: org.apache.cassandra.locator.SimpleSeedProvider",
            "    parameters:",
            f'      - seeds: "{host}:{storage_port}"',
            f"listen_address: {host}",
            f"rpc_address: {host}",
            f"storage_port: {storage_port}",
            "start_native_transport: true",
            f"native_transport_port: {native_port}",
            "data_file_directories:",
            f"  - {data / 'data'}",
            f"commitlog_directory: {data / 'commitlog'}",
            f"saved_caches_directory: {data / 'saved_caches'}",
            f"hints_directory: {data / 'hints'}",
            f"cdc_raw_directory: {data / 'cdc_raw'}",
            "commitlog_sync: periodic",
            "commitlog_sync_period: 10000ms",
            "hinted_handoff_enabled: false",
            "auto_snapshot: false",
            "dynamic_snitch: false",
            # Small fixed caches so a memory budget measures the page cache, not the heap.
            "key_cache_size: 16MiB",
            "row_cache_size: 0MiB",
            "counter_cache_size: 0MiB",
            "concurrent_reads: 8",
            "concurrent_writes: 8",
            "# Single node: lightweight transactions need no cross-node waiting.",
            "cas_contention_timeout: 5000ms",
            "write_request_timeout: 10000ms",
            "read_request_timeout: 10000ms",
            *(LEAN_YAML if lean else ()),
            "",
        ]
    )


def java_command(directory: Path, lib: Path, heap_mb: int, *, lean: bool = False) -> list[str]:
    java = require_tool("java", "run Cassandra (Java 17 is expected)", CassandraServerError)
    jamm = sorted(lib.glob("jamm-*.jar"))
    agent = [f"-javaagent:{jamm[0]}"] if jamm else []
    return [
        java,
        f"-Xms{heap_mb}m",
        f"-Xmx{heap_mb}m",
        *JVM_BASE_OPTIONS,
        *JVM17_SERVER_OPTIONS,
        *(LEAN_JVM if lean else ()),
        *agent,
        f"-Dcassandra.config=file://{directory / 'cassandra.yaml'}",
        f"-Dcassandra.storagedir={directory / 'data'}",
        f"-Dcassandra.logdir={directory / 'logs'}",
        f"-Dlogback.configurationFile={directory / 'logback.xml'}",
        "-cp",
        f"{lib}/*",
        "org.apache.cassandra.service.CassandraDaemon",
    ]


def _info_path(directory: Path) -> Path:
    return directory / "server.json"


def read_info(directory: Path) -> ServerInfo | None:
    """The recorded server of ``directory`` if its process is still alive."""
    path = _info_path(directory)
    if not path.exists():
        return None
    info = ServerInfo(**json.loads(path.read_text()))
    return info if _is_our_daemon(info.pid, directory) else None


def _is_our_daemon(pid: int, directory: Path) -> bool:
    # The pid may have been reused since: check it is our daemon for this directory.
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return "CassandraDaemon" in cmdline and str(directory / "cassandra.yaml") in cmdline


def start(
    directory: Path | None = None,
    *,
    heap_mb: int = DEFAULT_HEAP_MB,
    timeout: float = START_TIMEOUT_S,
    preexec_cgroup: Path | None = None,
    fast_schema: bool = False,
) -> ServerInfo:
    """Start a server in ``directory`` (or return the one already running there).

    With ``preexec_cgroup`` the server runs inside that (memory) cgroup, with
    small fixed caches and a pre-touched heap (see LEAN_YAML). ``fast_schema``
    (tests) sets ``cassandra.unsafesystem``: system tables skip their flushes,
    which makes CREATE KEYSPACE/TABLE several times faster but loses schema
    changes if the server crashes; Cassandra's own test suite does the same.
    """
    lean = preexec_cgroup is not None
    directory = (directory or default_server_dir()).resolve()
    running = read_info(directory)
    if running is not None:
        return running
    lib = fetch_jars()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "logs").mkdir(exist_ok=True)
    host = "127.0.0.1"
    native_port, storage_port = free_port(host), free_port(host)
    (directory / "cassandra.yaml").write_text(
        cassandra_yaml(directory, host, native_port, storage_port, lean=lean)
    )
    (directory / "logback.xml").write_text(
        LOGBACK_XML.format(log=directory / "logs" / "system.log")
    )
    command = java_command(directory, lib, heap_mb, lean=lean)
    if fast_schema:
        command.insert(-1, "-Dcassandra.unsafesystem=true")
    process = _launch(command, directory, preexec_cgroup)
    info = ServerInfo(process.pid, host, native_port, storage_port, str(directory))
    _info_path(directory).write_text(json.dumps(asdict(info)))
    _wait_until_ready(process, info, timeout)
    return info


# Servers started by this process, kept so that they are reaped (no zombie, no
# "subprocess still running" warning) when stopped from this same process.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _launch(command: list[str], directory: Path, cgroup: Path | None) -> subprocess.Popen[bytes]:
    out = open(directory / "logs" / "stdout.log", "ab")  # noqa: SIM115 - owned by the child
    env = dict(os.environ, MALLOC_ARENA_MAX="4")

    def enter_cgroup() -> None:
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    try:
        process = subprocess.Popen(
            command,
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # survives the CLI that started it; no terminal signals
            preexec_fn=enter_cgroup if cgroup is not None else None,
        )
    finally:
        out.close()
    _CHILDREN[process.pid] = process
    return process


def _wait_until_ready(process: subprocess.Popen[bytes], info: ServerInfo, timeout: float) -> None:
    # The native transport is the last service Cassandra opens during startup.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CassandraServerError(
                f"Cassandra exited during startup (code {process.returncode}); "
                f"log tail:\n{log_tail(Path(info.directory))}"
            )
        if port_open(info.host, info.native_port):
            return
        time.sleep(0.5)
    _terminate(info.pid)
    raise CassandraServerError(
        f"Cassandra did not open its native port within {timeout:.0f} s; it was stopped. "
        f"Log tail:\n{log_tail(Path(info.directory))}"
    )


def log_tail(directory: Path, lines: int = 30) -> str:
    chunks = []
    for name in ("stdout.log", "system.log"):
        path = directory / "logs" / name
        if path.exists():
            chunks.extend(path.read_text(errors="replace").splitlines()[-lines:])
    return "\n".join(chunks)


def stop(directory: Path | None = None, *, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the server of ``directory``; returns False if none was running."""
    directory = (directory or default_server_dir()).resolve()
    info = read_info(directory)
    _info_path(directory).unlink(missing_ok=True)
    if info is None:
        return False
    _terminate(info.pid, timeout)
    return True


def _terminate(pid: int, timeout: float = STOP_TIMEOUT_S) -> None:
    # SIGTERM runs Cassandra's shutdown hook (drains, flushes the commit log).
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None:  # our own child: poll() reaps it
        if child.poll() is None:
            return True
        del _CHILDREN[pid]
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextlib.contextmanager
def memory_budget(megabytes: int | None) -> Iterator[Path | None]:
    """A memory cgroup capped at ``megabytes`` (page cache included), or None if no cap.

    The group is created below this process's own cgroup (cgroup v2
    ``memory.max`` or v1 ``memory.limit_in_bytes``) and removed afterwards; the
    server must have been stopped by then.
    """
    if megabytes is None:
        yield None
        return
    group = _create_memory_group(megabytes * 2**20)
    try:
        yield group
    finally:
        with contextlib.suppress(OSError):
            group.rmdir()


def _create_memory_group(limit: int) -> Path:
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    own = _own_cgroup("" if v2.exists() else "memory")
    base = Path("/sys/fs/cgroup") if v2.exists() else Path("/sys/fs/cgroup/memory")
    if own is None or not (base / own.lstrip("/")).is_dir():
        raise CassandraServerError("no memory cgroup found for this process; run without a budget")
    group = base / own.lstrip("/") / f"veil-cassandra-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        limit_file = "memory.max" if v2.exists() else "memory.limit_in_bytes"
        (group / limit_file).write_text(str(limit))
    except OSError as exc:
        raise CassandraServerError(
            f"cannot create a memory cgroup at {group} ({exc}); run as root with cgroup "
            "memory control delegated, or without a memory budget"
        ) from exc
    return group


def _own_cgroup(controller: str) -> str | None:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(",") or (not controller and controllers == ""):
            return path
    return None


def status(directory: Path | None = None) -> ServerInfo | None:
    return read_info((directory or default_server_dir()).resolve())
