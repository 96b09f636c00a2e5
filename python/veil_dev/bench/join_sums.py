"""``veil bench join-sums``: SUM / AVG over server joins under ASHE, against plaintext.

Ad-hoc revenue queries over TPC-H's schema that group lineitem's sums by keys
of the tables it joins (regions, nations, segments, priorities, brands, and,
for the other side of the cost rule, customers), on the store ``veil bench
tpch`` loaded (its work directory). Each query runs, alternately and
``--runs`` times (median): on plaintext DuckDB, through Veil as planned
(``auto``: the cost rule decides whether the server sums over the join), and
through Veil with the sums forced onto the server (``always``) and off it
(``never``: the join's rows are fetched and summed on the client). Every
answer is checked against the plaintext's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veil_dev.bench.report import bar_plot, format_table, write_json

if TYPE_CHECKING:  # ``veil --help`` imports this module: no engine or planner at import
    import duckdb

    from veil.session.result import Result
    from veil.session.session import Session

_REVENUE = "SUM(l_extendedprice * (1 - l_discount))"
_JOIN = (
    "lineitem, orders, customer, nation, region WHERE l_orderkey = o_orderkey "
    "AND o_custkey = c_custkey AND c_nationkey = n_nationkey AND n_regionkey = r_regionkey"
)
QUERIES = {
    "by region": f"SELECT r_name, {_REVENUE} AS revenue FROM {_JOIN} GROUP BY r_name ORDER BY 1",
    "by nation, 1995": (
        f"SELECT n_name, {_REVENUE} AS revenue, SUM(l_quantity), COUNT(*) FROM {_JOIN} "
        "AND o_orderdate >= DATE '1995-01-01' AND o_orderdate < DATE '1996-01-01' "
        "GROUP BY n_name ORDER BY 1"
    ),
    "by segment": (
        f"SELECT c_mktsegment, {_REVENUE} AS revenue, AVG(l_quantity) FROM lineitem, orders, "
        "customer WHERE l_orderkey = o_orderkey AND o_custkey = c_custkey "
        "GROUP BY c_mktsegment ORDER BY 1"
    ),
    "by priority, shipped 1996": (
        "SELECT o_orderpriority, SUM(l_quantity), AVG(l_extendedprice), COUNT(*) "
        "FROM lineitem, orders WHERE l_orderkey = o_orderkey AND l_shipdate >= DATE '1996-01-01' "
        "AND l_shipdate < DATE '1997-01-01' GROUP BY o_orderpriority ORDER BY 1"
    ),
    "by brand": (
        f"SELECT p_brand, {_REVENUE} AS revenue FROM lineitem, part WHERE l_partkey = p_partkey "
        "GROUP BY p_brand ORDER BY 1"
    ),
    "by customer (rule: fetch)": (
        f"SELECT c_custkey, {_REVENUE} AS revenue FROM lineitem, orders, customer "
        "WHERE l_orderkey = o_orderkey AND o_custkey = c_custkey "
        "AND o_orderdate >= DATE '1995-01-01' AND o_orderdate < DATE '1995-04-01' "
        "GROUP BY c_custkey ORDER BY revenue DESC, 1 LIMIT 20"
    ),
}
MODES = ("auto", "always", "never")


def register(benches: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = benches.add_parser(
        "join-sums",
        help="SUM / AVG over server joins under ASHE, against plaintext",
        description=(__doc__ or "").split("\n\n", 1)[1],
    )
    parser.add_argument(
        "--work-dir", required=True, help="a work directory of `veil bench tpch` (DuckDB)"
    )
    parser.add_argument("--sf", type=float, default=1.0, help="its scale factor (default 1)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per query and side")
    parser.add_argument("--json", metavar="PATH", help="write the figures here")
    parser.add_argument("--png", metavar="PATH", help="write a bar plot of the ratios here")
    parser.set_defaults(handler=run_join_sums)


def run_join_sums(args: argparse.Namespace) -> int:
    import duckdb

    from veil.session.session import Session

    root = Path(args.work_dir) / f"duckdb_sf{args.sf:g}"
    if not (root / "client").is_dir() or not (root / "plain.duckdb").is_file():
        raise SystemExit(
            f"no TPC-H store in {root}: run `veil bench tpch --sf {args.sf:g} --backend duckdb "
            f"--work-dir {args.work_dir}` first"
        )
    plain = duckdb.connect(str(root / "plain.duckdb"), read_only=True)
    session = Session(root / "client")
    try:
        figures = [_measure(name, sql, plain, session, args.runs) for name, sql in QUERIES.items()]
    finally:
        session.close()
        plain.close()
    headers = ["query", "plain ms", *[f"{m} x" for m in MODES], "summed on server (auto)"]
    rows = [
        [f["query"], f["plain_ms"], *[f[f"{m}_ratio"] for m in MODES], f["auto_summed"]]
        for f in figures
    ]
    print(format_table(headers, rows))
    wrong = [f["query"] for f in figures if f["problem"]]
    document: dict[str, Any] = {"benchmark": "join-sums", "runs": args.runs, "sf": args.sf}
    document["queries"] = figures
    if args.json:
        write_json(args.json, document)
        print(f"wrote {args.json}")
    if args.png:
        series: dict[str, Sequence[float | None]] = {
            m: [float(f[f"{m}_ratio"]) for f in figures] for m in MODES
        }
        bar_plot(
            args.png,
            [f["query"] for f in figures],
            series,
            title=f"veil bench join-sums (SF {args.sf:g}, DuckDB, median of {args.runs})",
            ylabel="Veil / plaintext time",
            log=False,
        )
        print(f"wrote {args.png}")
    if wrong:
        print(f"WRONG answers: {', '.join(wrong)}")
        return 1
    return 0


def _measure(
    name: str, sql: str, plain: duckdb.DuckDBPyConnection, session: Session, runs: int
) -> dict[str, Any]:
    from veil_dev.bench.compare import difference

    expected = plain.sql(sql).fetchall()
    ordered = " ORDER BY " in sql
    times: dict[str, list[float]] = {"plain": [], **{m: [] for m in MODES}}
    last: dict[str, Result] = {}
    problem = None
    for mode in MODES:  # a first run of each: plans cached, answers checked
        last[mode] = _run(session, sql, mode)
        problem = problem or difference(last[mode].table, expected, ordered)
    for _ in range(runs):  # alternately, so that each side sees the same load
        started = time.perf_counter()
        plain.sql(sql).fetchall()
        times["plain"].append(time.perf_counter() - started)
        for mode in MODES:
            started = time.perf_counter()
            last[mode] = _run(session, sql, mode)
            times[mode].append(time.perf_counter() - started)
    plain_s = statistics.median(times["plain"])
    figures: dict[str, Any] = {"query": name, "sql": sql, "plain_ms": plain_s * 1e3}
    for mode in MODES:
        median = statistics.median(times[mode])
        figures[f"{mode}_ms"] = median * 1e3
        figures[f"{mode}_ratio"] = median / plain_s
        figures[f"{mode}_statements"] = last[mode].stats.statements
        figures[f"{mode}_bytes_received"] = last[mode].stats.bytes_received
        figures[f"{mode}_summed"] = _summed_on_server(last[mode])
    figures["problem"] = problem
    return figures


def _run(session: Session, sql: str, mode: str) -> Result:
    session.hom_pushdown = mode
    try:
        return session.run(sql)
    finally:
        session.hom_pushdown = "auto"


def _summed_on_server(result: Result) -> bool:
    plan = result.plan
    fetches = [s.joined for s in plan.scans if s.joined is not None] if plan else []
    return any(f.groups is not None and f.groups.summed is not None for f in fetches)
