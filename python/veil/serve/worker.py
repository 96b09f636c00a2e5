"""One worker of ``veil serve --workers N``: ``python -m veil.serve.worker CONFIG``.

Started by the supervisor (``veil.serve.workers``), never by hand. ``CONFIG``
is JSON: the client directory, the inherited listening socket (``fd``) and
the pipe to say it is ready on (``ready_fd``), the supervisor's pid, and the
options of ``veil serve`` (TLS files, ``trust``, ``audit``, ``metrics``,
``log_level``). The worker serves with an engine of its own until SIGTERM
or SIGINT, or until its supervisor is gone (then nothing would stop it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

# how often a worker checks that its supervisor still runs
_PARENT_CHECK_SECONDS = 0.5


def main(argv: list[str]) -> int:
    config: dict[str, Any] = json.loads(argv[0])
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    server, engine = _start(config)
    try:
        ready = {"pid": os.getpid(), "metrics": engine.metrics and engine.metrics.address}
        os.write(config["ready_fd"], json.dumps(ready).encode() + b"\n")
        os.close(config["ready_fd"])
        while not stopping.wait(_PARENT_CHECK_SECONDS):
            if os.getppid() != config["parent"]:  # the supervisor was killed: no orphans
                break
    finally:
        server.stop()
        engine.close()
    return 0


def _start(config: dict[str, Any]) -> tuple[Any, Any]:
    from veil._native import WireServer
    from veil.serve.cli import log_to_stderr
    from veil.serve.engine import Engine
    from veil.serve.metrics import Metrics

    log_to_stderr(config["log_level"])
    cert = Path(config["tls_cert"]).read_bytes() if config["tls_cert"] else None
    key = Path(config["tls_key"]).read_bytes() if config["tls_key"] else None
    # each worker's own metrics, on a free loopback port: the supervisor sums them
    metrics = Metrics("127.0.0.1:0") if config["metrics"] else None
    engine = Engine(config["client_dir"], audit=config["audit"], metrics=metrics)
    try:
        server = WireServer(engine, "", cert, key, config["trust"], config["fd"])
    except BaseException:
        engine.close()
        raise
    return server, engine


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
