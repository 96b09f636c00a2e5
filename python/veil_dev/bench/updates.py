"""``veil bench updates``: UPDATE in place against delete + append, beside plaintext.

Veil rewrites an updated row under a fresh row id (ASHE's pads and row-bound
nonces are one-time). It can do so by one server ``UPDATE`` of the old rows
(``Backend.updates_in_place``, the default on DuckDB and PostgreSQL) or by
deleting them and appending the new ones (what it did before, and what Spark
still does). One run loads the same accounts table (a DET key, a balance
summed by bucket, a text filler) three ways on each server — plaintext, Veil
in place, Veil by delete + append — and times the same statements on each,
the sides taking turns statement by statement: point updates by key, updates
of 1% of the rows, updates of every row, then point reads. The server settles (PostgreSQL's VACUUM, DuckDB's CHECKPOINT)
after each whole-table update and before the reads, untimed, so the sides'
sizes do not depend on when autovacuum happened to run. Then it counts the
bytes every server table of the side holds (side tables too) and checks the
balances against the plaintext side.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veil_dev.bench.report import bar_plot, format_table, write_json

if TYPE_CHECKING:  # `veil --help` registers this command without the heavy libraries
    import pyarrow as pa

    from veil.backends import Backend

SIDES = ("plaintext", "in place", "delete + append")
BUCKETS = 100  # each bucket holds 1% of the rows
WORKLOAD = [
    "SELECT * FROM accounts WHERE aid = 1",
    "SELECT sum(abalance) FROM accounts WHERE bid = 1",
]


def register(benches: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = benches.add_parser(
        "updates",
        help="UPDATE in place against delete + append, beside plaintext",
        description="Point, 1%% and whole-table UPDATEs through Veil rewriting rows in place "
        "(one server UPDATE) and by delete + append, beside the same statements on plaintext, "
        "on DuckDB and PostgreSQL: median times, server bytes, balances checked.",
    )
    parser.add_argument("--rows", type=int, default=100_000, help="accounts (%(default)s)")
    parser.add_argument("--points", type=int, default=100, help="point updates timed")
    parser.add_argument("--batches", type=int, default=5, help="1%% updates timed")
    parser.add_argument("--wholes", type=int, default=3, help="whole-table updates timed")
    parser.add_argument(
        "--backend", choices=("duckdb", "postgres"), nargs="+", default=["duckdb", "postgres"]
    )
    parser.add_argument(
        "--json", default="bench/updates/updates.json", help="results (%(default)s)"
    )
    parser.add_argument("--png", default="bench/updates/updates.png", help="plot (%(default)s)")
    parser.set_defaults(handler=run_updates)


def accounts(rows: int) -> pa.Table:
    """``rows`` accounts: a key, a bucket of 1% of them, a balance, pgbench's filler."""
    import pyarrow as pa

    ids = pa.array(range(1, rows + 1), pa.int32())
    return pa.table(
        {
            "aid": ids,
            "bid": pa.array([i % BUCKETS for i in range(1, rows + 1)], pa.int32()),
            "abalance": pa.array([0] * rows, pa.int32()),
            "filler": pa.array(["x" * 84] * rows, pa.string()),
        }
    )


