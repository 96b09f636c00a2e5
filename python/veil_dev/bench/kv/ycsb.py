"""``veil kv bench``: YCSB-style workloads for Veil packs and two baselines (paper 002, §8).

Three clients run the same workloads over the same backend, one after the
other (see :mod:`veil_dev.bench.kv.clients`): ``veil`` (MiniCrypt packs of
``pack_rows`` rows), ``per_row`` (every row compressed and encrypted on its
own, the paper's encrypted baseline) and ``vanilla`` (plaintext rows). Each
client is one thread, except that read-only workloads run on ``threads``
threads when asked, to load the server as the paper's many clients did.

Workloads (each stops after ``ops`` operations or ``seconds``, whichever first):

* ``point_uniform`` / ``point_zipfian``: 100% ``get`` of loaded keys, uniform or
  scrambled Zipfian (YCSB's constant 0.99).
* ``range_1000``: ``range(k, k + 999)``, 1,000 keys each (YCSB short ranges).
* ``write_generic``: 100% overwrites of loaded keys (GENERIC mode: read pack,
  update-if; baselines: blind writes).
* ``write_append``: 100% inserts of new, increasing keys (APPEND mode, with
  its background merges running; baselines: blind inserts).
* ``read_latest``: 50% inserts, 50% ``get`` of recently inserted keys (YCSB
  workload D's "latest" distribution), APPEND mode.

Veil's client-side pack cache is off by default (``pack_cache`` = 0), as in
the paper: every read then decrypts and inflates what the server returns, like
the baselines do. With a cache, repeated reads of a pack skip that work.

Every read is checked against the value written, so a fast wrong answer
cannot pass. ``server_bytes`` is the logical size the server stores for the
loaded table (keys + values + tags). Only 127.0.0.1 is contacted: by default a
temporary SQLite file or a private Cassandra started for the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import numpy as np

import veil.kv
from veil.crypto.keys import KeyLabel, MasterKey
from veil.errors import ParameterError
from veil.kv.backends import open_backend
from veil.kv.backends.sqlite import SQLiteBackend
from veil.kv.envelope import Envelope
from veil.kv.packsize import codec_compress
from veil_dev.bench.kv.clients import PackClient, RowClient

CLIENTS = ("veil", "per_row", "vanilla")
WHOLE_TABLE = "bench_whole"  # the dataset compressed as one blob, one row (store_whole)
WORKLOADS = (
    "point_uniform",
    "point_zipfian",
    "range_1000",
    "write_generic",
    "write_append",
    "read_latest",
)
RANGE_KEYS = 1000
ZIPF_THETA = 0.99
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# One throwaway key per benchmark process: a store is one database, one key.
MASTER = MasterKey.generate()


class Client(Protocol):
    name: str
    tables: list[str]

    def get(self, key: int) -> bytes | None: ...
    def put(self, key: int, value: bytes) -> None: ...
    def put_many(self, items: Any) -> None: ...
    def range(self, low: int, high: int) -> Iterator[tuple[int, bytes]]: ...
    def stored_bytes(self) -> int: ...
    def close(self) -> None: ...


@dataclass
class BenchConfig:
    backend: str = "sqlite"
    url: str | None = None
    dataset: str = "debian-packages"
    records: int = 20_000
    ops: int = 2_000
    seconds: float = 20.0
    pack_rows: int | None = None  # None: the store chooses from the loaded data
    compression: str = "zlib"
    epoch_seconds: float = 2.0
    pack_cache: int = 0
    memory_mb: int | None = None
    heap_mb: int = 1024
    threads: int = 1
    seed: int = 42

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BenchConfig:
        return cls(
            backend=args.backend,
            url=args.url,
            dataset=args.dataset,
            records=args.records,
            ops=args.ops,
            seconds=args.seconds,
            memory_mb=args.memory_mb,
            pack_cache=args.pack_cache,
            compression=args.compression,
            heap_mb=args.heap_mb,
            threads=args.threads,
            pack_rows=args.pack_rows,
        )


@dataclass
class Outcome:
    """What one client did in one workload."""

    latencies_ns: list[int]
    seconds: float
    wrong: int = 0

    def summary(self) -> dict[str, float | int]:
        lat = np.array(self.latencies_ns, dtype=np.float64) / 1e6
        ops = len(self.latencies_ns)
        return {
            "ops": ops,
            "seconds": round(self.seconds, 3),
            "ops_per_s": round(ops / self.seconds, 1) if self.seconds else 0.0,
            "p50_ms": round(float(np.percentile(lat, 50)), 3) if ops else 0.0,
            "p95_ms": round(float(np.percentile(lat, 95)), 3) if ops else 0.0,
            "p99_ms": round(float(np.percentile(lat, 99)), 3) if ops else 0.0,
            "wrong_answers": self.wrong,
        }


class Clock:
    """Runs operations until ``ops`` are done or ``seconds`` have passed.

    Read-only workloads may run on ``threads`` client threads at once (the
    paper saturated the server with many clients); writes always use one.
    """

    def __init__(self, ops: int, seconds: float, threads: int = 1):
        self.ops, self.seconds, self.threads = ops, seconds, threads

    def run(self, operation: Callable[[int], bool], *, parallel: bool = False) -> Outcome:
        threads = self.threads if parallel else 1
        started = time.perf_counter()
        deadline = started + self.seconds
        if threads == 1:
            latencies, wrong = self._worker(operation, range(self.ops), deadline)
            return Outcome(latencies, time.perf_counter() - started, wrong)
        with ThreadPoolExecutor(threads) as pool:
            shares = [range(t, self.ops, threads) for t in range(threads)]
            done = list(pool.map(lambda share: self._worker(operation, share, deadline), shares))
        elapsed = time.perf_counter() - started
        return Outcome([x for lat, _ in done for x in lat], elapsed, sum(w for _, w in done))

    @staticmethod
    def _worker(
        operation: Callable[[int], bool], indices: range, deadline: float
    ) -> tuple[list[int], int]:
        latencies: list[int] = []
        wrong = 0
        for i in indices:
            begin = time.perf_counter_ns()
            ok = operation(i)
            latencies.append(time.perf_counter_ns() - begin)
            wrong += not ok
            if time.perf_counter() > deadline:
                break
        return latencies, wrong


def zipfian_ranks(count: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of ranks 0..count-1 with P(rank i) ~ 1 / (i + 1)^theta."""
    weights = 1.0 / np.arange(1, count + 1, dtype=np.float64) ** ZIPF_THETA
    return rng.choice(count, size=size, p=weights / weights.sum())


