"""``veil bench wire``: TPC-H through ``veil serve`` (psycopg) beside the DB-API, in one run.

One client directory, one process: a ``veil serve`` server on a free
loopback port and a DB-API connection answer the same queries alternately
(median of ``--runs`` each, answers compared), so the ratio is the wire's
overhead: protocol, text encoding, psycopg's decoding and the GIL the
in-process server shares with the client. A wide scan measures rows per
second through each path.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

from veil_dev.bench.report import bar_plot, format_table, median_seconds, write_json

SCAN = "SELECT l_orderkey, l_partkey, l_quantity, l_shipdate, l_comment FROM lineitem"


def register(benches: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    wire = benches.add_parser(
        "wire",
        help="TPC-H through veil serve (psycopg) beside the DB-API",
        description="The 22 TPC-H queries and a wide scan through `veil serve` and through "
        "the DB-API on one client directory, alternately, median of --runs.",
    )
    wire.add_argument("client_dir")
    wire.add_argument("--runs", type=int, default=3)
    wire.add_argument("--json", metavar="PATH")
    wire.add_argument("--png", metavar="PATH")
    wire.set_defaults(handler=run_wire)


def _reader(fetch: Callable[[str], Any], sql: str) -> Callable[[], Any]:
    return lambda: fetch(sql)


def run_wire(args: argparse.Namespace) -> int:
    import psycopg

    import veil
    from veil._native import WireServer
    from veil.serve.engine import Engine
    from veil_dev.tpch.queries import query_texts

    server = WireServer(Engine(args.client_dir), "127.0.0.1:0", None, None, True)
    port = server.address.rsplit(":", 1)[1]
    dbapi = veil.connect(args.client_dir)
    wire = psycopg.connect(f"host=127.0.0.1 port={port} user=bench dbname=veil", autocommit=True)
    rows: list[list[object]] = []
    records: list[dict[str, Any]] = []
    try:
        work = [(f"Q{n}", sql) for n, sql in query_texts().items()] + [("scan", SCAN)]
        for name, sql in work:
            local, want = median_seconds(
                _reader(lambda q: dbapi.cursor().execute(q).fetchall(), sql), args.runs
            )
            remote, got = median_seconds(
                _reader(lambda q: wire.execute(q).fetchall(), sql), args.runs
            )
            same = len(got) == len(want)
            record = {
                "query": name,
                "dbapi_seconds": local,
                "wire_seconds": remote,
                "ratio": remote / local,
                "rows": len(want),
                "same_row_count": same,
                "wire_rows_per_second": len(got) / remote if remote else None,
                "dbapi_rows_per_second": len(want) / local if local else None,
            }
            records.append(record)
            rows.append([name, len(want), local, remote, f"{remote / local:.2f}", same])
    finally:
        wire.close()
        dbapi.close()
        server.stop()
    print(format_table(["query", "rows", "DB-API s", "wire s", "ratio", "same rows"], rows))
    ratios = [r["ratio"] for r in records if r["query"] != "scan"]
    summary = {"median_ratio": statistics.median(ratios), "worst_ratio": max(ratios)}
    print(f"median ratio {summary['median_ratio']:.2f}, worst {summary['worst_ratio']:.2f}")
    if args.json:
        write_json(args.json, {"runs": args.runs, "queries": records, "summary": summary})
    if args.png:
        bar_plot(
            args.png,
            [r["query"] for r in records],
            {
                "DB-API": [r["dbapi_seconds"] for r in records],
                "veil serve (psycopg)": [r["wire_seconds"] for r in records],
            },
            title="TPC-H through veil serve vs the DB-API (median seconds)",
            ylabel="seconds",
        )
    return 0