def run_updates(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    work = Path(tempfile.mkdtemp(prefix="veil-updates-"))
    results: list[dict[str, Any]] = []
    try:
        source = work / "source"
        source.mkdir()
        pq.write_table(accounts(args.rows), source / "accounts.parquet")
        for backend in args.backend:
            print(f"{backend} ...", flush=True)
            with _servers(backend, work) as urls:
                results += _measure(args, backend, urls, source, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _report(args, results)
    return 0 if all(r["balances_right"] for r in results) else 1


@contextmanager
def _servers(backend: str, work: Path) -> Iterator[dict[str, str]]:
    """A server URL per side: DuckDB files, or databases of one throwaway cluster."""
    if backend == "duckdb":
        yield {side: f"duckdb://{work / (side.replace(' ', '_') + '.duckdb')}" for side in SIDES}
        return
    from veil_dev.servers.postgres import ThrowawayCluster

    cluster = ThrowawayCluster()
    cluster.start()
    try:
        urls = {}
        for number, side in enumerate(SIDES):
            cluster.create_database(f"side{number}")
            urls[side] = cluster.url_for(f"side{number}")
        yield urls
    finally:
        cluster.stop()


def _measure(
    args: argparse.Namespace, backend: str, urls: dict[str, str], source: Path, work: Path
) -> list[dict[str, Any]]:
    """Every side's figures. The sides take turns statement by statement (the
    machine's load then weighs on each alike); each has its own server."""
    rng = random.Random(7)
    sides = {
        side: _side(side, urls[side], source, work / f"{backend}-{side.replace(' ', '_')}")
        for side in SIDES
    }
    times: dict[str, dict[str, list[float]]] = {side: {} for side in SIDES}

    def each(kind: str, statements: list[str]) -> None:
        for sql in statements:
            for side, (run, _, _) in sides.items():
                start = time.perf_counter()
                run(sql)
                times[side].setdefault(kind, []).append(time.perf_counter() - start)

    def settle() -> None:
        """As a server settles between bursts: PostgreSQL's VACUUM frees dead rows' room
        (autovacuum would, at its own time), DuckDB's CHECKPOINT merges updates. Untimed."""
        for _, _, server in sides.values():
            server.execute("VACUUM" if backend == "postgres" else "CHECKPOINT")

    try:
        keys = [rng.randint(1, args.rows) for _ in range(args.points)]
        buckets = [rng.randrange(BUCKETS) for _ in range(args.batches)]
        each(
            "point", [f"UPDATE accounts SET abalance = abalance + 1 WHERE aid = {k}" for k in keys]
        )
        each(
            "batch",
            [f"UPDATE accounts SET abalance = abalance + 2 WHERE bid = {b}" for b in buckets],
        )
        for _ in range(args.wholes):  # each a burst the servers settle after
            each("whole", ["UPDATE accounts SET abalance = abalance - 1"])
            settle()
        each("read", [f"SELECT * FROM accounts WHERE aid = {k}" for k in keys[: args.points // 2]])
        expected = [0] * (args.rows + 1)
        for k in keys:
            expected[k] += 1
        for b in buckets:
            for a in range(b or BUCKETS, args.rows + 1, BUCKETS):
                expected[a] += 2
        total = sum(expected) - args.wholes * args.rows
        check = "SELECT sum(abalance) AS s, count(*) AS n, count(DISTINCT aid) AS d FROM accounts"
        return [
            {
                "backend": backend,
                "side": side,
                "rows": args.rows,
                "point_update_ms": 1000 * statistics.median(times[side]["point"]),
                "batch_update_s": statistics.median(times[side]["batch"]),
                "whole_update_s": statistics.median(times[side]["whole"]),
                "point_read_ms": 1000 * statistics.median(times[side]["read"]),
                "server_bytes": _server_bytes(server),
                "balances_right": list(run(check)) == [total, args.rows, args.rows],
            }
            for side, (run, _, server) in sides.items()
        ]
    finally:
        for _, close, _ in sides.values():
            close()


def _side(
    side: str, url: str, source: Path, client: Path
) -> tuple[Callable[[str], tuple[Any, ...]], Callable[[], None], Backend]:
    """How to run a statement on one side (its first row back), close it, and its server."""
    import pyarrow.parquet as pq

    from veil.backends import connect

    if side == "plaintext":
        server = connect(url)
        server.bulk_load("accounts", pq.read_table(source / "accounts.parquet"))

        def plain(sql: str) -> tuple[Any, ...]:
            rows = server.execute(sql).to_pylist()
            return tuple(rows[0].values()) if rows else ()

        return plain, server.close, server
    from veil.load.loader import load
    from veil.session.session import Session

    load(str(source), url, str(client), WORKLOAD, progress=lambda _: None)
    session = Session(client)
    session.backend.updates_in_place = side == "in place"

    def encrypted(sql: str) -> tuple[Any, ...]:
        rows = session.run(sql).table.to_pylist()
        return tuple(rows[0].values()) if rows else ()

    return encrypted, session.close, session.backend


def _server_bytes(server: Backend) -> int:
    """Bytes of every table the side's server holds (Veil's side tables too)."""
    return sum(server.table_bytes(t) for t in server.table_names())


def _report(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    headers = [
        "server",
        "side",
        "point ms",
        "1% s",
        "all s",
        "read ms",
        "server MB",
        "right",
    ]
    rows = [
        [
            r["backend"],
            r["side"],
            f"{r['point_update_ms']:.2f}",
            f"{r['batch_update_s']:.3f}",
            f"{r['whole_update_s']:.2f}",
            f"{r['point_read_ms']:.2f}",
            f"{r['server_bytes'] / 1e6:.1f}",
            "yes" if r["balances_right"] else "NO",
        ]
        for r in results
    ]
    write_json(args.json, {"rows": args.rows, "load": list(os.getloadavg()), "results": results})
    print(format_table(headers, rows))
    labels = [f"{r['backend']} {m}" for r in results[:: len(SIDES)] for m in ("point", "1%", "all")]
    series: dict[str, Sequence[float | None]] = {
        side: [
            t
            for r in results
            if r["side"] == side
            for t in (r["point_update_ms"] / 1000, r["batch_update_s"], r["whole_update_s"])
        ]
        for side in SIDES
    }
    bar_plot(
        args.png,
        labels,
        series,
        title=f"UPDATE of {args.rows:,} accounts: in place vs delete + append",
        ylabel="seconds (median)",
    )
