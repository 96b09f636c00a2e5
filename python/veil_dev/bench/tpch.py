"""``veil bench tpch``: the 22 TPC-H queries on plaintext and through Veil, side by side.

Both sides run in the same engine with the same indexes (``tpch_servers``).
Per query: the median of ``--runs`` runs on each side and their ratio; Veil's
time split into server (RemoteSQL execution and fetching its Arrow result, as
``FetchStats.server_seconds`` measures it), client (the rest of the wall time:
decryption and the local plan, both also reported alone, and planning) and the
bytes received. With the
server at the other end of a ``--bandwidth-mbit`` link (MONOMI §8 uses
10 Mbit/s) a query takes server + bytes / bandwidth + client; plaintext pays
its result's bytes on the same link. Every Veil answer is checked against
plaintext DuckDB over the same Parquet files (``veil_dev.bench.compare``).

A query that runs longer than ``--timeout`` seconds is interrupted and
recorded as a timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa
import sqlglot

from veil.backends import Backend, connect
from veil.exec.server import FetchStats
from veil.session.session import Session
from veil_dev.bench.compare import difference
from veil_dev.bench.report import bar_plot, format_table, write_json
from veil_dev.bench.tpch_servers import BenchServers, design_of, prepare, say, server_bytes
from veil_dev.tpch.gen import TABLES
from veil_dev.tpch.queries import query_texts

T = TypeVar("T")


class QueryTimeout(Exception):
    """A query ran past the benchmark's per-query time limit."""


@dataclass
class QueryFigures:
    query: int
    status: str = "ok"  # ok | timeout | error: ...
    correct: bool | None = None
    plain_seconds: float | None = None
    veil_seconds: float | None = None
    server_seconds: float | None = None
    client_seconds: float | None = None
    decrypt_seconds: float | None = None  # parts of client_seconds
    local_seconds: float | None = None
    bytes_received: int | None = None
    plain_result_bytes: int | None = None
    statements: int | None = None
    plain_link_seconds: float | None = None
    veil_link_seconds: float | None = None
    ratio: float | None = None
    link_ratio: float | None = None
    problem: str | None = None


@dataclass
class Bench:
    backend: str
    scale_factor: float
    runs: int
    bandwidth_mbit: float
    timeout: float
    figures: list[QueryFigures] = field(default_factory=list)

    @property
    def bytes_per_second(self) -> float:
        return self.bandwidth_mbit * 1e6 / 8


def run_tpch(args: argparse.Namespace) -> int:
    stem = f"bench/tpch/tpch_{args.backend}_sf{args.sf:g}"
    numbers = _query_numbers(args.queries)
    bench = Bench(args.backend, args.sf, args.runs, args.bandwidth_mbit, args.timeout)
    servers = prepare(args.backend, args.sf, args.work_dir, args.server, args.design)
    try:
        space = measure_space(servers)
        run_queries(bench, servers, numbers)
    finally:
        servers.close()
    document = to_document(bench, servers, space)
    print(format_table(*table_rows(bench)))
    print(summary_line(document["summary"], space))
    json_path, png_path = args.json or f"{stem}.json", args.png or f"{stem}.png"
    write_json(json_path, document)
    plot(png_path, bench)
    print(f"wrote {json_path} and {png_path}")
    return 0 if all(f.correct for f in bench.figures) else 1


def _query_numbers(text: str | None) -> list[int]:
    if not text:
        return sorted(query_texts())
    numbers = [int(part) for part in text.split(",") if part.strip()]
    unknown = [n for n in numbers if not 1 <= n <= 22]
    if unknown:
        raise SystemExit(f"TPC-H has queries 1 to 22; got {unknown}")
    return numbers


def run_queries(bench: Bench, servers: BenchServers, numbers: list[int]) -> None:
    texts = query_texts()
    reference = _reference(servers.data_dir)
    plain = connect(servers.plain_url)
    session = Session(servers.client_dir)
    try:
        for number in numbers:
            figures = measure_query(bench, number, texts[number], plain, session, reference)
            say(f"Q{number}: {figures.status}, ratio {figures.ratio}, correct {figures.correct}")
            bench.figures.append(figures)
    finally:
        session.close()
        plain.close()
        reference.close()


