"""``veil bench tpch|tpcds``: a suite's queries on plaintext and through Veil, side by side.

Both sides run in the same engine with the same indexes (``tpch_servers``),
in one run, alternating: plaintext's run, then Veil's, ``--runs`` times; a
query's figure is the median of its runs on each side and their ratio. Veil's
side runs in a child process (``worker``) with a per-query deadline and a
memory cap, so a query that runs away is recorded as ``timeout`` or ``memory``
and the benchmark goes on; each query reports the client's peak resident memory
and whether its split plan fell back to fetching whole tables (``fallback``:
the planner's reason; a fallback is a failure to fix, even when right).

Veil's time is split into server (RemoteSQL execution and fetching its Arrow
result, as ``FetchStats.server_seconds`` measures it), client (the rest of the
wall time: decryption and the local plan, both also reported alone, and
planning) and the bytes received. Without a real link, the time over a
``--bandwidth-mbit`` link is computed (MONOMI §8 uses 10 Mbit/s): server +
bytes / bandwidth + client, plaintext paying its result's bytes on the same
link. With ``--link`` (PostgreSQL), both sides' queries cross a Toxiproxy link
shaped in both directions (``veil_dev.servers.toxiproxy``), so the measured
times are the link's, round trips included, and no link time is computed; Veil's
cost model is calibrated over that link first (``worker``), so the planner
chooses by cost for it (without a link the planner's rules choose, as before).

Every Veil answer is checked against plaintext DuckDB over the same Parquet
files (``veil_dev.bench.compare``: numbers to 1e-9 relative). The JSON records
the commit measured and the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import sqlglot

from veil.backends import Backend, connect
from veil_dev.bench.compare import difference
from veil_dev.bench.limits import MemoryCapExceeded, QueryTimeout, deadline, interrupter
from veil_dev.bench.report import bar_plot, format_table, write_json
from veil_dev.bench.suite import QueryName, Suite
from veil_dev.bench.tpch_servers import BenchServers, design_of, prepare, say, server_bytes
from veil_dev.bench.worker import VeilRun, VeilWorker

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class QueryFigures:
    query: QueryName
    status: str = "ok"  # ok | timeout (side) | memory (Veil) | error (side): ...
    correct: bool | None = None
    fallback: str | None = None  # why Veil's plan fetched whole tables, when it did
    plain_seconds: float | None = None
    veil_seconds: float | None = None
    server_seconds: float | None = None
    client_seconds: float | None = None
    decrypt_seconds: float | None = None  # parts of client_seconds
    local_seconds: float | None = None
    bytes_received: int | None = None
    plain_result_bytes: int | None = None
    statements: int | None = None
    peak_client_bytes: int | None = None  # Veil's client process, highest of the runs
    plain_link_seconds: float | None = None
    veil_link_seconds: float | None = None
    ratio: float | None = None
    link_ratio: float | None = None
    problem: str | None = None


@dataclass
class Bench:
    suite: Suite
    backend: str
    scale_factor: float
    runs: int
    bandwidth_mbit: float
    timeout: float
    memory_cap: int = 6 * 2**30
    link: str | None = None  # a real link's preset (``--link``): no link time is computed
    figures: list[QueryFigures] = field(default_factory=list)

    @property
    def bytes_per_second(self) -> float:
        return self.bandwidth_mbit * 1e6 / 8


def run_bench(args: argparse.Namespace, suite: Suite) -> int:
    link = getattr(args, "link", None)
    suffix = f"_{link}" if link else ""
    stem = f"bench/{suite.name}/{suite.name}_{args.backend}_sf{args.sf:g}{suffix}"
    names = _query_names(suite, args.only)
    bandwidth = args.bandwidth_mbit
    if link:
        from veil_dev.servers.toxiproxy import LINKS

        bandwidth = LINKS[link].mbit
    cap = int(args.memory_cap_gb * 2**30)
    bench = Bench(suite, args.backend, args.sf, args.runs, bandwidth, args.timeout, cap, link)
    load_before = os.getloadavg()
    servers = prepare(suite, args.backend, args.sf, args.work_dir, args.server, args.design, link)
    try:
        space = measure_space(servers)
        run_queries(bench, servers, names)
    finally:
        servers.close()
    document = to_document(bench, servers, space, load_before)
    print(format_table(*table_rows(bench)))
    print(summary_line(document["summary"], space, suite.label))
    json_path, png_path = args.json or f"{stem}.json", args.png or f"{stem}.png"
    write_json(json_path, document)
    plot(png_path, bench)
    print(f"wrote {json_path} and {png_path}")
    return 0 if all(f.correct for f in bench.figures) else 1


def _query_names(suite: Suite, text: str | None) -> list[QueryName]:
    """The suite's queries named in ``text``: ``1,6`` or ``q01,q54`` (either suite)."""
    if not text:
        return list(suite.queries)
    by_key = {_key(str(name)): name for name in suite.queries}
    found: list[QueryName] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if _key(part) not in by_key:
            raise SystemExit(f"{suite.title} has no query {part!r} in this set")
        found.append(by_key[_key(part)])
    return found


