"""``veil bench rekey``: ``veil rotate --rekey`` of a TPC-H load while its 22 queries run beside it.

Issue 42's closing figure: a re-key of TPC-H SF 1 runs online with the SQL
suite passing beside it. Both sides are loaded as ``veil bench tpch`` loads
them (``tpch_servers.prepare``: the greedy design of the 22 queries, the same
indexes); the plaintext answers come from DuckDB over the Parquet files.

A worker runs the 22 queries through ``veil.connect`` in rounds, checking
every answer against plaintext, and reports each run's start, end and
verdict. After a warm-up round and ``--baseline-rounds`` timed rounds, the
re-key starts (``veil.load.rekey.rekey``, as ``veil rotate --rekey``), and
the worker goes on; once the re-key has ended, one more whole round checks
the answers under the new key alone. On PostgreSQL the worker is another
process; on DuckDB it is a thread of the re-key's process, because an
embedded DuckDB file opens in one process only (docs/serve.md).

The figures: the re-key's duration and its tables' times, each query's
median before and during the re-key (runs that started and ended within it)
and their ratio, every answer's verdict, and the load average sampled every
few seconds (the machine is shared: say it beside any time).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import queue
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from veil_dev.bench.report import format_table, write_json

WORK = Path.home() / ".cache" / "veil" / "bench-rekey"
LOAD_EVERY = 5.0  # seconds between load-average samples


class Flag(Protocol):
    def is_set(self) -> bool: ...


class Outbox(Protocol):
    def put(self, item: Any) -> None: ...


def register(benches: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = benches.add_parser(
        "rekey",
        help="veil rotate --rekey of a TPC-H load with its 22 queries checked beside it",
        description="Load TPC-H through Veil (as veil bench tpch does), run its 22 queries "
        "in rounds through the DB-API checking every answer against plaintext DuckDB, and "
        "re-key the database (veil rotate --rekey) meanwhile: the re-key's duration, each "
        "query's slowdown during it, every answer's verdict and the load average.",
    )
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale (%(default)s)")
    parser.add_argument("--backend", choices=("duckdb", "postgres"), default="duckdb")
    parser.add_argument("--work-dir", default=str(WORK), help="data and databases (cached)")
    parser.add_argument(
        "--baseline-rounds", type=int, default=2, help="timed rounds before the re-key"
    )
    parser.add_argument(
        "--features",
        action="store_true",
        help="also loop the SQL suite's feature queries (tests/support/fixtures/features.sql)",
    )
    parser.add_argument("--json", help="default bench/rekey/rekey_<backend>_sf<SF>[_features].json")
    parser.set_defaults(handler=run_rekey_bench)


def run_rekey_bench(args: argparse.Namespace) -> int:
    import sqlglot  # here: `veil --help` registers this bench without the SQL libraries

    from veil_dev.bench.analytic import _reference, commit
    from veil_dev.bench.suite import tpch_suite
    from veil_dev.bench.tpch_servers import prepare, say

    suite = tpch_suite()
    servers = prepare(suite, args.backend, args.sf, Path(args.work_dir))
    try:
        # the feature queries are looped, not designed for: the load (and its cache) is TPC-H's
        queries = {str(n): sql for n, sql in suite.queries.items()}
        queries |= feature_queries() if args.features else {}
        reference = _reference(suite, servers.data_dir)
        try:
            expected = {
                n: [tuple(r) for r in reference.execute(sql).fetchall()]
                for n, sql in queries.items()
            }
        finally:
            reference.close()
        ordered = {
            n: sqlglot.parse_one(sql, read="duckdb").args.get("order") is not None
            for n, sql in queries.items()
        }
        say(f"plaintext answers ready; re-key bench on {args.backend}, SF {args.sf:g}")
        figures = _measure(args, str(servers.client_dir), queries, expected, ordered)
    finally:
        servers.close()
    document = {
        "benchmark": "rekey",
        "backend": args.backend,
        "scale_factor": args.sf,
        "commit": commit(),
        "cpus": os.cpu_count(),
        "load_seconds": servers.load_seconds,
        "feature_queries": len(queries) - len(suite.queries),
        **figures,
    }
    named = "_features" if args.features else ""
    path = args.json or f"bench/rekey/rekey_{args.backend}_sf{args.sf:g}{named}.json"
    write_json(path, document)
    _print(document)
    say(f"wrote {path}")
    return 0 if document["answers"]["wrong"] == 0 and document["answers"]["errors"] == 0 else 1


FEATURES = Path(__file__).resolve().parents[3] / "tests" / "support" / "fixtures" / "features.sql"


def feature_queries() -> dict[str, str]:
    """The SQL suite's feature queries (``-- title:`` blocks), named ``f1``, ``f2``, ..."""
    blocks = FEATURES.read_text().split("-- title:")[1:]
    texts = [block.split("\n", 1)[1].strip().rstrip(";") for block in blocks]
    return {f"f{number}": sql for number, sql in enumerate(texts, 1)}


