"""``veil serve --metrics ADDR:PORT``: Prometheus metrics over HTTP (``prometheus_client``).

Each statement's record (``veil.audit.observe``) updates them; ``/metrics``
answers in Prometheus' text format:

- ``veil_statements_total{kind, outcome}``: statements by kind (query, dml,
  catalog, set...) and outcome (ok, error)
- ``veil_statement_seconds{kind}``: each statement's wall time
- ``veil_phase_seconds{phase}``: time per phase of the statements that had it:
  parse, plan (with any peels), encrypt (constants), fetch (the server's
  statements with transfer and decryption), server, decrypt, local
- ``veil_plan_cache_hits_total``, ``veil_peels_total``, ``veil_rows_total``
  (rows returned or written), ``veil_errors_total{sqlstate}``
- ``veil_open_sessions``: connections open now
- ``veil_fallbacks_total{stage, reason}``: queries answered by fetching whole
  tables because the split plan failed at planning or when it ran, by shape
  (``veil.sql.fallbacks``; docs/sql.md "Fallbacks" lists the expected ones)

The registry is this server's own (two servers in one process, as in the
tests, count apart), but for the fallbacks: those are the process's, counted
where the session runs a plan. Metrics carry no statement text and no value.

With ``--workers N`` each worker process counts its own statements on a
loopback port of its own, and the supervisor's address answers with their
sum (``serve_summed``): the same metrics as one process, whatever N, plus
``veil_workers`` (running) and ``veil_worker_restarts_total``. A worker that
died took its counts with it, so a counter can go down after a restart;
Prometheus' ``rate()`` reads that as a counter reset.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from veil.errors import VeilError
from veil.sql import fallbacks

# from 100 µs (a cached point query's parse) to a minute (a big scan)
_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


class MetricsError(VeilError):
    anchor = "serve"


class Metrics:
    """The metrics of one ``veil serve``, served on ``address`` (``host:port``; port 0: any)."""

    def __init__(self, address: str):
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.statements = Counter(
            "veil_statements", "Statements run, by kind and outcome", ["kind", "outcome"],
            registry=registry,
        )  # fmt: skip
        self.statement_seconds = Histogram(
            "veil_statement_seconds", "Wall time of each statement", ["kind"],
            buckets=_BUCKETS, registry=registry,
        )  # fmt: skip
        self.phase_seconds = Histogram(
            "veil_phase_seconds", "Time of each phase of a statement", ["phase"],
            buckets=_BUCKETS, registry=registry,
        )  # fmt: skip
        self.plan_cache_hits = Counter(
            "veil_plan_cache_hits", "Statements planned from the plan cache", registry=registry
        )
        self.peels = Counter("veil_peels", "Onion layers peeled", registry=registry)
        self.rows = Counter("veil_rows", "Rows returned or written", registry=registry)
        self.errors = Counter(
            "veil_errors", "Failed statements, by SQLSTATE", ["sqlstate"], registry=registry
        )
        self.open_sessions = Gauge("veil_open_sessions", "Connections open now", registry=registry)
        registry.register(_Fallbacks())
        self._server, self._thread = _serve(address, registry)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def record(self, record: dict[str, Any]) -> None:
        kind = str(record["kind"])
        self.statements.labels(kind, record["outcome"]).inc()
        self.statement_seconds.labels(kind).observe(record["seconds"])
        for phase, seconds in record["phases"].items():
            self.phase_seconds.labels(phase).observe(seconds)
        if record["plan_cache"]:
            self.plan_cache_hits.inc()
        self.peels.inc(len(record["peels"]))
        self.rows.inc(max(record["rows"] or 0, 0))
        if record["outcome"] != "ok":
            self.errors.labels(record["sqlstate"]).inc()

    def opened(self) -> None:
        self.open_sessions.inc()

    def closed(self) -> None:
        self.open_sessions.dec()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Fallbacks:
    """``veil_fallbacks_total``, read from the process's counts when scraped."""

    def collect(self) -> list[CounterMetricFamily]:
        family = CounterMetricFamily(
            "veil_fallbacks",
            "Queries answered by fetching whole tables, by stage and shape",
            labels=["stage", "reason"],
        )
        for (stage, shape), count in sorted(fallbacks.counts().items()):
            family.add_metric([stage, shape], count)
        return [family]


class _Summed:
    """The workers' metrics, scraped from each and added up sample by sample."""

    def __init__(self, addresses: Callable[[], list[str]], restarts: Callable[[], int]):
        self.addresses = addresses
        self.restarts = restarts

    def collect(self) -> list[Metric]:
        families: dict[str, Metric] = {}
        sums: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}
        addresses = self.addresses()
        for address in addresses:
            for family in _scrape(address):
                if family.name.endswith("_created"):
                    continue  # each worker's own start time: no sum means anything
                families.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type)
                )
                for sample in family.samples:
                    key = (family.name, sample.name, tuple(sorted(sample.labels.items())))
                    sums[key] = sums.get(key, 0.0) + sample.value
        for (name, sample_name, labels), value in sums.items():
            families[name].add_sample(sample_name, dict(labels), value)
        workers = GaugeMetricFamily(
            "veil_workers", "Worker processes running", value=len(addresses)
        )
        restarts = CounterMetricFamily(
            "veil_worker_restarts", "Workers started again after one died", value=self.restarts()
        )
        return [*families.values(), workers, restarts]


def _scrape(address: str) -> list[Metric]:
    """A worker's metrics; none if it is gone (dying, or being restarted)."""
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as answer:
            return list(text_string_to_metric_families(answer.read().decode()))
    except OSError:
        return []


def serve_summed(
    address: str, addresses: Callable[[], list[str]], restarts: Callable[[], int]
) -> tuple[Any, Any]:
    """Serve on ``address`` the sum of the metrics served at ``addresses()`` (``--workers``).

    Returns the HTTP server and its thread (``shutdown()`` the server to stop)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Summed(addresses, restarts))
    return _serve(address, registry)


def _serve(address: str, registry: CollectorRegistry) -> tuple[Any, Any]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise MetricsError(f"--metrics takes ADDRESS:PORT (e.g. 127.0.0.1:9187), not {address!r}")
    try:
        return start_http_server(int(port), addr=host.strip("[]"), registry=registry)
    except OSError as exc:
        raise MetricsError(f"cannot serve metrics on {address}: {exc}") from None