def _key(text: str) -> str:
    """``q01``, ``Q1`` and ``1`` name the same query."""
    bare = text.lower().removeprefix("q")
    return str(int(bare)) if bare.isdigit() else text.lower()


def run_queries(bench: Bench, servers: BenchServers, names: list[QueryName]) -> None:
    reference = _reference(bench.suite, servers.data_dir)
    plain = connect(servers.plain_query_url or servers.plain_url)
    if plain.dialect == "postgres":
        # the deadline's cancel cannot reach a read on the backend's ADBC connection, and
        # PostgreSQL runs a statement on after its client gave up: TPC-DS SF 1's q01 kept a
        # core busy for 10 minutes past its 120 s. The server stops it a little after the
        # deadline has fired, so the run still counts as a timeout (both connections: SET)
        plain.execute(f"SET statement_timeout = {int((bench.timeout + 5) * 1000)}")
    worker = VeilWorker(servers.veil_query_dir or servers.client_dir, bench.timeout,
                        bench.memory_cap, calibrate=bench.link is not None)  # fmt: skip
    try:
        for name in names:
            figures = measure_query(bench, name, plain, worker, reference)
            say(
                f"{bench.suite.label(name)}: {figures.status}, ratio {figures.ratio}, "
                f"correct {figures.correct}" + (" (fallback)" if figures.fallback else "")
            )
            bench.figures.append(figures)
    finally:
        worker.close()
        plain.close()
        reference.close()


def measure_query(
    bench: Bench,
    name: QueryName,
    plain: Backend,
    worker: VeilWorker,
    reference: duckdb.DuckDBPyConnection,
) -> QueryFigures:
    """Plaintext's run, then Veil's, ``bench.runs`` times; medians and the check."""
    figures = QueryFigures(name)
    sql = bench.suite.queries[name]
    plain_sql = sql if plain.dialect == "duckdb" else _transpiled(sql, plain.dialect)
    plain_runs: list[tuple[float, int]] = []
    veil_runs: list[VeilRun] = []
    for _ in range(bench.runs):
        if not _attempt(figures, "plaintext", lambda: _timed_plain(bench, plain, plain_sql),
                        plain_runs):  # fmt: skip
            return figures
        if not _attempt(figures, "Veil", lambda: worker.run(sql), veil_runs):
            _plain_figures(figures, plain_runs)
            return figures
    _plain_figures(figures, plain_runs)
    expected = reference.execute(sql).fetchall()
    ordered = sqlglot.parse_one(sql, read="duckdb").args.get("order") is not None
    figures.problem = difference(veil_runs[0].table, expected, ordered)
    figures.correct = figures.problem is None
    figures.fallback = veil_runs[0].fallback
    figures.veil_seconds = statistics.median(r.seconds for r in veil_runs)
    figures.server_seconds = statistics.median(r.stats.server_seconds for r in veil_runs)
    figures.client_seconds = statistics.median(
        r.seconds - r.stats.server_seconds for r in veil_runs
    )
    figures.decrypt_seconds = statistics.median(r.stats.decrypt_seconds for r in veil_runs)
    figures.local_seconds = statistics.median(r.stats.local_seconds for r in veil_runs)
    figures.bytes_received = veil_runs[0].stats.bytes_received
    figures.statements = veil_runs[0].stats.statements
    figures.peak_client_bytes = max(r.peak_bytes for r in veil_runs)
    _derive(bench, figures)
    return figures