def query_loop(
    client_dir: str,
    queries: dict[str, str],
    expected: dict[str, list[tuple[Any, ...]]],
    ordered: dict[str, bool],
    stop: Flag,
    out: Outbox,
) -> None:
    """Rounds of the queries through the DB-API until ``stop``; each run and round to ``out``."""
    import veil
    from veil_dev.bench.compare import difference

    round_number = 0
    with veil.connect(client_dir) as connection:
        cursor = connection.cursor()
        while not stop.is_set():
            for name, sql in queries.items():
                if stop.is_set():
                    return
                started = time.time()
                try:
                    got = cursor.execute(sql).fetchall()
                    problem = difference([tuple(r) for r in got], expected[name], ordered[name])
                    error = None
                except Exception as exc:  # recorded: the bench counts it as a failure
                    problem, error = None, f"{type(exc).__name__}: {exc}"[:300]
                ended = time.time()
                out.put({"round": round_number, "query": name, "start": started, "end": ended,
                         "problem": problem, "error": error})  # fmt: skip
            out.put({"round_done": round_number, "time": time.time()})
            round_number += 1


# A write to the big table that changes no answer: its rows are written again under
# fresh row ids (TPC-H's order keys 32k+1 exist for k < 187,500 at SF 1)
WRITE = "UPDATE lineitem SET l_comment = l_comment WHERE l_orderkey = {key}"
WRITE_PAUSE = 0.2  # seconds between writes


def write_loop(client_dir: str, stop: threading.Event, out: list[dict[str, Any]]) -> None:
    """Writes to lineitem (``WRITE``) until ``stop``: each one's start, end and error."""
    import random

    import veil

    chosen = random.Random(42)
    with veil.connect(client_dir) as connection:
        if hasattr(connection, "autocommit"):
            connection.autocommit = True
        cursor = connection.cursor()
        while not stop.is_set():
            started = time.time()
            try:
                cursor.execute(WRITE.format(key=32 * chosen.randrange(1000) + 1))
                error = None
            except Exception as exc:  # recorded: the bench counts it
                error = f"{type(exc).__name__}: {exc}"[:300]
            out.append({"start": started, "end": time.time(), "error": error})
            stop.wait(WRITE_PAUSE)


def _writes(
    writes: list[dict[str, Any]], started: float, ended: float, messages: list[tuple[float, str]]
) -> dict[str, Any]:
    """The writes' latency before and during the re-key, and during lineitem's."""
    begun = [at for at, m in messages if m.startswith("re-key: lineitem (")]
    swapped = [at for at, m in messages if m.startswith("re-key: lineitem caught up")]
    window = (started + begun[0], started + swapped[0]) if begun and swapped else None

    def latency(kept: list[dict[str, Any]]) -> dict[str, Any]:
        seconds = [w["end"] - w["start"] for w in kept if w["error"] is None]
        return {
            "count": len(seconds),
            "median_seconds": statistics.median(seconds) if seconds else None,
            "max_seconds": max(seconds) if seconds else None,
        }

    return {
        "statement": WRITE,
        "errors": sum(1 for w in writes if w["error"] is not None),
        "before": latency([w for w in writes if w["end"] <= started]),
        "during": latency([w for w in writes if started <= w["start"] and w["end"] <= ended]),
        "during_lineitem": latency(
            [w for w in writes if window and window[0] <= w["start"] <= window[1]]
        ),
    }


def _measure(
    args: argparse.Namespace,
    client_dir: str,
    queries: dict[str, str],
    expected: dict[str, list[tuple[Any, ...]]],
    ordered: dict[str, bool],
) -> dict[str, Any]:
    from veil.load.rekey import rekey
    from veil_dev.bench.tpch_servers import say

    runs: list[dict[str, Any]] = []
    rounds: dict[int, float] = {}
    stop: Any
    out: Any
    if args.backend == "duckdb":  # an embedded DuckDB file opens in one process only
        stop, out = threading.Event(), queue.Queue()
        worker: Any = threading.Thread(
            target=query_loop, args=(client_dir, queries, expected, ordered, stop, out)
        )
    else:
        spawn = multiprocessing.get_context("spawn")
        stop, out = spawn.Event(), spawn.Queue()
        worker = spawn.Process(
            target=query_loop, args=(client_dir, queries, expected, ordered, stop, out)
        )
    loads: list[tuple[float, float]] = []
    sampling = threading.Event()
    sampler = threading.Thread(target=_sample_load, args=(loads, sampling))
    sampler.start()
    worker.start()
    writes: list[dict[str, Any]] = []
    writing = threading.Event()
    writer = threading.Thread(target=write_loop, args=(client_dir, writing, writes))
    writer.start()

    def drain_until(done: Any) -> None:
        while not done():
            if not worker.is_alive():
                raise SystemExit("the query worker stopped early")
            try:
                item = out.get(timeout=1.0)
            except queue.Empty:
                continue
            if "round_done" in item:
                rounds[item["round_done"]] = item["time"]
                say(f"query round {item['round_done']} done")
            else:
                runs.append(item)

    try:
        drain_until(lambda: args.baseline_rounds in rounds)  # round 0 warms up
        messages: list[tuple[float, str]] = []
        started = time.time()
        say("re-key starts")
        stream = threading.Thread(target=drain_until, args=(lambda: stop.is_set(),))
        stream.start()
        try:
            report = rekey(client_dir, lambda m: messages.append((time.time() - started, m)))
        finally:
            ended = time.time()
            say(f"re-key ended after {ended - started:.1f} s")
            # one whole round under the new key alone, then stop
            after = max(rounds) + 2
            while after not in rounds and stream.is_alive():
                time.sleep(0.5)
            stop.set()
            stream.join()
    finally:
        stop.set()
        worker.join(timeout=600)
        writing.set()
        writer.join()
        sampling.set()
        sampler.join()
    while True:  # what the worker put before it stopped
        try:
            item = out.get_nowait()
        except queue.Empty:
            break
        if "round_done" not in item:
            runs.append(item)
    figures = _figures(runs, args.baseline_rounds, started, ended, report, messages, loads)
    return {**figures, "writes": _writes(writes, started, ended, messages)}


def _sample_load(into: list[tuple[float, float]], done: threading.Event) -> None:
    while not done.is_set():
        into.append((time.time(), os.getloadavg()[0]))
        done.wait(LOAD_EVERY)


def _figures(
    runs: list[dict[str, Any]],
    baseline_rounds: int,
    started: float,
    ended: float,
    report: Any,
    messages: list[tuple[float, str]],
    loads: list[tuple[float, float]],
) -> dict[str, Any]:
    before = [r for r in runs if 1 <= r["round"] <= baseline_rounds and r["end"] <= started]
    during = [r for r in runs if r["start"] >= started and r["end"] <= ended]
    after = [r for r in runs if r["start"] >= ended]
    per_query: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["query"] for r in runs):
        base = [r["end"] - r["start"] for r in before if r["query"] == name and _ok(r)]
        meanwhile = [r["end"] - r["start"] for r in during if r["query"] == name and _ok(r)]
        entry: dict[str, Any] = {
            "before_seconds": statistics.median(base) if base else None,
            "during_seconds": statistics.median(meanwhile) if meanwhile else None,
            "runs_during": len(meanwhile),
        }
        if base and meanwhile:
            entry["slowdown"] = entry["during_seconds"] / max(entry["before_seconds"], 1e-6)
        per_query[name] = entry
    slowdowns = [q["slowdown"] for q in per_query.values() if "slowdown" in q]
    checked = [r for r in runs if r["round"] >= 1]
    sampled = [load for at, load in loads if started <= at <= ended] or [load for _, load in loads]
    return {
        "rekey": {
            "seconds": ended - started,
            "tables": report.tables,
            "generation": report.generation,
            "progress": [{"at_seconds": round(at, 1), "message": m} for at, m in messages],
        },
        "answers": {
            "checked": len(checked),
            "during_rekey": len(during),
            "after_rekey": len(after),
            "right": sum(1 for r in checked if _ok(r)),
            "wrong": sum(1 for r in checked if r["problem"] is not None),
            "errors": sum(1 for r in checked if r["error"] is not None),
            "failures": [r for r in checked if not _ok(r)][:20],
        },
        "queries": per_query,
        "summary": {
            "median_slowdown": statistics.median(slowdowns) if slowdowns else None,
            "geomean_slowdown": math.exp(statistics.fmean(math.log(s) for s in slowdowns))
            if slowdowns
            else None,
            "max_slowdown": max(slowdowns) if slowdowns else None,
            "queries_timed_during": len(slowdowns),
        },
        "load_average": {
            "min": min(sampled) if sampled else None,
            "max": max(sampled) if sampled else None,
            "mean": statistics.fmean(sampled) if sampled else None,
            "range": [min(sampled), max(sampled)] if sampled else None,
        },
    }


def _ok(run: dict[str, Any]) -> bool:
    return run["problem"] is None and run["error"] is None


def _print(document: dict[str, Any]) -> None:
    rows = [
        [
            name if name.startswith("f") else f"Q{name}",
            q["before_seconds"],
            q["during_seconds"],
            q["runs_during"],
            q.get("slowdown"),
        ]
        for name, q in document["queries"].items()
    ]
    print(format_table(["query", "before s", "during s", "runs", "slowdown"], rows))
    answers, summary = document["answers"], document["summary"]
    print(
        f"re-key {document['rekey']['seconds']:.1f} s; answers right {answers['right']} of "
        f"{answers['checked']} ({answers['during_rekey']} during the re-key); median slowdown "
        f"{summary['median_slowdown']}; load average {document['load_average']['range']}"
    )
    writes = document["writes"]
    print(
        f"writes to lineitem: median {writes['before']['median_seconds']} s before, during "
        f"{writes['during']}, during lineitem's re-key {writes['during_lineitem']}, "
        f"errors {writes['errors']}"
    )
