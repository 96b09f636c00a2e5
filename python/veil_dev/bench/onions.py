"""``veil bench onions``: TPC-H (or TPC-DS) from a cold adaptive load, peeled by its queries.

One run loads the TPC-H Parquet files as onions (no workload: the server can
compare nothing), then runs each query once (the first run, which peels what
it needs and re-keys its joins) and ``--runs`` times more (median), checking
every answer against plaintext DuckDB over the same files. With
``--workload-client`` (a client directory loaded with the 22 queries as the
workload, e.g. by ``veil bench tpch``) the same queries run there too,
alternately, for the ratio against the workload-designed load. It reports
the leakage at the end (SEEED Figure 7's classes), the peels' throughput per
layer (rows/s, from the peel log) and the load time. ``--policy-template``
loads under a policy template (issue 12's run forbids order on every price,
quantity and date: ``no-order-on-values``). ``--benchmark tpcds`` runs the
TPC-DS query set (``--queries DIR``) over TPC-DS files instead, without
TPC-H's indexes and lineitem's peel throughput. The server's bytes are
counted right after the load too, beside the plaintext's in a DuckDB file.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

from veil import statements
from veil.backends import connect
from veil.design.model import DET, JOIN, OPE
from veil.design.policy import Policy, template_layers
from veil.load.loader import load
from veil.load.sources import open_source
from veil.session.leakage import leakage
from veil.session.onions import Peel, peel_layers
from veil.session.session import Session
from veil_dev.bench.compare import difference
from veil_dev.bench.report import bar_plot, format_table, write_json
from veil_dev.bench.tpch_servers import (
    PRIMARY_KEYS,
    SECONDARY_INDEXES,
    analyze,
    design_of,
    server_bytes,
    veil_index_sql,
)
from veil_dev.servers.postgres import ThrowawayCluster
from veil_dev.tpcds import queries as tpcds_queries
from veil_dev.tpch.queries import query_texts


def run_onions(args: argparse.Namespace) -> int:
    cluster = None
    if args.server == "postgres":  # a throwaway cluster, both loads in it
        cluster = ThrowawayCluster()
        cluster.start()
    try:
        return _run(args, cluster)
    finally:
        if cluster is not None:
            cluster.stop()


def _run(args: argparse.Namespace, cluster: ThrowawayCluster | None) -> int:
    server = cluster.create_database("onions") if cluster is not None else args.server
    workload_client = args.workload_client
    if cluster is not None and workload_client:
        workload_client = _workload_load(
            args.data, cluster.create_database("workload"), workload_client
        )
    policy = _policy(args.data, args.policy_template)
    started = time.perf_counter()
    load(args.data, server, args.client_dir, progress=lambda _: None, policy=policy)
    load_seconds = time.perf_counter() - started
    tpch = args.benchmark == "tpch"
    session = Session(args.client_dir)
    loaded_bytes = sum(session.backend.table_bytes(n) for n in _server_tables(session))
    plain_bytes = _plain_bytes(args.data)
    print(
        f"onion load: {load_seconds:.1f} s, {loaded_bytes / 1e6:.1f} MB on the server "
        f"(plaintext {plain_bytes / 1e6:.1f} MB)",
        flush=True,
    )
    started = time.perf_counter()
    if tpch:
        _index(session)
    index_seconds = time.perf_counter() - started
    plain = _plain(args.data)
    other = Session(workload_client) if workload_client else None
    rows = []
    try:
        for number, sql in _queries(args).items():
            rows.append(_query(number, sql, session, other, plain, args.runs))
            print(_line(rows[-1]), flush=True)
        report = leakage(session)
        peels = session.client.peel_log()
        measured = _peel_alone(session) if tpch else {}
        stored = sum(session.backend.table_bytes(n) for n in _server_tables(session))
    finally:
        session.close()
        if other is not None:
            other.close()
    document = {
        "benchmark": args.benchmark,
        "server": args.server,
        "policy_template": args.policy_template,
        "load_seconds": round(load_seconds, 2),
        "index_seconds": round(index_seconds, 2),
        "loaded_bytes": loaded_bytes,
        "plain_bytes": plain_bytes,
        "server_bytes": stored,
        "queries": rows,
        "correct": sum(r["correct"] for r in rows),
        "leakage_totals": report.totals(),
        "columns": len(report.columns),
        "peel_throughput": {**measured, **_rekeys(peels)},
        "peels": peels,
    }
    _print_summary(document)
    if args.json:
        write_json(args.json, document)
    if args.png:
        labels = [_label(r["query"]) for r in rows]
        series: dict[str, Sequence[float | None]] = {
            "first run (peels)": [r["first_seconds"] for r in rows],
            "later runs": [r["later_seconds"] for r in rows],
        }
        if other is not None:
            series["workload-designed load"] = [r["workload_seconds"] for r in rows]
        title = f"{'TPC-H' if tpch else 'TPC-DS'} from a cold onion load"
        bar_plot(args.png, labels, series, title=title, ylabel="seconds")
    return 0


def _queries(args: argparse.Namespace) -> dict[int, str] | dict[str, str]:
    if args.benchmark == "tpch":
        return query_texts()
    directory = Path(args.queries) if args.queries else tpcds_queries.DEFAULT_QUERY_DIR
    return tpcds_queries.query_texts(directory)


def _label(number: int | str) -> str:
    return f"Q{number}" if isinstance(number, int) else str(number)


def _plain_bytes(data: str) -> int:
    """The plaintext's bytes in a DuckDB file (every table), the unit of the space ratio."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "plain.duckdb"
        con = duckdb.connect(str(path))
        for file in sorted(Path(data).glob("*.parquet")):
            con.execute(f"CREATE TABLE {file.stem} AS SELECT * FROM read_parquet('{file}')")
        con.close()
        return sum(server_bytes(f"duckdb:///{path}").values())


