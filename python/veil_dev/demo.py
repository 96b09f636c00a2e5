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

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb
import sqlglot

from veil.frontend.output import format_grid
from veil.load.loader import load
from veil.session.session import Session
from veil.session.workload_plans import plan_workload
from veil_dev.bench.compare import difference
from veil_dev.tpch.gen import generate
from veil_dev.tpch.queries import query_texts

T = TypeVar("T")


def demo(scale_factor: float = 0.1, workdir: str | None = None) -> bool:
    """Run the demo; True when every query's answer matched plaintext DuckDB."""
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
    session = Session(client)
    try:
        rows = [
            _run_one(number, sql, session, plain, ahead.get(sql)) for number, sql in queries.items()
        ]
    finally:
        session.close()
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
    number: int,
    sql: str,
    session: Session,
    plain: duckdb.DuckDBPyConnection,
    ahead: float | None,
) -> list[object]:
    """A query's first run on each side (Veil's on the plan the load kept, ``ahead`` seconds
    of planning there; planned now if None), then a run again (Veil's plan is cached, as an
    application's repeated query finds it)."""
    plain_ms, expected = _timed(lambda: plain.execute(sql).fetchall())
    try:
        veil_ms, result = _timed(lambda: session.run(sql))
        plain_again, _ = _timed(lambda: plain.execute(sql).fetchall())
        veil_again, _ = _timed(lambda: session.run(sql))
    except Exception as exc:  # the demo reports a failure and goes on
        return [f"Q{number}", f"{plain_ms:.1f}", *["-"] * 7, f"error: {exc}"[:60]]
    ordered = sqlglot.parse_one(sql, read="duckdb").args.get("order") is not None
    problem = difference(result.table, expected, ordered)
    return [
        f"Q{number}",
        f"{plain_ms:.1f}",
        f"{veil_ms:.1f}",
        f"{veil_ms / max(plain_ms, 0.001):.1f}",
        f"{(result.stats.plan_seconds if ahead is None else ahead) * 1000:.1f}",
        f"{plain_again:.1f}",
        f"{veil_again:.1f}",
        f"{veil_again / max(plain_again, 0.001):.1f}",
        f"{result.stats.bytes_received:,}",
        "yes" if problem is None else f"NO: {problem}"[:60],
    ]


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
