"""``veil design``: the cost-based designer (MONOMI §6) from the command line."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from veil.frontend.cli import BANDWIDTH_HELP, bandwidth_type

UNBOUNDED = ("none", "unbounded", "inf")
DEFAULT_OUT = "ilp-design.json"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    design = subparsers.add_parser(
        "design",
        help="choose, by cost, which encryptions to store for a workload under a space budget",
        description="Plan every workload query under subsets of the encryptions it could use, "
        "price each plan with the cost model, and pick one plan per query with an ILP whose "
        "encryptions fit BUDGET x the plaintext size (MONOMI §6). Reads CLIENT_DIR's loaded "
        "data for statistics and estimates; writes a design file for `veil load --design`.",
    )
    design.add_argument("client_dir", help="a loaded client directory (statistics, server)")
    design.add_argument(
        "--workload",
        nargs="+",
        required=True,
        metavar="FILE_OR_QUERY",
        help="SQL files (several ;-separated queries each) or queries themselves",
    )
    design.add_argument(
        "--budget",
        type=budget_type,
        required=True,
        help="server space as a multiple of the plaintext size (e.g. 1.5), or `none`",
    )
    design.add_argument(
        "--bandwidth",
        type=bandwidth_type,
        default=None,
        help=BANDWIDTH_HELP,
    )
    design.add_argument(
        "--weights", type=_weights, default=None, help="one weight per query, comma-separated"
    )
    design.add_argument(
        "--out", default=None, help=f"the design file (default CLIENT_DIR/{DEFAULT_OUT})"
    )
    design.add_argument(
        "--verbose", action="store_true", help="list what each chosen plan reads on the server"
    )
    design.add_argument(
        "--from",
        dest="current",
        nargs="?",
        const="",
        default=None,
        metavar="CURRENT",
        help="design evolution: prefer what CURRENT (a design file; default the client "
        "directory's own) stores among equally fast designs, and list the change "
        "(apply it with `veil redesign`)",
    )
    design.add_argument(
        "--rebuild-cost",
        type=float,
        default=0.0,
        metavar="SECONDS_PER_GB",
        help="with --from: workload seconds that rewriting 1 GB of a table is worth (default "
        "0: the fastest design, and among equally fast ones the one rebuilding least)",
    )
    design.set_defaults(handler=run_design)

    redesign = subparsers.add_parser(
        "redesign",
        help="move a loaded client directory to a new design, table by table, online",
        description="Rebuild each table whose encryptions the design file changes from the "
        "server's own data (fetched and decrypted; no source needed), under fresh names and "
        "keys, each swapped in atomically; unchanged tables are left alone.",
    )
    redesign.add_argument("client_dir")
    redesign.add_argument("--design", required=True, metavar="FILE", help="from `veil design`")
    redesign.set_defaults(handler=run_redesign)


def budget_type(text: str) -> float | None:
    if text.strip().lower() in UNBOUNDED:
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"budget {text!r} is neither a number nor one of {', '.join(UNBOUNDED)}"
        ) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"budget {text!r} must be positive")
    return value


def _weights(text: str) -> list[float]:
    try:
        return [float(w) for w in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"weights {text!r}: numbers, comma-separated") from None


def workload_queries(items: list[str]) -> list[str]:
    """The queries of each item: a SQL file's statements, or the item as a query."""
    from veil.load.loader import read_workload

    queries: list[str] = []
    for item in items:
        queries += read_workload([item]) if os.path.isfile(item) else [item]
    return queries


def run_design(args: argparse.Namespace) -> int:
    from veil.design.model import PhysicalDesign
    from veil.frontend.cli import _progress_line
    from veil.frontend.design import design_workload
    from veil.session.session import Session

    queries = workload_queries(args.workload)
    session = Session(args.client_dir)
    current = None
    if args.current is not None:
        current = PhysicalDesign.load(args.current) if args.current else session.design
    try:
        report = design_workload(
            session,
            queries,
            args.budget,
            bandwidth=args.bandwidth,
            weights=args.weights,
            progress=_progress_line,
            current=current,
            rebuild_seconds_per_byte=args.rebuild_cost / 1e9,
        )
    finally:
        session.close()
    out = Path(args.out or Path(args.client_dir) / DEFAULT_OUT)
    report.design.save(out)
    from veil.frontend.design_report import format_changes, format_report

    print(format_report(report, verbose=args.verbose))
    if current is not None:
        print(format_changes(current, report.design))
    print(f"design written to {out}; load with: veil load --source ... --design {out} ...")
    return 0


def run_redesign(args: argparse.Namespace) -> int:
    from veil.design.model import PhysicalDesign
    from veil.frontend.cli import _progress_line
    from veil.load.redesign import redesign
    from veil.session.session import Session

    target = PhysicalDesign.load(args.design)
    session = Session(args.client_dir)
    try:
        changes = redesign(session, target, _progress_line)
    finally:
        session.close()
    for change in changes:
        print(f"{change.table}: rebuilt (+{len(change.added)} -{len(change.dropped)})")
    print(f"{len(changes)} table(s) rebuilt; {args.client_dir} now stores {args.design}'s design")
    return 0
