"""``veil bench tpch|tpcds``: a suite's queries on plaintext and through Veil, side by side.

Both sides run in the same engine with the same indexes (``tpch_servers``),
in one run, alternating: plaintext's run, then Veil's, ``--runs`` times; a
query's figure is the median of its runs on each side and their ratio. Veil's
side runs in a child process (``worker``) with a per-query deadline and a
memory cap, so a query that runs away is recorded as ``timeout`` or ``memory``
and the benchmark goes on (a plaintext run past the deadline is not repeated, and Veil's
runs still count: plaintext's time is then a lower bound and the ratio an upper bound,
``analytic_report``); each query reports the client's peak resident memory
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
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import duckdb
import sqlglot

from veil.backends import Backend, connect
from veil_dev.bench.analytic_report import (
    Bench,
    QueryFigures,
    plot,
    summarise,
    summary_line,
    table_rows,
)
from veil_dev.bench.compare import difference
from veil_dev.bench.limits import MemoryCapExceeded, QueryTimeout, deadline, interrupter
from veil_dev.bench.report import format_table, write_json
from veil_dev.bench.space_columns import bytes_by_kind
from veil_dev.bench.suite import QueryName, Suite
from veil_dev.bench.tpch_servers import BenchServers, design_of, prepare, say, server_bytes
from veil_dev.bench.worker import VeilRun, VeilWorker

ROOT = Path(__file__).resolve().parents[3]


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
                f"{bench.suite.label(name)}: {figures.status}, ratio {_said_ratio(figures)}, "
                f"correct {figures.correct}" + (" (fallback)" if figures.fallback else "")
            )
            bench.figures.append(figures)
    finally:
        worker.close()
        plain.close()
        reference.close()


def _said_ratio(figures: QueryFigures) -> str:
    if figures.ratio_at_most is not None:
        return f"<= {figures.ratio_at_most:.3g} (plaintext timed out)"
    return "None" if figures.ratio is None else f"{figures.ratio:.3g}"


def measure_query(
    bench: Bench,
    name: QueryName,
    plain: Backend,
    worker: VeilWorker,
    reference: duckdb.DuckDBPyConnection,
) -> QueryFigures:
    """Plaintext's run, then Veil's, ``bench.runs`` times; medians and the check.

    A plaintext run past the deadline is not repeated (one timeout says enough), and
    Veil still runs: plaintext's time is then a lower bound (``plain_seconds_at_least``)
    and the ratio an upper bound (``ratio_at_most``). TPC-DS SF 1's q01 on PostgreSQL
    (correlated subqueries) is such a query, and one of Veil's fastest against plaintext.
    """
    figures = QueryFigures(name)
    sql = bench.suite.queries[name]
    plain_sql = sql if plain.dialect == "duckdb" else _transpiled(sql, plain.dialect)
    plain_runs: list[tuple[float, int]] = []
    veil_runs: list[VeilRun] = []
    for _ in range(bench.runs):
        if figures.plain_seconds_at_least is None and not _attempt(
            figures, "plaintext", lambda: _timed_plain(bench, plain, plain_sql), plain_runs
        ):
            if not figures.status.startswith("timeout"):
                return figures  # plaintext failed: there is no answer to compare against
            figures.plain_seconds_at_least = bench.timeout
            figures.status = f"timeout (plaintext, over {bench.timeout:g} s)"
        if not _attempt(figures, "Veil", lambda: worker.run(sql), veil_runs):
            _plain_figures(figures, plain_runs)
            return figures
    _plain_figures(figures, plain_runs)
    _veil_figures(figures, veil_runs, reference, sql)
    _derive(bench, figures)
    return figures


def _veil_figures(
    figures: QueryFigures,
    runs: list[VeilRun],
    reference: duckdb.DuckDBPyConnection,
    sql: str,
) -> None:
    """Veil's medians, and its first answer checked against plaintext DuckDB's."""
    expected = reference.execute(sql).fetchall()
    ordered = sqlglot.parse_one(sql, read="duckdb").args.get("order") is not None
    figures.problem = difference(runs[0].table, expected, ordered)
    figures.correct = figures.problem is None
    figures.fallback = runs[0].fallback
    figures.veil_seconds = statistics.median(r.seconds for r in runs)
    figures.server_seconds = statistics.median(r.stats.server_seconds for r in runs)
    figures.client_seconds = statistics.median(r.seconds - r.stats.server_seconds for r in runs)
    figures.decrypt_seconds = statistics.median(r.stats.decrypt_seconds for r in runs)
    figures.local_seconds = statistics.median(r.stats.local_seconds for r in runs)
    figures.bytes_received = runs[0].stats.bytes_received
    figures.statements = runs[0].stats.statements
    figures.peak_client_bytes = max(r.peak_bytes for r in runs)


def _plain_figures(figures: QueryFigures, runs: list[tuple[float, int]]) -> None:
    # a run that finished before another timed out makes no median: the bound stands alone
    if runs and figures.plain_seconds_at_least is None:
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
    """Ratios (upper bounds when plaintext timed out), and times over the simulated link
    (none over a real one)."""
    assert f.veil_seconds is not None
    assert f.server_seconds is not None and f.client_seconds is not None
    plain = f.plain_seconds if f.plain_seconds is not None else f.plain_seconds_at_least
    assert plain is not None
    ratio = f.veil_seconds / max(plain, 1e-6)
    bounded = f.plain_seconds is None
    f.ratio, f.ratio_at_most = (None, ratio) if bounded else (ratio, None)
    if bench.link:
        return
    rate = bench.bytes_per_second
    plain_link = plain + (f.plain_result_bytes or 0) / rate
    f.veil_link_seconds = f.server_seconds + (f.bytes_received or 0) / rate + f.client_seconds
    link_ratio = f.veil_link_seconds / max(plain_link, 1e-6)
    if bounded:
        f.link_ratio_at_most = link_ratio
    else:
        f.plain_link_seconds, f.link_ratio = plain_link, link_ratio


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
        # each main table's bytes by kind of column (DuckDB only): where the overhead lies
        "veil_kinds": bytes_by_kind(servers.veil_url, design),
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


def commit() -> str:
    """The commit measured (``+dirty`` when the tree had changes): figures move with it."""

    def git(*argv: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True,
                              check=False)  # fmt: skip
        return done.stdout.strip()

    head = git("rev-parse", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