def _workload_load(data: str, url: str, client_dir: str) -> str:
    """A workload-designed load (the 22 queries) with the TPC-H indexes, for the ratio."""
    started = time.perf_counter()
    load(data, url, client_dir, list(query_texts().values()), lambda _: None)
    veil = connect(url)
    try:
        for statement in veil_index_sql(design_of(Path(client_dir))):
            veil.execute(statement)
        analyze(veil)
    finally:
        veil.close()
    print(f"workload-designed load: {time.perf_counter() - started:.1f} s", flush=True)
    return client_dir


def _index(session: Session) -> None:
    """The TPC-H key indexes, through Veil's CREATE INDEX (on the DET and JOIN onions)."""
    for table, columns in [*PRIMARY_KEYS.items(), *SECONDARY_INDEXES]:
        statements.run(session, f"CREATE INDEX ON {table} ({', '.join(columns)})")
    analyze(session.backend)


def _policy(data: str, template: str | None) -> Policy | None:
    if template is None:
        return None
    con, tables = open_source(data)
    pairs = [(t.name, c.name) for t in tables for c in t.columns(con)]
    con.close()
    return Policy(columns=template_layers(template, pairs))


def _plain(data: str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for file in sorted(Path(data).glob("*.parquet")):
        con.execute(f"CREATE TABLE {file.stem} AS SELECT * FROM read_parquet('{file}')")
    return con


def _query(
    number: int | str,
    sql: str,
    session: Session,
    other: Session | None,
    plain: duckdb.DuckDBPyConnection,
    runs: int,
) -> dict[str, Any]:
    expected = plain.execute(sql).fetchall()
    ordered = "order by" in sql.lower()
    peels_before = len(session.client.peel_log())
    started = time.perf_counter()
    first = session.run(sql)
    first_seconds = time.perf_counter() - started
    adjustments = session.client.peel_log()[peels_before:]
    later, theirs = [], []
    for _ in range(runs):
        started = time.perf_counter()
        session.run(sql)
        later.append(time.perf_counter() - started)
        if other is not None:
            started = time.perf_counter()
            other.run(sql)
            theirs.append(time.perf_counter() - started)
    return {
        "query": number,
        "correct": difference(first.table, expected, ordered) is None,
        "first_seconds": first_seconds,
        # an event's seconds are its statement's, shared by the columns it peeled
        "peel_seconds": sum(
            float(str(e.get("seconds") or 0)) / int(str(e.get("columns") or 1)) for e in adjustments
        ),
        "adjustments": len(adjustments),
        "later_seconds": statistics.median(later),
        "workload_seconds": statistics.median(theirs) if theirs else None,
    }


def _line(row: dict[str, Any]) -> str:
    against = (
        f", workload-designed {row['workload_seconds']:.3f} s "
        f"(x{row['later_seconds'] / row['workload_seconds']:.2f})"
        if row["workload_seconds"]
        else ""
    )
    return (
        f"{_label(row['query'])}: {'ok' if row['correct'] else 'WRONG'}; first {row['first_seconds']:.2f} s "
        f"({row['adjustments']} adjustments, {row['peel_seconds']:.2f} s), later "
        f"{row['later_seconds']:.3f} s{against}"
    )


def _peel_alone(session: Session) -> dict[str, float]:
    """Rows per second of one layer of lineitem coming off alone: DET, OPE, JOIN.

    Columns no TPC-H query peels (l_comment's DET, l_extendedprice's OPE,
    l_linenumber's JOIN), after the 22 queries.
    """
    found = {}
    for column, scheme in (("l_comment", DET), ("l_extendedprice", OPE), ("l_linenumber", JOIN)):
        enc = session.design.table("lineitem").onion_of(column, scheme)
        if enc is None or enc.outer is None:
            continue
        events = peel_layers(session, [Peel("lineitem", column, scheme)], "veil bench onions")
        if events:
            found[f"{scheme} peel"] = float(str(events[0]["rows"])) / float(
                str(events[0]["seconds"])
            )
    return found


def _rekeys(peels: list[dict[str, object]]) -> dict[str, float]:
    """Rows per second of the JOIN re-keys of the big tables (work grows with distinct values)."""
    rates = [
        float(str(e["rows"])) / float(str(e["seconds"]))
        for e in peels
        if str(e.get("layer")).startswith("JOIN with") and float(str(e.get("rows") or 0)) >= 100_000
    ]
    return {"JOIN re-key": statistics.median(rates)} if rates else {}


def _server_tables(session: Session) -> list[str]:
    return [n for t in session.design.tables.values() for n in [t.server_name, *t.side_tables()]]


def _print_summary(document: dict[str, Any]) -> None:
    rows = document["queries"]
    later = [r["later_seconds"] / r["workload_seconds"] for r in rows if r["workload_seconds"]]
    if later:
        print(f"later runs / workload-designed: median x{statistics.median(later):.2f}")
    totals = document["leakage_totals"]
    print(
        format_table(
            ["columns", "RND %", "DET %", "OPE %", "HOM %"],
            [[document["columns"], *(round(totals[k], 1) for k in ("RND", "DET", "OPE", "HOM"))]],
        )
    )
    print(
        f"correct: {document['correct']}/{len(rows)}; peel throughput (rows/s): {document['peel_throughput']}"
    )