def measure_query(
    bench: Bench,
    number: int,
    sql: str,
    plain: Backend,
    session: Session,
    reference: duckdb.DuckDBPyConnection,
) -> QueryFigures:
    figures = QueryFigures(number)
    plain_sql = sql if plain.dialect == "duckdb" else _transpiled(sql, plain.dialect)
    plain_runs = _runs(figures, "plaintext", lambda: _timed_plain(bench, plain, plain_sql), bench)
    if plain_runs is None:
        return figures
    figures.plain_seconds = statistics.median(r[0] for r in plain_runs)
    figures.plain_result_bytes = plain_runs[0][1]
    veil_runs = _runs(figures, "Veil", lambda: _timed_veil(bench, session, sql), bench)
    if veil_runs is None:
        return figures
    expected = reference.execute(sql).fetchall()
    ordered = sqlglot.parse_one(sql, read="duckdb").args.get("order") is not None
    figures.problem = difference(veil_runs[0][1], expected, ordered)
    figures.correct = figures.problem is None
    figures.veil_seconds = statistics.median(r[0] for r in veil_runs)
    figures.server_seconds = statistics.median(r[2].server_seconds for r in veil_runs)
    figures.client_seconds = statistics.median(r[0] - r[2].server_seconds for r in veil_runs)
    figures.decrypt_seconds = statistics.median(r[2].decrypt_seconds for r in veil_runs)
    figures.local_seconds = statistics.median(r[2].local_seconds for r in veil_runs)
    figures.bytes_received = veil_runs[0][2].bytes_received
    figures.statements = veil_runs[0][2].statements
    _derive(bench, figures)
    return figures


def _runs(figures: QueryFigures, side: str, run: Callable[[], T], bench: Bench) -> list[T] | None:
    """``bench.runs`` results of ``run``, or None with the failure in ``figures.status``."""
    try:
        return [run() for _ in range(bench.runs)]
    except QueryTimeout:
        figures.status = f"timeout ({side})"
    except Exception as exc:  # the benchmark records a failure and goes on
        figures.status = f"error ({side}): {exc}"[:200]
    return None


def _derive(bench: Bench, f: QueryFigures) -> None:
    """Ratios, and times over the simulated link."""
    assert f.plain_seconds is not None and f.veil_seconds is not None
    assert f.server_seconds is not None and f.client_seconds is not None
    rate = bench.bytes_per_second
    f.plain_link_seconds = f.plain_seconds + (f.plain_result_bytes or 0) / rate
    f.veil_link_seconds = f.server_seconds + (f.bytes_received or 0) / rate + f.client_seconds
    f.ratio = f.veil_seconds / max(f.plain_seconds, 1e-6)
    f.link_ratio = f.veil_link_seconds / max(f.plain_link_seconds, 1e-6)


def _timed_plain(bench: Bench, plain: Backend, sql: str) -> tuple[float, int]:
    with deadline(bench.timeout, [_interrupter(plain)]):
        started = time.perf_counter()
        table = plain.execute(sql)
        return time.perf_counter() - started, table.nbytes


def _timed_veil(bench: Bench, session: Session, sql: str) -> tuple[float, pa.Table, FetchStats]:
    cancels = [_interrupter(session.backend), session.local.interrupt]
    with deadline(bench.timeout, cancels):
        started = time.perf_counter()
        result = session.run(sql)
        seconds = time.perf_counter() - started
    return seconds, result.table, result.stats


@contextlib.contextmanager
def deadline(seconds: float, cancels: list[Callable[[], Any]]) -> Iterator[None]:
    """Interrupt whatever is running after ``seconds``; raise QueryTimeout then."""
    fired = threading.Event()

    def fire() -> None:
        fired.set()
        for cancel in cancels:
            with contextlib.suppress(Exception):
                cancel()

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except Exception as exc:
        if fired.is_set():
            raise QueryTimeout(f"over {seconds:g} s") from exc
        raise
    finally:
        timer.cancel()
    if fired.is_set():  # finished just as the timer fired: still over the limit
        raise QueryTimeout(f"over {seconds:g} s")


def _interrupter(backend: Backend) -> Callable[[], Any]:
    """Cancel the statement the backend's connection is running (DuckDB, psycopg, Spark)."""
    cancel = getattr(backend, "cancel", None)
    if callable(cancel):
        return cancel
    con = getattr(backend, "_con", None)
    if isinstance(con, duckdb.DuckDBPyConnection):
        return con.interrupt
    return getattr(con, "cancel", lambda: None)


def _transpiled(sql: str, dialect: str) -> str:
    return sqlglot.transpile(sql, read="duckdb", write=dialect)[0]


