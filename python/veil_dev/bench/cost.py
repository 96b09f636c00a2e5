"""``veil bench cost``: the cost model's estimates against measured times, on the 22 TPC-H queries.

For a client directory holding TPC-H (any design, either backend), it
calibrates (``veil calibrate``), then for each query plans it, estimates the
plan (``veil.cost.model``) and runs it ``--runs`` times after one warm-up run
(median wall time). It reports each query's estimate beside its time, the
ratio, and Spearman's rank correlation across the queries (MONOMI's planner
needs the ranks right more than the seconds: issue 13 asks for at least 0.9).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any


def register(benches: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = benches.add_parser(
        "cost",
        help="the cost model's estimates against measured times on the 22 TPC-H queries",
        description="Calibrate, then estimate and time each TPC-H query's plan (median of "
        "--runs after a warm-up) on a loaded client directory; Spearman rank correlation.",
    )
    bench.add_argument("client_dir", help="a client directory holding the TPC-H tables")
    bench.add_argument("--runs", type=int, default=3, help="timed runs per query (median)")
    bench.add_argument("--bandwidth", type=_bandwidth, default=None, help="as veil explain's")
    bench.add_argument("--json", metavar="PATH")
    bench.add_argument("--png", metavar="PATH")
    bench.set_defaults(handler=_run)


def _bandwidth(text: str) -> float | None:
    from veil.cost.model import parse_bandwidth  # imported when used: `veil --help` stays light

    return parse_bandwidth(text)


def _run(args: argparse.Namespace) -> int:
    from sqlglot import exp

    from veil.cost.calibration import calibration_of
    from veil.cost.model import estimate_plan
    from veil.exec.server import FetchStats
    from veil.session.session import Session
    from veil_dev.bench.report import bar_plot, format_table, write_json
    from veil_dev.tpch.queries import query_texts

    session = Session(args.client_dir)
    rows: list[dict[str, Any]] = []
    try:
        started = time.perf_counter()
        calibration = calibration_of(session, again=True)
        calibrate_seconds = time.perf_counter() - started
        for number, sql in query_texts().items():
            tree: exp.Expr = exp.maybe_parse(sql, dialect="duckdb")
            plan = session.plan(tree)
            estimate = estimate_plan(session, plan, calibration, args.bandwidth)
            session.execute_plan(plan, FetchStats())  # warm-up: ciphers made, pages cached
            times = []
            for _ in range(args.runs):
                begun = time.perf_counter()
                session.execute_plan(plan, FetchStats())
                times.append(time.perf_counter() - begun)
            rows.append(
                {
                    "query": number,
                    "estimated_seconds": estimate.seconds,
                    "measured_seconds": statistics.median(times),
                    "steps": len(estimate.steps),
                }
            )
            print(
                f"Q{number}: estimated {estimate.seconds * 1e3:,.1f} ms, measured "
                f"{rows[-1]['measured_seconds'] * 1e3:,.1f} ms",
                flush=True,
            )
    finally:
        session.close()
    correlation = spearman(
        [r["estimated_seconds"] for r in rows], [r["measured_seconds"] for r in rows]
    )
    table = [
        [
            f"Q{r['query']}",
            f"{r['estimated_seconds'] * 1e3:,.1f}",
            f"{r['measured_seconds'] * 1e3:,.1f}",
            f"{r['estimated_seconds'] / r['measured_seconds']:.2f}",
        ]
        for r in rows
    ]
    print(format_table(["query", "estimated ms", "measured ms", "estimated / measured"], table))
    print(f"Spearman rank correlation: {correlation:.3f} (calibration {calibrate_seconds:.1f} s)")
    document = {
        "client_dir": args.client_dir,
        "server": calibration.server,
        "runs": args.runs,
        "bandwidth_bits": args.bandwidth,
        "calibration_seconds": round(calibrate_seconds, 2),
        "spearman": correlation,
        "queries": rows,
    }
    if args.json:
        write_json(args.json, document)
    if args.png:
        bar_plot(
            args.png,
            [f"Q{r['query']}" for r in rows],
            {
                "estimated": [r["estimated_seconds"] for r in rows],
                "measured": [r["measured_seconds"] for r in rows],
            },
            title=f"cost model on TPC-H ({calibration.server}): Spearman {correlation:.2f}",
            ylabel="seconds",
        )
    return 0


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation: Pearson's over the ranks (ties share their mean rank)."""
    import numpy as np

    if len(xs) < 2:
        return float("nan")
    a, b = _ranks(np.asarray(xs, dtype=float)), _ranks(np.asarray(ys, dtype=float))
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def _ranks(values: Any) -> Any:
    import numpy as np

    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), dtype=float)
    ranks[order] = np.arange(len(values), dtype=float)
    for value in np.unique(values):  # ties: their mean rank
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks
