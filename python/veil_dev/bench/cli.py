"""``veil bench``: benchmarks that compare Veil side by side with baselines."""

from __future__ import annotations

import argparse
import importlib
import importlib.util

from veil_dev.bench.report import bar_plot, format_table, write_json

# Further benchmark areas add ``register(bench_subparsers)`` in these modules.
BENCH_MODULES = (
    "veil_dev.bench.analytic_cli",
    "veil_dev.bench.wire",
    "veil_dev.bench.onions_cli",
    "veil_dev.bench.cost",
    "veil_dev.bench.hom_sum",
    "veil_dev.bench.join_sums",
    "veil_dev.bench.oltp",
    "veil_dev.bench.updates",
    "veil_dev.bench.point",
    "veil_dev.bench.rekey",
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark")
    benches = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    crypto = benches.add_parser(
        "crypto",
        help="batch throughput of every scheme beside raw AES (one core)",
        description="Batch throughput of every scheme on 1M values (fewer for the slow "
        "public-key schemes), one core, median of several runs, side by side with raw "
        "AES-128-ECB measured in the same run.",
    )
    crypto.add_argument("--json", metavar="PATH", help="write {name: values per second} here")
    crypto.add_argument("--png", metavar="PATH", help="write a bar plot against the targets here")
    crypto.add_argument("--repeats", type=int, default=5, help="timed runs per figure (median)")
    crypto.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="fraction of the default batch sizes (for a quick look)",
    )
    crypto.set_defaults(handler=run_crypto)
    for name in BENCH_MODULES:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name).register(benches)


def run_crypto(args: argparse.Namespace) -> int:
    from veil_dev.bench.crypto import CryptoBench, pin_to_one_core

    pin_to_one_core()
    results = CryptoBench(scale=args.scale, repeats=args.repeats).run_all()
    aes = next(m.per_second for m in results if m.name == "aes_ecb_blocks")
    rows = []
    for m in results:
        verdict = "" if m.target is None else ("yes" if m.per_second >= m.target else "NO")
        rows.append(
            [m.name, m.values, m.per_second, m.target, verdict, f"{aes / m.per_second:.1f}"]
        )
    headers = ["scheme", "values", "per second", "target", "met", "AES blocks/value"]
    print(format_table(headers, rows))
    if args.json:
        write_json(args.json, {m.name: m.per_second for m in results})
        print(f"wrote {args.json}")
    if args.png:
        names = [m.name for m in results]
        bar_plot(
            args.png,
            names,
            {"measured": [m.per_second for m in results], "target": [m.target for m in results]},
            title="veil bench crypto (one core, median)",
            ylabel="values per second",
        )
        print(f"wrote {args.png}")
    return 0