def _plain_figures(figures: QueryFigures, runs: list[tuple[float, int]]) -> None:
    if runs:
        figures.plain_seconds = statistics.median(r[0] for r in runs)
        figures.plain_result_bytes = runs[0][1]


def _attempt(figures: QueryFigures, side: str, run: Callable[[], Any], into: list[Any]) -> bool:
    """Append one run's result to ``into``; False with the failure in ``figures.status``."""
    try:
        into.append(run())
        return True
    except QueryTimeout:
        figures.status = f"timeout ({side})"
    except MemoryCapExceeded as exc:
        figures.status = f"memory ({side}): {exc}"[:200]
    except Exception as exc:  # the benchmark records a failure and goes on
        figures.status = f"error ({side}): {exc}"[:200]
    return False


def _derive(bench: Bench, f: QueryFigures) -> None:
    """Ratios, and times over the simulated link (none over a real one)."""
    assert f.plain_seconds is not None and f.veil_seconds is not None
    assert f.server_seconds is not None and f.client_seconds is not None
    f.ratio = f.veil_seconds / max(f.plain_seconds, 1e-6)
    if bench.link:
        return
    rate = bench.bytes_per_second
    f.plain_link_seconds = f.plain_seconds + (f.plain_result_bytes or 0) / rate
    f.veil_link_seconds = f.server_seconds + (f.bytes_received or 0) / rate + f.client_seconds
    f.link_ratio = f.veil_link_seconds / max(f.plain_link_seconds, 1e-6)


def _timed_plain(bench: Bench, plain: Backend, sql: str) -> tuple[float, int]:
    with deadline(bench.timeout, [interrupter(plain)]):
        started = time.perf_counter()
        table = plain.execute(sql)
        return time.perf_counter() - started, table.nbytes


def _transpiled(sql: str, dialect: str) -> str:
    return sqlglot.transpile(sql, read="duckdb", write=dialect)[0]