@dataclass
class Plan:
    """Pre-drawn keys and values, identical for every client.

    Key ``i`` holds record ``i mod len(values)``: a table may be larger than
    its dataset (the repeats are ``len(values)`` keys apart, far beyond a pack).
    """

    values: list[bytes]
    count: int
    uniform: np.ndarray
    zipfian: np.ndarray
    range_lows: np.ndarray
    overwrite_keys: np.ndarray
    latest_offsets: np.ndarray

    @classmethod
    def draw(cls, values: list[bytes], count: int, ops: int, seed: int) -> Plan:
        rng = np.random.default_rng(seed)
        n = count
        scramble = rng.permutation(n)  # YCSB scrambles Zipfian ranks over the key space
        return cls(
            values=values,
            count=count,
            uniform=rng.integers(0, n, ops),
            zipfian=scramble[zipfian_ranks(n, ops, rng)],
            range_lows=rng.integers(0, max(1, n - RANGE_KEYS), ops),
            overwrite_keys=rng.integers(0, n, ops),
            latest_offsets=zipfian_ranks(min(n, 10_000), ops, rng),
        )

    def value(self, i: int) -> bytes:
        return self.values[i % len(self.values)]

    def items(self) -> Iterator[tuple[int, bytes]]:
        return ((i, self.value(i)) for i in range(self.count))


def run_workload(name: str, client: Client, plan: Plan, clock: Clock, state: dict) -> Outcome:
    """One workload on one client; ``state`` carries the next APPEND key between workloads."""
    n = plan.count
    expected = plan.value
    if name in ("point_uniform", "point_zipfian"):
        keys = plan.uniform if name == "point_uniform" else plan.zipfian
        return clock.run(
            lambda i: client.get(int(keys[i])) == expected(int(keys[i])), parallel=True
        )
    if name == "range_1000":

        def scan(i: int) -> bool:
            low = int(plan.range_lows[i])
            rows = list(client.range(low, low + RANGE_KEYS - 1))
            return len(rows) == min(RANGE_KEYS, n - low) and rows[0][1] == expected(low)

        return clock.run(scan, parallel=True)
    if name == "write_generic":

        def overwrite(i: int) -> bool:
            key = int(plan.overwrite_keys[i])
            client.put(key, expected(key))  # same value: later reads stay checkable
            return True

        return clock.run(overwrite)
    if name == "write_append":

        def append(i: int) -> bool:
            client.put(state["next"], plan.value(state["next"]))
            state["next"] += 1
            return True

        return clock.run(append)
    return clock.run(lambda i: _read_latest_step(client, plan, state, i))