def _reference(data: Path) -> duckdb.DuckDBPyConnection:
    """Plaintext DuckDB over the Parquet files: the answers Veil must give."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    for table in TABLES:
        con.execute(
            f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{data / f'{table}.parquet'}')"
        )
    return con


def measure_space(servers: BenchServers) -> dict[str, Any]:
    """Every byte each server stores, with Veil's bytes per plaintext table."""
    design = design_of(servers.client_dir)
    plain = server_bytes(servers.plain_url)
    veil = server_bytes(servers.veil_url)
    names: dict[str, str] = {}
    for table in design.tables.values():
        names[table.server_name] = table.name
        if table.hom is not None:
            names[table.hom.server_name] = f"{table.name} (HOM side table)"
        if table.id_counter:
            names[table.id_counter] = f"{table.name} (row-id counter)"
        if table.blocks_table:
            names[table.blocks_table] = f"{table.name} (blocks)"
    plain_total, veil_total = sum(plain.values()), sum(veil.values())
    return {
        "plain_bytes": plain_total,
        "veil_bytes": veil_total,
        "overhead": veil_total / max(plain_total, 1),
        "plain_tables": plain,
        "veil_tables": {names.get(t, t): b for t, b in sorted(veil.items())},
    }


def to_document(bench: Bench, servers: BenchServers, space: dict[str, Any]) -> dict[str, Any]:
    ok = [f for f in bench.figures if f.ratio is not None]
    summary: dict[str, Any] = {
        "queries": len(bench.figures),
        "measured": len(ok),
        "correct": sum(1 for f in bench.figures if f.correct),
        "timeouts": [f.query for f in bench.figures if f.status.startswith("timeout")],
        "errors": [f.query for f in bench.figures if f.status.startswith("error")],
    }
    for key in ("ratio", "link_ratio"):
        values = [getattr(f, key) for f in ok]
        if values:
            worst = max(ok, key=lambda f: getattr(f, key))
            summary[f"median_{key}"] = statistics.median(values)
            summary[f"worst_{key}"] = {"query": worst.query, "value": getattr(worst, key)}
    return {
        "benchmark": "tpch",
        "backend": bench.backend,
        "scale_factor": bench.scale_factor,
        "runs": bench.runs,
        "bandwidth_mbit": bench.bandwidth_mbit,
        "timeout_seconds": bench.timeout,
        "cpus": os.cpu_count(),
        "load_seconds": servers.load_seconds,
        "space": space,
        "summary": summary,
        "queries": [asdict(f) for f in bench.figures],
    }


def table_rows(bench: Bench) -> tuple[list[str], list[list[object]]]:
    mbit = f"{bench.bandwidth_mbit:g} Mbit/s"
    headers = ["query", "plain s", "Veil s", "ratio", "server s", "client s", "bytes"]
    headers += [f"Veil @{mbit} s", f"ratio @{mbit}", "correct"]
    rows: list[list[object]] = []
    for f in bench.figures:
        if f.ratio is None:
            rows.append([f"Q{f.query}", None, None, f.status[:40], *[None] * 5, None])
            continue
        verdict = "yes" if f.correct else f"NO: {f.problem}"[:40]
        times = [f.plain_seconds, f.veil_seconds, f.ratio, f.server_seconds, f.client_seconds]
        link = [float(f.bytes_received or 0), f.veil_link_seconds, f.link_ratio]
        rows.append([f"Q{f.query}", *times, *link, verdict])
    return headers, rows


def summary_line(summary: dict[str, Any], space: dict[str, Any]) -> str:
    parts = [f"{summary['correct']}/{summary['queries']} correct"]
    for key, name in (("ratio", "local"), ("link_ratio", "link")):
        if f"median_{key}" in summary:
            worst = summary[f"worst_{key}"]
            parts.append(
                f"{name} ratio median {summary[f'median_{key}']:.2f}, "
                f"worst {worst['value']:.2f} (Q{worst['query']})"
            )
    if summary["timeouts"]:
        parts.append(f"timeouts {summary['timeouts']}")
    parts.append(f"server space x{space['overhead']:.2f}")
    return "; ".join(parts)


def plot(path: str, bench: Bench) -> None:
    labels = [f"Q{f.query}" for f in bench.figures]
    series: dict[str, Sequence[float | None]] = {
        "local": [f.ratio for f in bench.figures],
        f"{bench.bandwidth_mbit:g} Mbit/s link": [f.link_ratio for f in bench.figures],
    }
    bar_plot(
        path,
        labels,
        series,
        title=f"TPC-H SF {bench.scale_factor:g} on {bench.backend}: Veil time / plaintext time",
        ylabel="ratio (log)",
    )