def _reference(suite: Suite, data: Path) -> duckdb.DuckDBPyConnection:
    """Plaintext DuckDB over the Parquet files: the answers Veil must give."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    for table in suite.tables:
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


def to_document(
    bench: Bench,
    servers: BenchServers,
    space: dict[str, Any],
    load_before: tuple[float, float, float],
) -> dict[str, Any]:
    return {
        "benchmark": bench.suite.name,
        "backend": bench.backend,
        "scale_factor": bench.scale_factor,
        "runs": bench.runs,
        "link": bench.link,
        "planner": "cost, calibrated over the link" if bench.link else "rules (no calibration)",
        "bandwidth_mbit": bench.bandwidth_mbit,
        "timeout_seconds": bench.timeout,
        "memory_cap_bytes": bench.memory_cap,
        "commit": commit(),
        "cpus": os.cpu_count(),
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "load_seconds": servers.load_seconds,
        "space": space,
        "summary": summarise(bench),
        "queries": [asdict(f) for f in bench.figures],
    }


def summarise(bench: Bench) -> dict[str, Any]:
    figures = bench.figures
    ok = [f for f in figures if f.ratio is not None]
    summary: dict[str, Any] = {
        "queries": len(figures),
        "measured": len(ok),
        "correct": sum(1 for f in figures if f.correct),
        "wrong": [f.query for f in figures if f.correct is False],
        "fallbacks": [f.query for f in figures if f.fallback],
        "undocumented_fallbacks": [
            f.query for f in figures if f.fallback and "(documented)" not in f.fallback
        ],
        "timeouts": [f.query for f in figures if f.status.startswith("timeout")],
        "memory": [f.query for f in figures if f.status.startswith("memory")],
        "errors": [f.query for f in figures if f.status.startswith("error")],
    }
    peaks = [f.peak_client_bytes for f in figures if f.peak_client_bytes]
    if peaks:
        worst = max(figures, key=lambda f: f.peak_client_bytes or 0)
        summary["peak_client_bytes"] = {"query": worst.query, "value": max(peaks)}
        summary["peak_client_mib"] = max(peaks) / 2**20
    for key in ("ratio", "link_ratio"):
        values = [getattr(f, key) for f in ok if getattr(f, key) is not None]
        if values:
            worst = max(ok, key=lambda f: getattr(f, key) or 0)
            summary[f"median_{key}"] = statistics.median(values)
            summary[f"geomean_{key}"] = statistics.geometric_mean(values)
            summary[f"worst_{key}"] = {"query": worst.query, "value": getattr(worst, key)}
            summary[f"over_5x_{key}"] = sum(1 for v in values if v > 5)
    return summary


def commit() -> str:
    """The commit measured (``+dirty`` when the tree had changes): figures move with it."""

    def git(*argv: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True,
                              check=False)  # fmt: skip
        return done.stdout.strip()

    head = git("rev-parse", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def table_rows(bench: Bench) -> tuple[list[str], list[list[object]]]:
    mbit = f"{bench.bandwidth_mbit:g} Mbit/s"
    headers = ["query", "plain s", "Veil s", "ratio", "server s", "client s", "bytes", "peak MB"]
    headers += [] if bench.link else [f"Veil @{mbit} s", f"ratio @{mbit}"]
    headers += ["correct"]
    rows: list[list[object]] = []
    for f in bench.figures:
        label = bench.suite.label(f.query)
        if f.ratio is None:
            failed: list[object] = [label, f.plain_seconds, None, f.status[:40]]
            rows.append(failed + [None] * (len(headers) - 4))
            continue
        verdict = "yes" if f.correct else f"NO: {f.problem}"[:40]
        verdict += " (fallback)" if f.fallback else ""
        times = [f.plain_seconds, f.veil_seconds, f.ratio, f.server_seconds, f.client_seconds]
        sizes = [float(f.bytes_received or 0), (f.peak_client_bytes or 0) / 2**20]
        link = [] if bench.link else [f.veil_link_seconds, f.link_ratio]
        rows.append([label, *times, *sizes, *link, verdict])
    return headers, rows


def summary_line(
    summary: dict[str, Any], space: dict[str, Any], label: Callable[[QueryName], str] = str
) -> str:
    parts = [f"{summary['correct']}/{summary['queries']} correct"]
    for key, name in (("ratio", "ratio"), ("link_ratio", "computed link ratio")):
        if f"median_{key}" in summary:
            worst = summary[f"worst_{key}"]
            parts.append(
                f"{name} median {summary[f'median_{key}']:.2f}, "
                f"worst {worst['value']:.2f} ({label(worst['query'])})"
            )
    for key in ("wrong", "fallbacks", "timeouts", "memory", "errors"):
        if summary[key]:
            parts.append(f"{key} {summary[key]}")
    parts.append(f"server space x{space['overhead']:.2f}")
    return "; ".join(parts)


def plot(path: str, bench: Bench) -> None:
    labels = [bench.suite.label(f.query) for f in bench.figures]
    local = "over the link" if bench.link else "local"
    series: dict[str, Sequence[float | None]] = {local: [f.ratio for f in bench.figures]}
    if not bench.link:
        series[f"{bench.bandwidth_mbit:g} Mbit/s link"] = [f.link_ratio for f in bench.figures]
    where = f", {bench.link} link" if bench.link else ""
    bar_plot(
        path,
        labels,
        series,
        title=f"{bench.suite.title} SF {bench.scale_factor:g} on {bench.backend}{where}: "
        "Veil time / plaintext time",
        ylabel="ratio (log)",
    )