def _read_latest_step(client: Client, plan: Plan, state: dict, i: int) -> bool:
    if i % 2 == 0:
        client.put(state["next"], plan.value(state["next"]))
        state["next"] += 1
        return True
    inserted = state["next"] - state["first"]
    if inserted <= 0:
        return True
    key = state["next"] - 1 - int(plan.latest_offsets[i]) % inserted
    return client.get(key) == plan.value(key)


@contextlib.contextmanager
def store_url(config: BenchConfig) -> Iterator[tuple[str, dict]]:
    """A fresh store on 127.0.0.1 for this run, and facts about its server."""
    if config.url:
        host = urlsplit(config.url).hostname
        if host not in LOOPBACK:
            raise ParameterError(f"the benchmark talks only to 127.0.0.1; got host {host!r}")
        yield _fresh_keyspace(config.url), {"server": "given"}
        return
    with tempfile.TemporaryDirectory(prefix="veil-kv-bench-") as work:
        if config.backend == "sqlite":
            yield f"sqlite:///{work}/bench.db", {"server": "sqlite file"}
            return
        from veil_dev.servers import cassandra as cassandra_server

        directory = Path(work) / "cassandra"
        with cassandra_server.memory_budget(config.memory_mb) as cgroup:
            info = cassandra_server.start(directory, heap_mb=config.heap_mb, preexec_cgroup=cgroup)
            facts: dict[str, Any] = {"server": "private cassandra", "memory_mb": config.memory_mb}
            try:
                yield f"cassandra://{info.contact}/bench", facts
            finally:
                cassandra_server.stop(directory)  # flushes memtables to SSTables
            keyspace = directory / "data" / "data" / "bench"
            facts["disk_bytes"] = disk_bytes(keyspace, facts)
            facts["disk_data_bytes"] = disk_bytes(keyspace, facts, only="Data.db")
            facts["disk_components"] = disk_components(keyspace, facts)


def disk_bytes(keyspace_dir: Path, facts: dict, *, only: str = "") -> dict[str, int]:
    """Bytes of each client's SSTables (Cassandra compresses them with LZ4 itself).

    Veil's compression dictionaries live in the catalogue's table, which other
    tables share; their bytes are added as they are on SQLite. ``only`` keeps
    the files whose names end so (``Data.db``: the rows without the SSTables'
    fixed metadata, ~5 KB of ``Statistics.db`` each).
    """
    dictionaries = facts.get("dictionary_bytes", {})
    return {
        client: dictionaries.get(client, 0)
        + sum(
            f.stat().st_size
            for table in tables
            for table_dir in keyspace_dir.glob(f"{table}-*")
            for f in table_dir.rglob("*")
            if f.is_file() and f.name.endswith(only)
        )
        for client, tables in facts.get("tables", {}).items()
    }


def disk_components(keyspace_dir: Path, facts: dict) -> dict[str, dict[str, int]]:
    """Each client's SSTable bytes by component (``Data.db``, ``Statistics.db``, ...).

    A component is what follows an SSTable file name's last ``-``
    (``nb-1-big-Statistics.db``): which of the fixed files a small table pays for.
    """
    out: dict[str, dict[str, int]] = {}
    for client, tables in facts.get("tables", {}).items():
        parts = out.setdefault(client, {})
        for table in tables:
            for table_dir in keyspace_dir.glob(f"{table}-*"):
                for f in table_dir.rglob("*"):
                    if f.is_file():
                        name = f.name.rsplit("-", 1)[-1]
                        parts[name] = parts.get(name, 0) + f.stat().st_size
    return out


def store_whole(url: str, plan: Plan, facts: dict) -> str:
    """Store the issue's reference, the dataset zlib-compressed as one blob, as one row.

    Its bytes on disk (``disk_bytes["whole"]``) are what the server itself adds
    to a dataset compressed as a whole: a SQLite table's own pages, a
    Cassandra table's fixed per-SSTable files. ``ratios`` compares Veil with
    them as a second figure; the issue's goal stays against the blob's length.
    """
    table = WHOLE_TABLE
    backend = open_backend(url)
    try:
        backend.ensure_table(table)
        blob = zlib.compress(b"".join(v for _, v in plan.items()), 6)
        backend.upsert(table, 0, b"whole", blob, b"")
    finally:
        backend.close()
    facts.setdefault("tables", {})["whole"] = [table]
    return table


def sqlite_pages(backend: object, clients: list[Client], facts: dict, whole: str) -> None:
    """SQLite: each client's pages (table + index) after the load, and after ``VACUUM``."""
    if not isinstance(backend, SQLiteBackend):
        return
    for label in ("disk_bytes_loaded", "disk_bytes"):
        if label == "disk_bytes":
            backend.compact()
        facts[label] = {
            client.name: sum(backend.table_disk_bytes(t) for t in client.tables)
            + (client.store.dictionary_bytes() if isinstance(client, PackClient) else 0)
            for client in clients
        } | {"whole": backend.table_disk_bytes(whole)}


