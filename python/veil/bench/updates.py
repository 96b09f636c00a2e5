"""``veil bench updates``: UPDATE in place against delete + append, beside plaintext.

Veil rewrites an updated row under a fresh row id (ASHE's pads and row-bound
nonces are one-time). It can do so by one server ``UPDATE`` of the old rows
(``Backend.updates_in_place``, the default on DuckDB and PostgreSQL) or by
deleting them and appending the new ones (what it did before, and what Spark
still does). One run loads the same accounts table (a DET key, a balance
summed by bucket, a text filler) three ways on each server — plaintext, Veil
in place, Veil by delete + append — and times the same statements on each:
point updates by key, updates of 1% of the rows, updates of every row, then
point reads once the server settled (PostgreSQL's VACUUM, DuckDB's
CHECKPOINT). It counts the bytes every server table of the side holds (side
tables too), before and after settling, and checks the balances against the
plaintext side.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from veil.backends import Backend, connect
from veil.bench.report import bar_plot, format_table, write_json

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
    parser.add_argument("--json", default="bench/updates.json", help="results (%(default)s)")
    parser.add_argument("--png", default="bench/updates.png", help="plot (%(default)s)")
    parser.set_defaults(handler=run_updates)


def accounts(rows: int) -> pa.Table:
    """``rows`` accounts: a key, a bucket of 1% of them, a balance, pgbench's filler."""
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
    work = Path(tempfile.mkdtemp(prefix="veil-updates-"))
    results: list[dict[str, Any]] = []
    try:
        source = work / "source"
        source.mkdir()
        pq.write_table(accounts(args.rows), source / "accounts.parquet")
        for backend in args.backend:
            with _servers(backend, work) as urls:
                for side in SIDES:
                    print(f"{backend}: {side} ...", flush=True)
                    results.append(_measure(args, backend, side, urls[side], source, work))
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
    from veil.servers.postgres import ThrowawayCluster

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
    args: argparse.Namespace, backend: str, side: str, url: str, source: Path, work: Path
) -> dict[str, Any]:
    rng = random.Random(7)
    run, close, server = _side(side, url, source, work / f"{backend}-{side.replace(' ', '_')}")
    expected = [0] * (args.rows + 1)
    try:
        keys = [rng.randint(1, args.rows) for _ in range(args.points)]
        buckets = [rng.randrange(BUCKETS) for _ in range(args.batches)]
        point = _times(
            run, [f"UPDATE accounts SET abalance = abalance + 1 WHERE aid = {k}" for k in keys]
        )
        batch = _times(
            run, [f"UPDATE accounts SET abalance = abalance + 2 WHERE bid = {b}" for b in buckets]
        )
        whole = _times(run, ["UPDATE accounts SET abalance = abalance - 1"] * args.wholes)
        unsettled = _server_bytes(server)
        # as a server settles between bursts: PostgreSQL's VACUUM makes dead rows' room
        # free (autovacuum would, at its own time), DuckDB's CHECKPOINT merges updates
        server.execute("VACUUM" if backend == "postgres" else "CHECKPOINT")
        reads = _times(
            run, [f"SELECT * FROM accounts WHERE aid = {k}" for k in keys[: args.points // 2]]
        )
        for k in keys:
            expected[k] += 1
        for b in buckets:
            for a in range(b or BUCKETS, args.rows + 1, BUCKETS):
                expected[a] += 2
        total = sum(expected) - args.wholes * args.rows
        got = run(
            "SELECT sum(abalance) AS s, count(*) AS n, count(DISTINCT aid) AS d FROM accounts"
        )
        server_bytes = _server_bytes(server)
    finally:
        close()
    return {
        "backend": backend,
        "side": side,
        "rows": args.rows,
        "point_update_ms": 1000 * statistics.median(point),
        "batch_update_s": statistics.median(batch),
        "whole_update_s": statistics.median(whole),
        "point_read_ms": 1000 * statistics.median(reads),
        "server_bytes": server_bytes,
        "server_bytes_before_settling": unsettled,
        "balances_right": list(got) == [total, args.rows, args.rows],
    }


def _side(
    side: str, url: str, source: Path, client: Path
) -> tuple[Callable[[str], tuple[Any, ...]], Callable[[], None], Backend]:
    """How to run a statement on one side (its first row back), close it, and its server."""
    if side == "plaintext":
        server = connect(url)
        server.bulk_load("accounts", pq.read_table(source / "accounts.parquet"))

        def plain(sql: str) -> tuple[Any, ...]:
            rows = server.execute(sql).to_pylist()
            return tuple(rows[0].values()) if rows else ()

        return plain, server.close, server
    from veil.exec.session import Session
    from veil.load.loader import load

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


def _times(run: Callable[[str], object], statements: list[str]) -> list[float]:
    times = []
    for sql in statements:
        start = time.perf_counter()
        run(sql)
        times.append(time.perf_counter() - start)
    return times


def _report(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    headers = [
        "server",
        "side",
        "point ms",
        "1% s",
        "all s",
        "read ms",
        "MB",
        "MB settled",
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
            f"{r['server_bytes_before_settling'] / 1e6:.1f}",
            f"{r['server_bytes'] / 1e6:.1f}",
            "yes" if r["balances_right"] else "NO",
        ]
        for r in results
    ]
    print(format_table(headers, rows))
    write_json(args.json, {"rows": args.rows, "load": _load_average(), "results": results})
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


def _load_average() -> list[float]:
    import os

    return list(os.getloadavg())
