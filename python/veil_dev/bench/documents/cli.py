"""``veil documents ...``: a private MongoDB-wire server and the benchmark against plain pymongo.

Tooling around the shipping :mod:`veil.documents` package, which imports
none of it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veil_dev.servers.process import ServerProcess

SERVER_KINDS = ("ferretdb", "mongo-java-server")  # the kinds of veil_dev.servers' classes


def register(subparsers: argparse._SubParsersAction) -> None:
    documents = subparsers.add_parser(
        "documents", help="encrypted documents: a private MongoDB-wire server, benchmark"
    )
    commands = documents.add_subparsers(dest="documents_command", required=True, metavar="CMD")
    server = commands.add_parser(
        "server", help="start, stop or inspect a private FerretDB or mongo-java-server"
    )
    server.add_argument("action", choices=("start", "stop", "status"))
    server.add_argument("dir", type=Path, help="server directory (data, log, server.json)")
    server.add_argument("--port", type=int, default=0, help="TCP port (default: a free one)")
    server.add_argument(
        "--kind", choices=SERVER_KINDS, default="ferretdb",
        help="which server start runs (default ferretdb; mongo-java-server has $push and "
        "several accumulators per $group); stop and status find the kind DIR records",
    )  # fmt: skip
    server.set_defaults(handler=_server)
    bench = commands.add_parser("bench", help="Veil against plain pymongo on one FerretDB")
    bench.add_argument("--url", default=None, help="a MongoDB-wire server (default: start one)")
    bench.add_argument("--docs", type=int, default=10_000, help="documents loaded (default 10k)")
    bench.add_argument("--ops", type=int, default=2_000, help="operations per workload")
    bench.add_argument("--threads", default="1,8", help="YCSB client threads (default 1,8)")
    bench.add_argument(
        "--workloads", default="uniform,zipfian",
        help="YCSB key distributions run (default uniform,zipfian)",
    )  # fmt: skip
    bench.add_argument(
        "--processes", default="",
        help="YCSB also on this many client processes, one thread each (e.g. 8)",
    )  # fmt: skip
    bench.add_argument("--incs", type=int, default=None, help="$inc per system (inc section)")
    bench.add_argument("--range-width", type=int, default=100, help="documents per range query")
    bench.add_argument("--seed", type=int, default=1)
    bench.add_argument(
        "--timed-inserts", type=int, default=None,
        help="insert (and time) only the last N documents one by one, bulk-load the rest",
    )  # fmt: skip
    bench.add_argument(
        "--scan-budget", type=int, default=4_000_000,
        help="documents scanned per read/range measurement (FerretDB scans for each query)",
    )  # fmt: skip
    bench.add_argument(
        "--sections", default="",
        help="run only these sections (comma-separated: benchmarkdb, range, sum, ycsb; "
        "named only: writes (BenchmarkDB's inserts alone), inc (the blind $inc alone), "
        "ore (the ore ranges alone), chains (plain and the chained field alone: sums, $inc))",
    )  # fmt: skip
    bench.add_argument("--note", default="", help="what else ran on the machine")
    bench.add_argument("--json", type=Path, default=None, help="write the figures here")
    bench.add_argument("--png", type=Path, default=None, help="write the overhead plot here")
    bench.set_defaults(handler=_bench)


def _server(args: argparse.Namespace) -> int:
    running = _running(args.dir)
    if args.action == "start":
        if running is not None:
            print(f"{running.kind} already running: pid {running.pid}, url {running.url}")
            return 0
        server = _server_classes()[args.kind](args.dir).start(args.port, stop_at_exit=False)
        print(f"{server.kind} running: pid {server.pid}, url {server.url}")
        return 0
    if args.action == "stop":
        if running is not None:
            running.stop()
        print(f"{running.kind} stopped" if running else "no server was running there")
        return 0
    if running is None:
        print("server: not running")
        return 1
    print(f"{running.kind} running: pid {running.pid}, url {running.url}")
    return 0


def _server_classes() -> dict[str, type[ServerProcess]]:
    from veil_dev.servers.ferretdb import FerretDBServer
    from veil_dev.servers.mongojava import MongoJavaServer

    return {cls.kind: cls for cls in (FerretDBServer, MongoJavaServer)}


def _running(directory: Path) -> ServerProcess | None:
    """The live server recorded in ``directory``, whichever kind it is."""
    from veil_dev.servers.process import recorded

    state = recorded(directory)
    server_class = _server_classes().get(state["kind"]) if state else None
    return server_class.running(directory) if server_class else None


def _bench(args: argparse.Namespace) -> int:
    import signal
    import sys

    from veil_dev.bench.documents.bench import run
    from veil_dev.bench.documents.ycsbrun import Stopped

    # SIGTERM unwinds like Ctrl-C, so the FerretDB started for the run is stopped (during a
    # YCSB run, ycsbrun's handlers stop its client threads first, then raise Stopped).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from veil_dev.bench.documents.report import overheads, plot, table
    from veil_dev.bench.report import write_json

    threads = [int(t) for t in args.threads.split(",") if t]

    def progress(partial: dict[str, object]) -> None:  # each section as soon as it ends
        if args.json:
            write_json(args.json, partial)

    try:
        result = run(
            args.url, args.docs, args.ops, threads, args.range_width, args.seed, args.note,
            args.timed_inserts, args.scan_budget, progress,
            [name for name in args.sections.split(",") if name],
            [int(p) for p in args.processes.split(",") if p], args.incs,
            [name for name in args.workloads.split(",") if name],
        )  # fmt: skip
    except Stopped as stopped:
        saved = f"; the workloads that ended are in {args.json}" if args.json else ""
        print(f"veil documents bench: {stopped}: the YCSB clients stopped{saved}", file=sys.stderr)
        return 128 + stopped.signum
    result["overheads"] = overheads(result)
    print(table(result))
    if args.json:
        write_json(args.json, result)
    if args.png:
        plot(args.png, result)
    return 0
