"""In-process A/B of point and range reads: Veil stores against the per-row client.

``veil kv bench`` runs each client for a fixed time, one after the other, so
on a shared machine a run measures the other processes as much as the store
(its throughputs swing 2-3x between runs). Here every client lives in one
process on its own SQLite file, and each round runs the same random gets (and
ranges) through every client in a rotating order; the figure is the median
over rounds of the per-round ratio of CPU time per operation. Issue 14's
rounds report point reads as Veil ÷ per-row and ranges as per-row ÷ Veil.

    python -m veil_dev.bench.kv.inprocess dpkg-log --records 5273 --blocks 0 150
    (block rows 0: the table's own choice; --json FILE appends this process's
    figures, per-round timings included, to a JSON list in FILE)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

RANGE_KEYS = 1000


class Reader(Protocol):
    name: str

    def get(self, key: int) -> bytes | None: ...
    def range(self, low: int, high: int) -> Iterable[tuple[int, bytes]]: ...


@dataclass
class Timings:
    """µs per get and ms per range (CPU or wall), one entry per round, by client name."""

    points: dict[str, list[float]] = field(default_factory=dict)
    ranges: dict[str, list[float]] = field(default_factory=dict)

    def point_ratio(self, name: str, baseline: str = "per_row") -> float:
        """Median over rounds of ``name``'s time per get ÷ the baseline's."""
        return _median_ratio(self.points[name], self.points[baseline])

    def range_speedup(self, name: str, baseline: str = "per_row") -> float:
        """Median over rounds of the baseline's time per range ÷ ``name``'s."""
        return _median_ratio(self.ranges[baseline], self.ranges[name])


def _median_ratio(top: Sequence[float], bottom: Sequence[float]) -> float:
    return statistics.median(a / b for a, b in zip(top, bottom, strict=True))


def alternate(
    readers: Sequence[Reader],
    count: int,
    *,
    rounds: int = 9,
    gets: int = 3000,
    ranges: int = 0,
    seed: int = 1,
    clock: Callable[[], float] = time.process_time,
) -> Timings:
    """Time ``readers`` on the same random keys of ``0..count``, rotating their order."""
    import numpy as np

    rng = np.random.default_rng(seed)
    timings = Timings({r.name: [] for r in readers}, {r.name: [] for r in readers})
    for number in range(rounds):
        keys = rng.integers(0, count, gets).tolist()
        lows = rng.integers(0, max(1, count - RANGE_KEYS), ranges).tolist()
        turn = number % len(readers)
        order = [*readers[turn:], *readers[:turn]]
        for reader in order:
            began = clock()
            for key in keys:
                reader.get(key)
            timings.points[reader.name].append((clock() - began) / gets * 1e6)
        for reader in order if ranges else ():
            began = clock()
            for low in lows:
                for _ in reader.range(low, low + RANGE_KEYS - 1):
                    pass
            timings.ranges[reader.name].append((clock() - began) / ranges * 1e3)
    return timings


def run(
    values: list[bytes],
    block_rows: Sequence[int],
    work: Path,
    *,
    rounds: int = 9,
    gets: int = 3000,
    ranges: int = 0,
    server: str | None = None,
) -> tuple[Timings, dict[str, dict[str, int | None]]]:
    """Load ``values`` under keys 0.. into one Veil store per ``block_rows`` (0:
    the store's choice) and the per-row client, then :func:`alternate`.

    Each client has its own SQLite file in ``work``, or with ``server`` (a
    store URL such as ``cassandra://host:port/keyspace``) its own table there,
    timed by the wall clock.
    """
    import veil.kv
    from veil.crypto.keys import KeyLabel, MasterKey
    from veil.kv.backends import open_backend
    from veil.kv.envelope import Envelope
    from veil_dev.bench.kv.clients import PackClient, RowClient

    master = MasterKey.generate()
    items = list(enumerate(values))
    readers: list[PackClient | RowClient] = []
    partitions = 1
    facts: dict[str, dict[str, int | None]] = {}
    for rows in block_rows:
        name = f"veil_{rows or 'chosen'}"
        store = veil.kv.open(
            server or f"sqlite:///{work / name}.db",
            master,
            block_rows=rows or None,
            compression="zstd-dict",
            table=name,
            pack_cache=0,
        )
        store.put_many(items)
        client = PackClient(name, store)
        facts[name] = {
            "pack_rows": store.config.pack_rows,
            "block_rows": store.config.block_rows,
            "stored_bytes": client.stored_bytes(),
        }
        readers.append(client)
        partitions = store.config.partitions
    envelope = Envelope(master.derive(KeyLabel("bench-row", "row")), "row", "zstd-dict", ())
    row_backend = open_backend(server or f"sqlite:///{work}/row.db")
    row = RowClient("per_row", row_backend, "row", partitions, envelope)
    row.put_many(items)
    readers.append(row)
    clock = time.process_time if server is None else time.perf_counter
    try:
        timings = alternate(
            readers, len(values), rounds=rounds, gets=gets, ranges=ranges, clock=clock
        )
    finally:
        for reader in readers:
            reader.close()
    return timings, facts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--blocks", type=int, nargs="+", default=[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--gets", type=int, default=3000)
    parser.add_argument("--ranges", type=int, default=0, help="1,000-key ranges a round")
    parser.add_argument("--json", type=Path, help="append this run's figures to a JSON list")
    parser.add_argument(
        "--backend",
        choices=("sqlite", "cassandra"),
        default="sqlite",
        help="cassandra: a private node for the run, rounds timed by the wall clock",
    )
    args = parser.parse_args(argv)
    from veil_dev.bench.kv.datasets import load_records

    values = load_records(args.dataset, args.records)
    with (
        tempfile.TemporaryDirectory(prefix="veil-kv-ab-") as work,
        _server(args.backend) as server,
    ):
        timings, facts = run(
            values,
            args.blocks,
            Path(work),
            rounds=args.rounds,
            gets=args.gets,
            ranges=args.ranges,
            server=server,
        )
    baseline = statistics.median(timings.points["per_row"])
    for name, fact in facts.items():
        line = (
            f"{name} {fact}: point {statistics.median(timings.points[name]):.2f} µs"
            f" vs per-row {baseline:.2f}: {timings.point_ratio(name):.3f}x"
        )
        if args.ranges:
            line += f"; range per-row ÷ Veil {timings.range_speedup(name):.2f}"
        print(line)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {load}")
    if args.json is not None:
        _append_json(args.json, args.dataset, len(values), timings, facts, load, args.backend)
    return 0


@contextlib.contextmanager
def _server(backend: str) -> Iterator[str | None]:
    """None for SQLite (a file per client), else a private Cassandra's store URL."""
    if backend == "sqlite":
        yield None
        return
    from veil_dev.bench.kv.ycsb import BenchConfig, store_url

    with store_url(BenchConfig(backend=backend)) as (url, _facts):
        yield url


def _append_json(
    path: Path,
    dataset: str,
    records: int,
    timings: Timings,
    facts: dict[str, dict[str, int | None]],
    load: str,
    backend: str = "sqlite",
) -> None:
    """Add one process's figures to the JSON list in ``path`` (created if absent)."""
    runs = json.loads(path.read_text()) if path.exists() else []
    runs.append(
        {
            "dataset": dataset,
            "records": records,
            "backend": backend,
            "clock": "process CPU" if backend == "sqlite" else "wall",
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load": load,
            "stores": facts,
            "point_ratio": {name: timings.point_ratio(name) for name in facts},
            "range_speedup": (
                {name: timings.range_speedup(name) for name in facts}
                if timings.ranges["per_row"]
                else {}
            ),
            "points_us": timings.points,
            "ranges_ms": timings.ranges,
        }
    )
    path.write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
