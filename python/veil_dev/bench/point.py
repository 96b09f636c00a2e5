"""``veil bench point``: point SELECTs and an UPDATE by key, Veil beside plaintext on one engine.

Issue 41's statements: three point queries on TPC-H ``orders`` and an
UPDATE by key, each through the DB-API with ``?`` parameters and a fresh key
every execution (so a plan cache keyed on values never hits), Veil's
``veil.connect`` beside the engine's own DB-API (``duckdb`` on an embedded
file, psycopg on PostgreSQL: two databases of one throwaway cluster). The
sides take turns execution by execution, so the machine's load weighs on both
alike; median and p99 of each. Veil's side also splits each execution's time
into the parts Veil records (``FetchStats``: parse, plan and whether the plan
cache hit, encrypt, server, decrypt, local), medians over the run.

Veil's table is loaded with these statements as its workload, so the
designer stores what they use per row (nothing in BLOCKS); both sides get
the same indexes (the key, the customer), Veil's on the DET columns. The statements run
in blocks, one kind after another, the UPDATEs last: a write empties the plan
cache, which would otherwise make every SELECT after it plan again.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veil_dev.bench.report import bar_plot, format_table, write_json

STATEMENTS = {
    "select all": "SELECT * FROM orders WHERE o_orderkey = ?",
    "select price": "SELECT o_totalprice FROM orders WHERE o_orderkey = ?",
    # the key written into the text (pgbench -M simple, psql): the same plan (sql/literals)
    "select price, literal": "SELECT o_totalprice FROM orders WHERE o_orderkey = {}",
    "count by customer": "SELECT count(*) FROM orders WHERE o_custkey = ?",
    "update comment": "UPDATE orders SET o_comment = ? WHERE o_orderkey = ?",
}
# the load's workload: the same statements with constants (the designer reads literals)
WORKLOAD = [
    "SELECT * FROM orders WHERE o_orderkey = 1",
    "SELECT o_totalprice FROM orders WHERE o_orderkey = 1",
    "SELECT count(*) FROM orders WHERE o_custkey = 1",
    "UPDATE orders SET o_comment = 'x' WHERE o_orderkey = 1",
]
# the same indexes on both sides: the key, and the customer the count filters on
INDEXES = [
    "CREATE INDEX orders_key ON orders (o_orderkey)",
    "CREATE INDEX orders_customer ON orders (o_custkey)",
]
PARTS = ("parse", "plan", "encrypt", "server", "decrypt", "local", "other")
DATA = Path.home() / ".cache" / "veil" / "bench-point"

Execute = Callable[[str, list[Any]], list[tuple[Any, ...]]]


def register(benches: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = benches.add_parser(
        "point",
        help="point SELECTs and an UPDATE by key, Veil beside plaintext (DB-API)",
        description="Issue 41's point statements on TPC-H orders through the DB-API with a "
        "fresh key per execution, Veil beside plaintext on the same engine, taking turns: "
        "median and p99 of each, and Veil's time split into parse, plan (cache hits), "
        "encrypt, server, decrypt and local.",
    )
    parser.add_argument("-n", "--executions", type=int, default=1000, help="per statement")
    parser.add_argument("--scale", type=float, default=0.1, help="TPC-H scale (%(default)s)")
    parser.add_argument("--backend", choices=("duckdb", "postgres"), default="duckdb")
    parser.add_argument(
        "--wire",
        action="store_true",
        help="Veil's side through veil serve (psycopg, prepared statements), not its DB-API",
    )
    parser.add_argument("--json", help="results (default bench/point/point_<backend>[_wire].json)")
    parser.add_argument("--png", help="plot (default bench/point/point_<backend>[_wire].png)")
    parser.set_defaults(handler=run_point)


@dataclass
class Timed:
    seconds: list[float]
    parts: dict[str, list[float]]
    hits: int = 0
    statements: list[int] = field(default_factory=list)  # server statements per execution

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.seconds)
        found: dict[str, Any] = {
            "median_ms": 1000 * statistics.median(ordered),
            "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        }
        if self.parts:
            found["parts_median_ms"] = {
                k: 1000 * statistics.median(v) for k, v in self.parts.items() if v
            }
            found["plan_hits"] = self.hits
        if self.statements:
            found["server_statements_median"] = statistics.median(self.statements)
        return found


def run_point(args: argparse.Namespace) -> int:
    source = _orders(args.scale)
    name = f"point_{args.backend}{'_wire' if args.wire else ''}"
    json_path = args.json or f"bench/point/{name}.json"
    png_path = args.png or f"bench/point/{name}.png"
    work = Path(tempfile.mkdtemp(prefix="veil-point-"))
    try:
        with _sides(args.backend, source, work) as (plain, connection, keys, customers):
            if not args.wire:
                cursor = connection.cursor()
                results = _measure(
                    args.executions, plain, _dbapi(cursor), keys, customers, _splitter(cursor)
                )
            else:
                with _wire(work / "client") as veil:
                    results = _measure(args.executions, plain, veil, keys, customers)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = list(os.getloadavg())
    rows = []
    for name, sides in results.items():
        p, v = sides["plaintext"], sides["veil"]
        rows.append(
            [
                name,
                f"{p['median_ms']:.2f}",
                f"{v['median_ms']:.2f}",
                f"{v['median_ms'] / p['median_ms']:.1f}x",
                f"{p['p99_ms']:.2f}",
                f"{v['p99_ms']:.2f}",
                " ".join(f"{k} {ms:.2f}" for k, ms in v.get("parts_median_ms", {}).items()),
                f"{v.get('plan_hits', '-')}/{args.executions}",
                f"{v.get('server_statements_median', 0):g}",
            ]
        )
        sides["ratio"] = v["median_ms"] / p["median_ms"]
        sides["over_ms"] = v["median_ms"] - p["median_ms"]
        sides["goal_met"] = v["median_ms"] <= max(2 * p["median_ms"], p["median_ms"] + 1)
    headers = ["statement", "plain ms", "veil ms", "ratio", "plain p99", "veil p99"]
    # each server statement is one round trip (PostgreSQL: a prepared statement's Bind and
    # Execute after its first run); plaintext's one statement is one
    print(format_table([*headers, "veil parts (median ms)", "plan hits", "statements"], rows))
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    write_json(
        json_path,
        {
            "backend": args.backend,
            "wire": args.wire,
            "scale": args.scale,
            "executions": args.executions,
            "load": load,
            "statements": STATEMENTS,
            "results": results,
        },
    )
    bar_plot(
        png_path,
        list(results),
        {
            "plaintext": [r["plaintext"]["median_ms"] for r in results.values()],
            "veil": [r["veil"]["median_ms"] for r in results.values()],
        },
        title=f"point statements, {args.backend}{', wire' if args.wire else ''}, "
        f"TPC-H SF {args.scale:g} (median)",
        ylabel="ms per execution",
    )
    print(f"wrote {json_path} and {png_path}")
    return 0


def _orders(scale: float) -> Path:
    """A folder holding only ``orders.parquet`` at ``scale`` (generated once, cached)."""
    from veil_dev.tpch.gen import generator, read_table

    folder = DATA / f"sf{scale:g}"
    if not (folder / "orders.parquet").exists():
        import subprocess

        import pyarrow.parquet as pq

        raw = folder / "raw"
        subprocess.run(
            [generator(), "parquet", "-s", f"{scale:g}", "--tables=orders", "-o", str(raw)],
            check=True,
            capture_output=True,
        )
        pq.write_table(read_table(raw, "orders"), folder / "orders.parquet")
        shutil.rmtree(raw)
    return folder


@contextmanager
def _sides(
    backend: str, source: Path, work: Path
) -> Iterator[tuple[Execute, Any, list[int], list[int]]]:
    """How to run a statement on plaintext, Veil's DB-API connection, the keys and customers."""
    import duckdb

    import veil
    from veil.load.loader import load

    orders = source / "orders.parquet"
    with duckdb.connect() as scratch:
        keys = [k for (k,) in scratch.sql(f"SELECT o_orderkey FROM '{orders}'").fetchall()]
        customers = [
            c for (c,) in scratch.sql(f"SELECT DISTINCT o_custkey FROM '{orders}'").fetchall()
        ]
    cluster = None
    if backend == "duckdb":
        plain_db = duckdb.connect(str(work / "plain.duckdb"))
        plain_db.execute(f"CREATE TABLE orders AS SELECT * FROM '{orders}'")
        for index in INDEXES:
            plain_db.execute(index)

        def plain(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
            return plain_db.execute(sql, params).fetchall()

        close_plain = plain_db.close
        veil_url = f"duckdb://{work / 'veil.duckdb'}"
    else:
        import psycopg

        from veil_dev.servers.postgres import ThrowawayCluster

        cluster = ThrowawayCluster()
        cluster.start()
        cluster.create_database("plain")
        cluster.create_database("veil")
        pg = psycopg.connect(cluster.url_for("plain"), autocommit=True)
        _pg_orders(pg, orders)

        def plain(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
            cursor = pg.execute(sql.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []

        close_plain = pg.close
        veil_url = cluster.url_for("veil")
    try:
        load(str(source), veil_url, str(work / "client"), WORKLOAD, progress=lambda _: None)
        connection = veil.connect(work / "client")
        for index in INDEXES:  # on the DET columns (``veil.load.ddl``)
            connection.execute(index)
        try:
            yield plain, connection, keys, customers
        finally:
            connection.close()
    finally:
        close_plain()
        if cluster is not None:
            cluster.stop()


def _pg_orders(pg: Any, orders: Path) -> None:
    """Plaintext ``orders`` on PostgreSQL, typed as the Parquet file is, indexed."""
    import duckdb
    import pyarrow.parquet as pq

    table = pq.read_table(orders)
    with duckdb.connect() as scratch:
        columns = scratch.sql(f"DESCRIBE SELECT * FROM '{orders}'").fetchall()
    ddl = ", ".join(f"{name} {kind}" for name, kind, *_ in columns)
    pg.execute(f"CREATE TABLE orders ({ddl})")
    names = ", ".join(table.column_names)
    with pg.cursor().copy(f"COPY orders ({names}) FROM STDIN") as copy:
        for row in table.to_pylist():
            copy.write_row(list(row.values()))
    for index in INDEXES:
        pg.execute(index)
    pg.execute("ANALYZE orders")


# Veil's side: a statement and its parameters -> its rows and the rows it changed
VeilExecute = Callable[[str, list[Any]], tuple[list[tuple[Any, ...]], int]]


def _dbapi(cursor: Any) -> VeilExecute:
    def run(text: str, params: list[Any]) -> tuple[list[tuple[Any, ...]], int]:
        cursor.execute(text, params)
        return (cursor.fetchall() if cursor.description else []), cursor.rowcount

    return run


def _splitter(cursor: Any) -> Callable[[Timed, float], None]:
    return lambda timed, seconds: _split(timed, cursor, seconds)


@contextmanager
def _wire(client: Path) -> Iterator[VeilExecute]:
    """Veil's side through ``veil serve`` (in this process, no audit log) and psycopg, each
    statement with parameters prepared, as drivers and ORMs send them."""
    import psycopg

    from veil_dev.bench.oltp import served

    with served(client) as port:
        dsn = f"host=127.0.0.1 port={port} user=bench dbname=veil"
        with psycopg.connect(dsn, autocommit=True) as con:

            def run(text: str, params: list[Any]) -> tuple[list[tuple[Any, ...]], int]:
                cursor = con.execute(text.replace("?", "%s"), params, prepare=bool(params))
                return (cursor.fetchall() if cursor.description else []), cursor.rowcount

            yield run


def _measure(
    executions: int,
    plain: Execute,
    veil: VeilExecute,
    keys: list[int],
    customers: list[int],
    split: Callable[[Timed, float], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Each statement ``executions`` times on both sides, taking turns, fresh values each time."""
    rng = random.Random(41)
    results: dict[str, dict[str, Any]] = {}
    for name, sql in STATEMENTS.items():
        plain_times = Timed([], {})
        veil_times = Timed([], {part: [] for part in PARTS} if split else {})
        for number in range(executions):
            if name == "count by customer":
                params: list[Any] = [rng.choice(customers)]
            elif name == "update comment":
                params = [f"point bench {number} {rng.random():.6f}", rng.choice(keys)]
            else:
                params = [rng.choice(keys)]
            text = sql
            if "{}" in sql:  # its value written in
                text, params = sql.format(params[0]), []
            started = time.perf_counter()
            expected = plain(text, params)
            plain_times.seconds.append(time.perf_counter() - started)
            started = time.perf_counter()
            got, changed = veil(text, params)
            seconds = time.perf_counter() - started
            veil_times.seconds.append(seconds)
            if split is not None:
                split(veil_times, seconds)
            if sql.startswith("UPDATE"):  # one row changed (plaintext DuckDB gives its count)
                got, expected = [(changed,)], [(1,)]
            if sorted(map(repr, got)) != sorted(map(repr, expected)):
                raise AssertionError(f"{name} {params}: Veil gave {got}, plaintext {expected}")
        results[name] = {"plaintext": plain_times.summary(), "veil": veil_times.summary()}
    return results


def _split(timed: Timed, cursor: Any, seconds: float) -> None:
    """One execution's time, by the parts Veil recorded (``FetchStats``)."""
    result = cursor._result  # the DB-API's last Result: its stats and plan
    stats = result.stats
    parts = {
        "parse": stats.parse_seconds,
        "plan": stats.plan_seconds,
        "encrypt": stats.encrypt_seconds,
        "server": stats.server_seconds,
        "decrypt": stats.decrypt_seconds,
        "local": stats.local_seconds,
    }
    parts["other"] = max(0.0, seconds - sum(parts.values()))
    for part, value in parts.items():
        timed.parts[part].append(value)
    timed.hits += bool(stats.plan_hit)
    timed.statements.append(stats.statements)
