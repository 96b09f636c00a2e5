"""``veil serve --workers N``: several processes answering on one listening socket.

One ``veil serve`` process runs every connection's Python (planning,
encryption, decryption) under one interpreter lock, so eight pgbench
clients on two cores get about 1.5 times what one gets. With ``--workers
N`` this process (the supervisor) binds the listening socket, then starts N
worker processes (``python -m veil.serve.worker``) that inherit it; each
accepts connections on it with a wire server and sessions of its own
(``WireServer(..., fd=...)``).

Why a shared socket and not ``SO_REUSEPORT`` (a socket per worker, the
kernel spreading connections by a hash of their addresses): a connection
hashed to a worker waits for that worker, busy or dead (a killed worker's
queued connections are reset), and eight connections hashed onto two
workers split 6/2 or worse three times in ten. On a shared socket any
worker may take any pending connection; the least busy tries first
(``veil_wire``'s accept stagger), a dead one strands nothing, and a port 0
is chosen once.

The supervisor restarts a worker that dies (a kill -9, a crash), and stops
the whole server, loudly and with exit status 2, if workers keep dying
(``_MAX_DEATHS`` within ``_DEATH_WINDOW`` seconds). SIGTERM or SIGINT stops
every worker (each closes its connections and sessions) and then itself; a
worker whose supervisor disappears (kill -9) stops itself within a second.
With ``--metrics``, the supervisor serves the sum of its workers' metrics
(``veil.serve.metrics.serve_summed``).

What the workers share is coordinated as between any processes using one
client directory (docs/serve.md, "Workers"): table locks are ``flock`` files,
row locks the server's, row ids come from the server's counter in disjoint
blocks, and a session reads the design again whenever its file changed
(DDL, a peel), as it reads users.json for grants.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from veil.errors import VeilError

_READY_SECONDS = 120.0  # a worker opens its engine (and metrics) before it says ready
_STOP_SECONDS = 10.0  # then SIGKILL
_MAX_DEATHS = 5
_DEATH_WINDOW = 60.0
_BACKLOG = 1024


class WorkersError(VeilError):
    anchor = "serve"


def default_count(server_url: str) -> int:
    """Workers when ``--workers`` is not given: one per usable core on PostgreSQL, else 1."""
    if not server_url.startswith(("postgresql://", "postgres://")):
        return 1
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cores = len(usable) if usable else os.cpu_count() or 1  # the cores this process may use
    return max(1, min(cores, 8))


def check_count(count: int, server_url: str) -> None:
    """Several workers need a server several processes can open at once."""
    if count < 1:
        raise WorkersError(f"--workers takes a number of processes, 1 or more, not {count}")
    if count > 1 and not server_url.startswith(("postgresql://", "postgres://")):
        raise WorkersError(
            f"--workers {count} needs a PostgreSQL server: this client directory's server "
            f"({server_url.split('?')[0]}) can be open in one process only (an embedded DuckDB "
            "file is locked by the process that opens it); use --workers 1"
        )


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen[bytes]
    metrics: str | None = None  # the worker's own metrics address, when --metrics


class Workers:
    """The worker processes of one ``veil serve --workers N``, and their shared socket."""

    def __init__(self, listen: str, count: int, config: dict[str, Any]):
        self.count = count
        self.config = config  # what every worker is told (``veil.serve.worker``)
        self.socket = _bind(listen)
        host, port = self.socket.getsockname()[:2]
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.workers: list[_Worker] = []
        self.deaths: list[float] = []
        self.restarts = 0
        self._lock = threading.Lock()  # the metrics thread reads ``workers``

    def start(self) -> None:
        """Start every worker; returns once all listen (or raises, with none left running)."""
        try:
            for index in range(self.count):
                self.workers.append(self._spawn(index))
        except BaseException:
            self.stop()
            raise

    def metrics_addresses(self) -> list[str]:
        """Where the running workers serve their own metrics (``--metrics``)."""
        with self._lock:
            return [w.metrics for w in self.workers if w.metrics and w.process.poll() is None]

    def watch(self, stopping: threading.Event) -> None:
        """Restart workers that die until ``stopping`` is set; raise if they keep dying."""
        while not stopping.wait(0.2):
            for slot, worker in enumerate(self.workers):
                code = worker.process.poll()
                if code is None or stopping.is_set():
                    continue
                self._died(worker, code)
                self.restarts += 1
                replacement = self._spawn(worker.index)
                with self._lock:
                    self.workers[slot] = replacement

    def _died(self, worker: _Worker, code: int) -> None:
        how = f"signal {-code}" if code < 0 else f"exit status {code}"
        now = time.monotonic()
        self.deaths = [t for t in self.deaths if now - t < _DEATH_WINDOW] + [now]
        if len(self.deaths) >= _MAX_DEATHS:
            raise WorkersError(
                f"veil serve: worker {worker.index} (pid {worker.process.pid}) died ({how}), "
                f"the {len(self.deaths)}th worker to die within {_DEATH_WINDOW:.0f} s: stopping "
                "the server; its errors are above"
            )
        print(
            f"veil: worker {worker.index} (pid {worker.process.pid}) died ({how}); its "
            "connections are lost, starting another",
            file=sys.stderr,
            flush=True,
        )

    def stop(self) -> None:
        """SIGTERM every worker, SIGKILL those still running after ``_STOP_SECONDS``."""
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _STOP_SECONDS
        for worker in self.workers:
            try:
                worker.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
        self.socket.close()

    def _spawn(self, index: int) -> _Worker:
        readable, writable = os.pipe()
        fd = self.socket.fileno()
        config = dict(self.config, fd=fd, ready_fd=writable, parent=os.getpid(), index=index)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "veil.serve.worker", json.dumps(config)],
                pass_fds=(fd, writable),
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            os.close(readable)
            raise
        finally:
            os.close(writable)  # the worker's copy is its own: EOF here when it exits
        try:
            ready = _read_ready(readable, process)
        finally:
            os.close(readable)
        return _Worker(index, process, ready.get("metrics"))


def _read_ready(readable: int, process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The line a worker writes once it listens; an error if it exits or hangs first."""
    deadline = time.monotonic() + _READY_SECONDS
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([readable], [], [], left)[0]:
            process.kill()
            process.wait()
            raise WorkersError(f"a worker did not start within {_READY_SECONDS:.0f} s")
        chunk = os.read(readable, 4096)
        if not chunk:  # it exited: its error is on standard error already
            code = process.wait()
            raise WorkersError(f"a worker failed to start (exit status {code}); see above")
        data += chunk
    found: dict[str, Any] = json.loads(data)
    return found


def _bind(listen: str) -> socket.socket:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise WorkersError(f"--listen takes ADDRESS:PORT (e.g. 127.0.0.1:5433), not {listen!r}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, int(port)), family=family, backlog=_BACKLOG)
    except OSError as exc:
        raise WorkersError(f"cannot serve on {listen}: {exc}") from None