def _fresh_keyspace(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme == "cassandra":
        query = f"?{parts.query}" if parts.query else ""
        return f"cassandra://{parts.netloc}/bench_{uuid.uuid4().hex[:12]}{query}"
    return url


def open_clients(
    url: str, master: MasterKey, config: BenchConfig, mode: str, suffix: str
) -> list[Client]:
    store = veil.kv.open(
        url,
        master,
        mode,
        pack_rows=config.pack_rows,
        compression=config.compression,
        table=f"bench_{suffix}",
        epoch_seconds=config.epoch_seconds if mode == "append" else None,
        pack_cache=config.pack_cache,
    )
    partitions = store.config.partitions
    envelope = Envelope(
        master.derive(KeyLabel("bench-row", suffix)), suffix, config.compression, ()
    )
    return [
        PackClient("veil", store),
        RowClient("per_row", open_backend(url), f"bench_row_{suffix}", partitions, envelope),
        RowClient("vanilla", open_backend(url), f"bench_plain_{suffix}", partitions, None),
    ]


def run(config: BenchConfig) -> dict:
    from veil_dev.bench.kv.datasets import load_records, source_file

    values = load_records(config.dataset, config.records)
    plan = Plan.draw(values, config.records, config.ops, config.seed)
    clock = Clock(config.ops, config.seconds, config.threads)
    result: dict[str, Any] = {"config": dict(config.__dict__), "distinct_values": len(values)}
    result["dataset_file"] = source_file(config.dataset)  # which log, for a generated one
    result["raw_bytes"] = sum(len(v) for _, v in plan.items())
    whole = b"".join(v for _, v in plan.items())
    result["whole_ratio"] = round(len(whole) / len(codec_compress(config.compression)(whole)), 3)
    result["whole_ratio_zlib"] = round(len(whole) / len(zlib.compress(whole, 6)), 3)
    started = time.perf_counter()
    with store_url(config) as (url, facts):
        result["server"] = facts
        result["load"], result["server_bytes"], generic = _generic_phase(
            url, config, plan, clock, facts
        )
        result["workloads"] = generic
        result["workloads"].update(_append_phase(url, config, plan, clock))
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["ratios"] = ratios(result)
    return result


def _generic_phase(url: str, config: BenchConfig, plan: Plan, clock: Clock, facts: dict) -> tuple:
    clients = open_clients(url, MASTER, config, "generic", "g")
    facts["tables"] = {client.name: client.tables for client in clients}
    load, sizes = {}, {}
    workloads: dict[str, dict] = {name: {} for name in WORKLOADS[:4]}
    try:
        items = list(plan.items())
        for client in clients:
            began = time.perf_counter()
            client.put_many(items)
            load[client.name] = round(time.perf_counter() - began, 2)
            sizes[client.name] = client.stored_bytes()
        store = next(c.store for c in clients if isinstance(c, PackClient))
        facts["pack_rows"], facts["pack_choice"] = store.config.pack_rows, store.config.pack_choice
        facts["bucket_bits"] = store.config.bucket_bits
        facts["dictionary_bytes"] = {"veil": store.dictionary_bytes()}
        whole = store_whole(url, plan, facts)
        sqlite_pages(store.backend, clients, facts, whole)
        for name in workloads:
            for client in clients:
                workloads[name][client.name] = run_workload(name, client, plan, clock, {}).summary()
    finally:
        for client in clients:
            client.close()
    return load, sizes, workloads


def _append_phase(url: str, config: BenchConfig, plan: Plan, clock: Clock) -> dict:
    clients = open_clients(url, MASTER, config, "append", "a")
    workloads: dict[str, dict] = {"write_append": {}, "read_latest": {}}
    try:
        for client in clients:
            state = {"next": 0, "first": 0}
            for name in workloads:
                workloads[name][client.name] = run_workload(
                    name, client, plan, clock, state
                ).summary()
    finally:
        for client in clients:
            client.close()
    return workloads


def ratios(result: dict) -> dict[str, float]:
    """The issue's targets, as Veil / per-row baseline ratios."""
    work = result["workloads"]

    def speed(name: str, client: str) -> float:
        return float(work[name][client]["ops_per_s"]) or float("nan")

    disk = result["server"].get("disk_bytes") or {}
    data = result["server"].get("disk_data_bytes") or {}
    raw, whole = result["raw_bytes"], result["whole_ratio_zlib"]
    payload_ratio = raw / result["server_bytes"]["veil"]
    extra = (
        {
            "disk_bytes_per_row_over_veil": round(disk["per_row"] / disk["veil"], 2),
            "veil_disk_ratio": round(raw / disk["veil"], 3),
            "veil_disk_share_of_whole": round(raw / disk["veil"] / whole, 3),
            "veil_disk_over_payload": round(disk["veil"] / result["server_bytes"]["veil"], 3),
        }
        | (
            {"veil_data_files_share_of_whole": round(raw / data["veil"] / whole, 3)}
            if data.get("veil")
            else {}
        )
        | (
            {"veil_disk_share_of_whole_stored": round(disk["whole"] / disk["veil"], 3)}
            if disk.get("whole")
            else {}
        )
        if disk.get("veil")
        else {}
    )
    return extra | {
        "veil_payload_ratio": round(payload_ratio, 3),
        "veil_payload_share_of_whole": round(payload_ratio / whole, 3),
        "range_1000_veil_over_per_row": round(
            speed("range_1000", "veil") / speed("range_1000", "per_row"), 2
        ),
        "append_write_veil_over_per_row": round(
            speed("write_append", "veil") / speed("write_append", "per_row"), 2
        ),
        "point_uniform_per_row_over_veil": round(
            speed("point_uniform", "per_row") / speed("point_uniform", "veil"), 2
        ),
        "server_bytes_per_row_over_veil": round(
            result["server_bytes"]["per_row"] / result["server_bytes"]["veil"], 2
        ),
    }


def summary_lines(result: dict) -> list[str]:
    lines = [
        f"{result['config']['backend']}: {result['config']['records']} records "
        f"({result['raw_bytes']} bytes raw) of {result['config']['dataset']}, "
        f"{result['seconds']} s in all; Veil pack_rows {result['server'].get('pack_rows')}, "
        f"whole-dataset ratio {result['whole_ratio']} (zlib {result['whole_ratio_zlib']}; "
        "the shares below are of the zlib one)",
        "server bytes: "
        + ", ".join(f"{c} {result['server_bytes'][c]}" for c in CLIENTS)
        + "; load s: "
        + ", ".join(f"{c} {result['load'][c]}" for c in CLIENTS),
        f"{'workload':<14}" + "".join(f"{c + ' ops/s':>16}{'p50/p99 ms':>16}" for c in CLIENTS),
    ]
    for name, by_client in result["workloads"].items():
        cells = ""
        for client in CLIENTS:
            s = by_client[client]
            cells += f"{s['ops_per_s']:>16}{s['p50_ms']:>8}/{s['p99_ms']:<7}"
        lines.append(f"{name:<14}{cells}")
    if result["server"].get("disk_bytes"):
        disk = result["server"]["disk_bytes"]
        lines.append(
            "on-disk bytes (SQLite pages after VACUUM, Cassandra SSTables; with Veil's "
            "dictionaries): " + ", ".join(f"{c} {disk[c]}" for c in CLIENTS)
        )
        if disk.get("whole"):
            lines.append(f"the whole dataset as one zlib blob in one row: {disk['whole']}")
    if result.get("dataset_file"):
        source = result["dataset_file"]
        lines.append(
            f"dataset file {source['path']} ({source['bytes']} bytes, sha256 {source['sha256']})"
        )
    lines.append("targets: " + json.dumps(result["ratios"]))
    return lines


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["workloads"])
    fig, (speed_ax, bytes_ax) = plt.subplots(
        1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 1]}
    )
    width = 0.27
    for i, client in enumerate(CLIENTS):
        xs = [j + (i - 1) * width for j in range(len(names))]
        speeds = [result["workloads"][n][client]["ops_per_s"] for n in names]
        speed_ax.bar(xs, speeds, width, label=client)
    speed_ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
    speed_ax.set_yscale("log")
    threads = result["config"].get("threads", 1)
    speed_ax.set_ylabel(f"operations per second (reads: {threads} client threads; log)")
    speed_ax.legend()
    bytes_ax.bar(CLIENTS, [result["server_bytes"][c] / 2**20 for c in CLIENTS])
    bytes_ax.set_ylabel("server MiB (keys + values + tags)")
    config = result["config"]
    fig.suptitle(
        f"veil kv bench, {config['backend']}: {config['records']} records of {config['dataset']}"
        + (f", server memory {config['memory_mb']} MB" if config.get("memory_mb") else "")
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: dict, json_path: Path | None, png_path: Path | None) -> None:
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2) + "\n")
    if png_path:
        plot(result, png_path)
