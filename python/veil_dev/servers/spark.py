"""Spark for tests and benchmarks: the process's local Spark, and a standalone cluster.

``start_local(cores)`` starts this process's Spark application (``spark-local[N]``)
once, after checking for Java, so a test run pays the JVM's start once and every
backend after it gets a session on it. ``StandaloneCluster`` starts a master and
workers on loopback with PySpark's own ``spark-class`` (``python -m veil_dev.servers.spark``
does it from a shell), for the ``spark://`` check that queries run unchanged on a
cluster; ``stop`` ends exactly the processes it started.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from veil.backends.base import ServerUnavailableError
from veil_dev.servers.ports import free_port, port_open

HOST = "127.0.0.1"
_START_SECONDS = 60


def check_java() -> str:
    """The ``java`` Spark will run, or a clear error saying how to get one."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ServerUnavailableError(
            "Spark needs Java 17 or later and none was found (no java on PATH, no JAVA_HOME); "
            "install it (Debian: apt-get install openjdk-17-jre-headless; scripts/bootstrap.sh "
            "does) and run again"
        )
    return java


def local_url(warehouse: Path, cores: int = 2) -> str:
    return f"spark-local[{cores}]?warehouse={warehouse}"


def start_local(cores: int = 2) -> None:
    """Start this process's local Spark application now (idempotent)."""
    from veil.backends.spark_session import parse_url, session_for

    check_java()
    scratch = Path(tempfile.gettempdir())
    session_for(parse_url(local_url(scratch, cores)))


def spark_home() -> Path:
    """PySpark's own Spark distribution (its ``bin/spark-class`` starts the daemons)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    """A standalone Spark master and ``workers`` worker processes on loopback."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port = 0
        self.directory = Path(tempfile.mkdtemp(prefix="veil-spark-"))
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    def url(self, warehouse: Path) -> str:
        return f"{self.master_url}?warehouse={warehouse}"

    def start(self) -> None:
        check_java()
        self.port = free_port()
        atexit.register(self.stop)
        self._daemon(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", HOST, "--port", str(self.port), "--webui-port", str(free_port()),
        )  # fmt: skip
        _wait_for(HOST, self.port, "the Spark master")
        for number in range(self.workers):
            self._daemon(
                f"worker{number}",
                "org.apache.spark.deploy.worker.Worker",
                "--host", HOST, "--cores", str(self.cores), "--memory", self.memory,
                "--webui-port", str(free_port()), "--work-dir", str(self.directory / f"w{number}"),
                self.master_url,
            )  # fmt: skip
        time.sleep(3)  # the workers register with the master

    def _daemon(self, name: str, main: str, *args: str) -> None:
        env = dict(os.environ, SPARK_LOCAL_IP=HOST, PYSPARK_PYTHON=sys.executable)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")]
        )
        log = open(self.directory / f"{name}.log", "wb")  # noqa: SIM115 (the daemon's lifetime)
        command = [str(spark_home() / "bin" / "spark-class"), main, *args]
        self._processes.append(
            subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        )

    def stop(self) -> None:
        """Stop the daemons this object started (workers first), then remove their files."""
        atexit.unregister(self.stop)
        for process in reversed(self._processes):
            process.terminate()
        for process in reversed(self._processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        self._processes.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


def _wait_for(host: str, port: int, what: str) -> None:
    deadline = time.monotonic() + _START_SECONDS
    while not port_open(host, port):
        if time.monotonic() > deadline:
            raise ServerUnavailableError(f"{what} did not start on {host}:{port}")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    """Start a loopback cluster, print its master URL, stop it on Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="1g", help="memory per worker")
    args = parser.parse_args(argv)
    # a shell's background job ignores SIGINT: SIGTERM (kill PID) stops the daemons too
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    cluster = StandaloneCluster(args.workers, args.cores, args.memory)
    cluster.start()
    print(cluster.master_url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    raise SystemExit(main())
