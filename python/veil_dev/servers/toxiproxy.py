"""A network link between Veil's client and its server on one machine: Toxiproxy.

MONOMI measured with the server across a throttled link; on one machine the
link is emulated by Toxiproxy (Shopify's TCP proxy, a Go module): a proxy on a
loopback port forwards to the server, and *toxics* delay and throttle the bytes
in both directions. This kernel has no ``netem``, so the proxy is the way to
add round trips. Presets (:data:`LINKS`): ``lan`` 1 Gbit/s with 0.5 ms round
trips, ``cloud`` 100 Mbit/s with 10 ms, ``monomi`` 10 Mbit/s (MONOMI §8) with
20 ms. Half the round trip is added each way; the rate caps each direction.

Toxiproxy is built with ``go install`` into ``target/toxiproxy/`` (about 40 s
the first time; a ``toxiproxy-server`` on PATH is used as it is) and driven over
its HTTP API with urllib.

    python -m veil_dev.servers.toxiproxy --link cloud --upstream 127.0.0.1:5432
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

from veil.errors import VeilError
from veil_dev.servers.builds import TARGET, go_command, locked
from veil_dev.servers.ports import free_port
from veil_dev.servers.process import ServerProcess

TOXIPROXY_VERSION = "2.5.0"
MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
BUILD_DIR = TARGET / "toxiproxy"
BINARY = BUILD_DIR / f"toxiproxy-server-{TOXIPROXY_VERSION}"
BUILD_TIMEOUT_S = 900.0


class ToxiproxyUnavailableError(VeilError):
    """Toxiproxy could not be built, started or configured."""

    anchor = "server-unavailable"


@dataclass(frozen=True)
class LinkPreset:
    mbit: float  # each direction's rate
    rtt_ms: float  # the round trip the proxy adds

    @property
    def kilobytes_per_second(self) -> int:
        """The rate as Toxiproxy's bandwidth toxic takes it: bytes per millisecond (its KB/s)."""
        return max(1, round(self.mbit * 1e6 / 8 / 1000))


LINKS = {
    "lan": LinkPreset(1000.0, 0.5),
    "cloud": LinkPreset(100.0, 10.0),
    "monomi": LinkPreset(10.0, 20.0),
}


def build() -> Path:
    """The toxiproxy-server binary: on PATH, or built once into target/toxiproxy."""
    found = shutil.which("toxiproxy-server")
    if found:
        return Path(found)
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with locked(BUILD_DIR / ".build.lock"):
        if BINARY.exists():
            return BINARY
        staging = BUILD_DIR / "gobin"
        env = dict(os.environ, CGO_ENABLED="0", GOBIN=str(staging))
        command = [go_command("Toxiproxy", ToxiproxyUnavailableError), "install"]
        command.append(f"{MODULE}@v{TOXIPROXY_VERSION}")
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S, check=False)  # fmt: skip
        if done.returncode != 0:
            raise ToxiproxyUnavailableError(
                f"building Toxiproxy failed (exit {done.returncode}): {done.stderr[-2000:]}"
            )
        (staging / "server").replace(BINARY)
    return BINARY


class ToxiproxyServer(ServerProcess):
    """One toxiproxy-server process; its proxies are made over the HTTP API."""

    kind = "toxiproxy"
    name = "Toxiproxy"
    version = TOXIPROXY_VERSION
    log_name = "toxiproxy.log"
    error = ToxiproxyUnavailableError

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def prepare(self) -> None:
        self.binary = build()

    def command(self) -> list[str]:
        return [str(self.binary), "-host", "127.0.0.1", "-port", str(self.port)]

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                text = answer.read()
        except OSError as exc:
            raise ToxiproxyUnavailableError(f"Toxiproxy {method} {path} failed: {exc}") from exc
        return json.loads(text) if text else None


class Link:
    """A proxy to ``upstream`` (host:port) shaped as a preset, on its own Toxiproxy."""

    def __init__(self, server: ToxiproxyServer, preset: str, listen_port: int) -> None:
        self.server, self.preset, self.port = server, preset, listen_port

    @classmethod
    def start(cls, preset: str, upstream: str, directory: Path | None = None) -> Self:
        if preset not in LINKS:
            raise ToxiproxyUnavailableError(f"no link {preset!r}; one of {', '.join(LINKS)}")
        where = directory or Path(tempfile.mkdtemp(prefix="veil-toxiproxy-"))
        server = ToxiproxyServer(where).start()
        try:
            port = free_port()
            server.api("POST", "/proxies", {"name": "link", "listen": f"127.0.0.1:{port}",
                                            "upstream": upstream, "enabled": True})  # fmt: skip
            for body in toxics(LINKS[preset]):
                server.api("POST", "/proxies/link/toxics", body)
        except BaseException:
            server.stop()
            raise
        return cls(server, preset, port)

    def route(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        parts = urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        netloc = f"{user}127.0.0.1:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    def toxics(self) -> list[dict[str, Any]]:
        """The toxics in force, as Toxiproxy reports them."""
        found: list[dict[str, Any]] = self.server.api("GET", "/proxies/link/toxics")
        return found

    def close(self) -> None:
        self.server.stop()


def toxics(preset: LinkPreset) -> list[dict[str, Any]]:
    """Latency and a rate cap, each in both directions.

    Toxiproxy delays by whole milliseconds: half the round trip each way, rounded
    (``lan``'s 0.5 ms adds nothing to the proxy's own hop, about 0.1 ms on loopback).
    """
    found = []
    for stream in ("upstream", "downstream"):
        latency = {"latency": round(preset.rtt_ms / 2), "jitter": 0}
        found.append({"name": f"latency_{stream}", "type": "latency", "stream": stream,
                      "toxicity": 1.0, "attributes": latency})  # fmt: skip
        rate = {"rate": preset.kilobytes_per_second}
        found.append({"name": f"bandwidth_{stream}", "type": "bandwidth", "stream": stream,
                      "toxicity": 1.0, "attributes": rate})  # fmt: skip
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description="A shaped link to a server, until interrupted")
    parser.add_argument("--link", choices=sorted(LINKS), default="cloud")
    parser.add_argument("--upstream", required=True, help="host:port of the server")
    args = parser.parse_args()
    link = Link.start(args.link, args.upstream)
    print(f"{args.link} link: 127.0.0.1:{link.port} -> {args.upstream}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        link.close()


if __name__ == "__main__":
    raise SystemExit(main())
