"""``veil demo``: TPC-H through Veil on an embedded DuckDB server, checked against plaintext.

Generates TPC-H at the given scale factor, loads it encrypted into a DuckDB
file (design from the 22 queries), runs each query through Veil and on
plaintext DuckDB over the same Parquet files, and prints per query the
plaintext and Veil times, their ratio, the bytes received from the server,
and whether the answers agree.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import duckdb
import sqlglot

from veil.frontend.output import format_grid
from veil.load.loader import load
from veil.session.session import Session
from veil_dev.bench.compare import difference
from veil_dev.tpch.gen import generate
from veil_dev.tpch.queries import query_texts


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
    plain = _plaintext(data)
    session = Session(client)
    try:
        rows = [_run_one(number, sql, session, plain) for number, sql in queries.items()]
    finally:
        session.close()
    header = ["query", "plaintext ms", "Veil ms", "ratio", "bytes received", "correct"]
    print(format_grid(header, rows))
    correct = sum(1 for r in rows if r[-1] == "yes")
    print(f"{correct} of {len(rows)} queries gave the plaintext answer")
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
    number: int, sql: str, session: Session, plain: duckdb.DuckDBPyConnection
) -> list[object]:
    started = time.perf_counter()
    expected = plain.execute(sql).fetchall()
    plain_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    try:
        result = session.run(sql)
    except Exception as exc:  # the demo reports a failure and goes on
        return [f"Q{number}", f"{plain_ms:.1f}", "-", "-", "-", f"error: {exc}"[:60]]
    veil_ms = (time.perf_counter() - started) * 1000
    ordered = sqlglot.parse_one(sql, read="duckdb").args.get("order") is not None
    problem = difference(result.table, expected, ordered)
    return [
        f"Q{number}",
        f"{plain_ms:.1f}",
        f"{veil_ms:.1f}",
        f"{veil_ms / max(plain_ms, 0.001):.1f}",
        f"{result.stats.bytes_received:,}",
        "yes" if problem is None else f"NO: {problem}"[:60],
    ]
