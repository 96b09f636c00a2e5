"""``veil kv ...``: the private Cassandra server, the pack-size tool, the benchmarks.

All three are tooling around the shipping :mod:`veil.kv` package, which
imports none of them.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    kv = subparsers.add_parser(
        "kv", help="key-value (MiniCrypt) tools: a private Cassandra, pack sizes, benchmark"
    )
    commands = kv.add_subparsers(dest="kv_command", required=True, metavar="KV_COMMAND")
    _register_cassandra(commands)
    _register_packsize(commands)
    _register_bench(commands)
    _register_sweep(commands)


def _register_cassandra(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "cassandra", help="start, stop or inspect a private single-node Cassandra 5.0"
    )
    parser.add_argument("action", choices=("start", "stop", "status"))
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="server directory (default ~/.cache/veil/cassandra/server)",
    )
    parser.add_argument("--heap-mb", type=int, default=1024, help="JVM heap (default 1024)")
    parser.set_defaults(handler=_cassandra)


def _cassandra(args: argparse.Namespace) -> int:
    from veil_dev.servers import cassandra as server

    if args.action == "start":
        info = server.start(args.dir, heap_mb=args.heap_mb)
        print(f"cassandra running: pid {info.pid}, url cassandra://{info.contact}/veil")
        return 0
    if args.action == "stop":
        stopped = server.stop(args.dir)
        print("cassandra stopped" if stopped else "no cassandra was running there")
        return 0
    running = server.status(args.dir)
    if running is None:
        print("cassandra: not running")
        return 1
    print(f"cassandra running: pid {running.pid}, url cassandra://{running.contact}/veil")
    return 0


def _register_packsize(commands: argparse._SubParsersAction) -> None:
    from veil_dev.bench.kv.datasets import NAMED

    parser = commands.add_parser(
        "packsize", help="compression ratio against rows per pack (MiniCrypt Figure 2)"
    )
    parser.add_argument(
        "dataset", help=f"a file of records (JSON or one per line) or one of: {', '.join(NAMED)}"
    )
    parser.add_argument("--limit", type=int, default=None, help="use only the first N records")
    _add_outputs(parser)
    parser.add_argument(
        "--target",
        type=float,
        default=0.9,
        help="share of the whole-dataset ratio the recommended pack must reach (default 0.9)",
    )
    parser.add_argument(
        "--max-pack-bytes",
        type=int,
        default=64 * 1024,
        help="read-cost cap: plaintext bytes per pack (default 65536)",
    )
    parser.set_defaults(handler=_packsize)


def _packsize(args: argparse.Namespace) -> int:
    from veil_dev.bench.kv import packsize

    result = packsize.run(
        args.dataset,
        limit=args.limit,
        json_path=args.json,
        png_path=args.png,
        target=args.target,
        max_pack_bytes=args.max_pack_bytes,
    )
    print("\n".join(packsize.summary_lines(result)))
    return 0


def _register_bench(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "bench", help="YCSB-style workloads: Veil packs vs per-row encryption vs plaintext"
    )
    parser.add_argument("--backend", choices=("sqlite", "cassandra"), default="sqlite")
    parser.add_argument("--url", default=None, help="store URL (default: a fresh local store)")
    parser.add_argument("--dataset", default="debian-packages", help="records used as values")
    parser.add_argument("--records", type=int, default=20_000, help="records loaded per client")
    parser.add_argument("--ops", type=int, default=2_000, help="operations per workload")
    parser.add_argument("--seconds", type=float, default=20.0, help="time cap per workload")
    parser.add_argument(
        "--memory-mb", type=int, default=None, help="Cassandra in a memory cgroup of this size"
    )
    parser.add_argument("--heap-mb", type=int, default=1024, help="Cassandra JVM heap")
    parser.add_argument(
        "--threads", type=int, default=1, help="client threads for the read workloads"
    )
    parser.add_argument(
        "--pack-cache", type=int, default=0, help="Veil client pack cache size (default 0: off)"
    )
    parser.add_argument(
        "--compression",
        choices=("zlib", "zstd", "lz4", "zstd-dict"),
        default="zlib",
        help="codec of Veil's packs and of the per-row baseline's rows (default zlib; "
        "zstd-dict: Veil with a trained dictionary, the baseline plain zstd)",
    )
    parser.add_argument(
        "--pack-rows",
        type=int,
        default=None,
        help="Veil's rows per pack (default: chosen by the store from the loaded data)",
    )
    _add_outputs(parser)
    parser.set_defaults(handler=_bench)


def _bench(args: argparse.Namespace) -> int:
    from veil_dev.bench.kv import ycsb

    result = ycsb.run(ycsb.BenchConfig.from_args(args))
    ycsb.write_outputs(result, args.json, args.png)
    print("\n".join(ycsb.summary_lines(result)))
    return 0


def _register_sweep(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "sweep", help="ratio and point reads against rows per pack, with and without a dictionary"
    )
    parser.add_argument("dataset", help="a file of records or a named dataset")
    parser.add_argument("--records", type=int, default=20_000, help="records loaded")
    parser.add_argument("--reads", type=int, default=300, help="point reads per round")
    _add_outputs(parser)
    parser.set_defaults(handler=_sweep)


def _sweep(args: argparse.Namespace) -> int:
    from veil_dev.bench.kv import sweep

    result = sweep.run(
        args.dataset,
        records=args.records,
        reads=args.reads,
        json_path=args.json,
        png_path=args.png,
    )
    print("\n".join(sweep.summary_lines(result)))
    return 0


def _add_outputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--png", type=Path, default=None, help="write the plot as PNG here")
