"""``veil demo``: TPC-H through Veil on an embedded DuckDB server, checked against plaintext.

Generates TPC-H at the given scale factor, loads it encrypted into a DuckDB
file (design from the 22 queries) and plans them, as ``veil load --workload``
does (``veil.session.workload_plans``), runs each query through Veil and on
plaintext DuckDB over the same Parquet files, and prints per query the
plaintext and Veil times of a first run (in a new session, on the plan the
load kept: how long planning took at the load is shown beside it) and of a
run again (the plan cached, as an application repeating a query finds it),
their ratios, the bytes received from the server, and whether the answers agree.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import sqlglot

from veil.frontend.output import format_grid
from veil.load.loader import load
from veil.session.session import Session
from veil.session.workload_plans import plan_workload
from veil_dev.bench.compare import difference
from veil_dev.bench.report import write_json
from veil_dev.tpch.gen import generate
from veil_dev.tpch.queries import query_texts

T = TypeVar("T")


def demo(
    scale_factor: float = 0.1, workdir: str | None = None, json_path: str | None = None
) -> bool:
    """Run the demo; True when every query's answer matched plaintext DuckDB. ``json_path``:
    where to write the table's figures too (``bench/demo``)."""
    root = Path(workdir or tempfile.mkdtemp(prefix="veil-demo-"))
    data, client = root / "tpch", root / "client"
    print(f"generating TPC-H SF {scale_factor:g} in {data} ...", file=sys.stderr)
    generate(scale_factor, data, overwrite=True)
    queries = query_texts()
    started = time.perf_counter()
    server = root / "server.duckdb"
    server.unlink(missing_ok=True)
    load(str(data), f"duckdb:///{server}", str(client), list(queries.values()))
    print(f"loaded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    started = time.perf_counter()
    ahead = plan_workload(client, queries.values())
    print(f"planned {len(ahead)} queries in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    plain = _plaintext(data)
    load_average = [os.getloadavg()[0]]
    session = Session(client)
    try:
        measured = {
            f"Q{number}": _run_one(sql, session, plain, ahead.get(sql))
            for number, sql in queries.items()
        }
    finally:
        session.close()
    load_average.append(os.getloadavg()[0])
    rows = [_row(name, m) for name, m in measured.items()]
    if json_path is not None:
        write_json(json_path, _document(scale_factor, measured, load_average))
    header = ["query", "plaintext ms", "Veil ms", "ratio", "planned at the load ms"]
    header += ["again: plaintext ms", "Veil ms", "ratio", "bytes received", "correct"]
    print(format_grid(header, rows))
    correct = sum(1 for r in rows if r[-1] == "yes")
    print(f"{correct} of {len(rows)} queries gave the plaintext answer")
    print(_medians(rows))
    _next_steps(root, client)
    return correct == len(rows)


def _next_steps(root: Path, client: Path) -> None:
    """Where the demo's files are, how big, and what to try with them."""
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    installed = Path(sys.executable).parent / "veil"
    veil = str(installed) if installed.exists() else "veil"
    print(
        f"""
The demo's files ({size / 1e6:,.0f} MB) are in {root}:
  {root / "tpch"}   TPC-H as Parquet (plaintext)
  {root / "server.duckdb"}   the server's database: ciphertexts only
  {client}   the client directory: key (mode 0600), design
Try next:
  {veil} query {client} "SELECT o_orderpriority, count(*) FROM orders GROUP BY 1"
  {veil} explain {client} "SELECT count(*) FROM orders WHERE o_totalprice > 500000"
  {veil} shell {client}
  {veil} serve {client} --insecure-local   # then: psql -h 127.0.0.1 -p 5433 -U me veil
Remove them with: rm -r {root}""",
        file=sys.stderr,
    )


def _plaintext(data: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    for file in sorted(data.glob("*.parquet")):
        con.execute(f"CREATE TABLE {file.stem} AS SELECT * FROM read_parquet('{file}')")
    return con


def _run_one(
    sql: str, session: Session, plain: duckdb.DuckDBPyConnection, ahead: float | None
) -> dict[str, Any]:
    """A query's first run on each side (Veil's on the plan the load kept, ``ahead`` seconds
    of planning there; planned now if None), then a run again (Veil's plan is cached, as an
    application's repeated query finds it)."""
    plain_ms, expected = _timed(lambda: plain.execute(sql).fetchall())
    try:
        veil_ms, result = _timed(lambda: session.run(sql))
        plain_again, _ = _timed(lambda: plain.execute(sql).fetchall())
        veil_again, _ = _timed(lambda: session.run(sql))
    except Exception as exc:  # the demo reports a failure and goes on
        return {"plaintext_ms": plain_ms, "error": f"{exc}"[:60]}
    ordered = sqlglot.parse_one(sql, read="duckdb").args.get("order") is not None
    problem = difference(result.table, expected, ordered)
    return {
        "plaintext_ms": plain_ms,
        "veil_ms": veil_ms,
        "ratio": veil_ms / max(plain_ms, 0.001),
        "planning_ms": (result.stats.plan_seconds if ahead is None else ahead) * 1000,
        "planned_ahead": ahead is not None,
        "again_plaintext_ms": plain_again,
        "again_veil_ms": veil_again,
        "again_ratio": veil_again / max(plain_again, 0.001),
        "bytes_received": result.stats.bytes_received,
        "problem": problem,
    }


def _row(name: str, m: dict[str, Any]) -> list[object]:
    """One query's line of the table."""
    if "error" in m:
        return [name, f"{m['plaintext_ms']:.1f}", *["-"] * 7, f"error: {m['error']}"]
    return [
        name,
        f"{m['plaintext_ms']:.1f}",
        f"{m['veil_ms']:.1f}",
        f"{m['ratio']:.1f}",
        f"{m['planning_ms']:.1f}",
        f"{m['again_plaintext_ms']:.1f}",
        f"{m['again_veil_ms']:.1f}",
        f"{m['again_ratio']:.1f}",
        f"{m['bytes_received']:,}",
        "yes" if m["problem"] is None else f"NO: {m['problem']}"[:60],
    ]


def _document(
    scale_factor: float, measured: dict[str, dict[str, Any]], load_average: list[float]
) -> dict[str, Any]:
    """The JSON of ``bench/demo``: each query's figures, and each run's median ratio and the
    queries over 4x plaintext."""
    summary: dict[str, Any] = {}
    for key, run in (("ratio", "first"), ("again_ratio", "again")):
        ratios = {name: m[key] for name, m in measured.items() if key in m}
        summary[f"{run}_median_ratio"] = statistics.median(ratios.values()) if ratios else None
        summary[f"{run}_over_4x"] = [name for name, r in ratios.items() if r > 4]
    summary["correct"] = sum(1 for m in measured.values() if m.get("problem", 1) is None)
    summary["queries"] = len(measured)
    return {
        "scale": scale_factor,
        "load": load_average,
        "queries": measured,
        "summary": summary,
    }


def _timed(work: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    done = work()
    return (time.perf_counter() - started) * 1000, done


def _medians(rows: list[list[object]]) -> str:
    """The median ratio of each run, and the queries over 4x plaintext."""
    parts = []
    for at, run in ((3, "first run (plan from the load)"), (7, "run again (plan cached)")):
        ratios = [float(str(r[at])) for r in rows if r[at] != "-"]
        if ratios:
            over = [f"{r[0]} {r[at]}x" for r in rows if r[at] != "-" and float(str(r[at])) > 4]
            parts.append(
                f"{run}: median {statistics.median(ratios):.1f}x plaintext, "
                f"over 4x: {', '.join(over) or 'none'}"
            )
    return "\n".join(parts)
