"""``veil bench oltp``: pgbench TPC-B through ``veil serve`` beside plaintext PostgreSQL.

One run starts a throwaway PostgreSQL cluster and uses it twice: pgbench
straight against a plaintext database, and the same pgbench against
``veil serve`` (in this process) over an encrypted client directory whose
server is a schema of that cluster (or, with ``--backend duckdb``, an
embedded DuckDB file). Both sides are initialised by unmodified
``pgbench -i -s SCALE``, then run TPC-B for ``-T`` seconds at 1, 4 and 8
clients in ``-M simple`` and ``-M prepared``, with ``--max-tries`` (Veil's
writers report SQLSTATE 40001 when they collide, and pgbench retries) and
``-n`` (no VACUUM/TRUNCATE between runs, so the history table holds every
transaction since the initialisation and the balance invariant spans all
runs). After each run the invariants are read back (through ``veil serve``
for Veil's side): sum(abalance) = sum(tbalance) = sum(bbalance) = sum(delta),
the row counts pgbench made, no duplicated key; what breaks is an anomaly,
reported by kind. Latencies come from pgbench's per-transaction log.

The helpers (``initialize``, ``run_tpcb``, ``anomalies``, ``empty_client_dir``)
are also what ``tests/concurrency/test_pgbench.py`` runs.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from veil_dev.bench.report import bar_plot, format_table, write_json

CLIENTS = (1, 4, 8)
MODES = ("simple", "prepared")
# table, key, balance column, rows per unit of scale (pgbench's TPC-B tables)
TABLES = (
    ("pgbench_branches", "bid", "bbalance", 1),
    ("pgbench_tellers", "tid", "tbalance", 10),
    ("pgbench_accounts", "aid", "abalance", 100_000),
)

Query = Callable[[str], tuple[Any, ...]]  # one row of a query's answer


def register(benches: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    oltp = benches.add_parser(
        "oltp",
        help="pgbench TPC-B through veil serve beside plaintext PostgreSQL",
        description="Unmodified pgbench (TPC-B) through `veil serve` and against a plaintext "
        "PostgreSQL database of the same throwaway cluster, in one run: 1, 4 and 8 clients, "
        "-M simple and -M prepared; TPS, latency p50/p99, retries, failures, and the "
        "invariants checked after each run.",
    )
    oltp.add_argument("--scale", type=int, default=10, help="pgbench -s (default %(default)s)")
    oltp.add_argument(
        "-T", "--seconds", type=int, default=20, help="pgbench -T per run (default %(default)s)"
    )
    oltp.add_argument(
        "--clients",
        default=",".join(map(str, CLIENTS)),
        help="client counts, comma-separated (default %(default)s)",
    )
    oltp.add_argument(
        "--modes", default=",".join(MODES), help="pgbench -M modes (default %(default)s)"
    )
    oltp.add_argument(
        "--backend",
        choices=("postgres", "duckdb"),
        default="postgres",
        help="the server of Veil's client directory (default %(default)s)",
    )
    oltp.add_argument(
        "--max-tries", type=int, default=100, help="pgbench --max-tries (default %(default)s)"
    )
    oltp.add_argument(
        "--workers",
        default="",
        metavar="N[,N...]",
        help="run Veil's side through `veil serve --workers N` processes, one server per N "
        "over the one database, each mode and client count on each in turn (default: one "
        "server in the bench's own process)",
    )
    oltp.add_argument(
        "--breakdown",
        type=int,
        default=0,
        metavar="SECONDS",
        help="then each TPC-B statement alone, one client, SECONDS per mode and side: "
        "latencies, and Veil's serve and server CPU per statement "
        "(veil_dev.bench.oltp_breakdown; PostgreSQL only; default: not run)",
    )
    oltp.add_argument("--json", metavar="PATH")
    oltp.add_argument("--png", metavar="PATH")
    oltp.set_defaults(handler=run_oltp)


# -- pgbench ------------------------------------------------------------------


@dataclass
class Run:
    """One timed pgbench run and what it reported."""

    side: str  # "postgres" (plaintext) or "veil"
    mode: str
    clients: int
    seconds: int  # pgbench -T, unless per_client is set
    per_client: int | None = None  # pgbench -t: this many transactions per client instead
    workers: int | None = None  # veil serve --workers (None: served in the bench's process)
    transactions: int = 0  # done (committed)
    failed: int = 0  # given up after --max-tries
    retried: int = 0  # transactions that needed more than one try
    retries: int = 0
    tps: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    exit_code: int = 0
    load: list[str] = field(default_factory=list)  # load averages when it ended
    errors: list[str] = field(default_factory=list)  # pgbench's error lines
    anomalies: dict[str, list[str]] = field(default_factory=dict)


def pgbench_program() -> Path:
    from veil_dev.servers.postgres import find_bin_dir

    return find_bin_dir() / "pgbench"


def _connection_args(port: int | str, user: str, database: str) -> list[str]:
    return ["-h", "127.0.0.1", "-p", str(port), "-U", user, database]


def initialize(port: int | str, scale: int, *, user: str = "bench", database: str = "veil") -> str:
    """``pgbench -i -s scale`` (all its default steps); returns its last line (the timings)."""
    args = [str(pgbench_program()), "-i", "-s", str(scale), "-q"]
    done = subprocess.run(
        args + _connection_args(port, user, database), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"pgbench -i failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return done.stderr.strip().splitlines()[-1]


def run_tpcb(
    port: int | str,
    run: Run,
    *,
    max_tries: int,
    user: str = "bench",
    database: str = "veil",
) -> Run:
    """TPC-B for ``run.seconds`` (or ``run.per_client`` transactions per client) with
    ``run.clients``: ``run`` filled with what pgbench said."""
    length = ["-T", str(run.seconds)] if run.per_client is None else ["-t", str(run.per_client)]
    with tempfile.TemporaryDirectory(prefix="veil-pgbench-") as logs:
        args = [
            str(pgbench_program()),
            "-c", str(run.clients), "-j", str(min(run.clients, 2)), *length,
            "-M", run.mode, f"--max-tries={max_tries}", "-n",
            "--log", f"--log-prefix={logs}/tx",
        ]  # fmt: skip
        done = subprocess.run(
            args + _connection_args(port, user, database),
            capture_output=True,
            text=True,
            check=False,
        )
        latencies = sorted(_latencies_ms(Path(logs)))
    run.exit_code = done.returncode
    run.errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    report = done.stdout
    run.transactions = _number(report, r"number of transactions actually processed: (\d+)")
    run.failed = _number(report, r"number of failed transactions: (\d+)")
    run.retried = _number(report, r"number of transactions retried: (\d+)")
    run.retries = _number(report, r"total number of retries: (\d+)")
    tps = re.search(r"tps = ([\d.]+)", report)
    run.tps = float(tps.group(1)) if tps else 0.0
    if latencies:
        run.p50_ms = statistics.median(latencies)
        run.p99_ms = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    return run


def _number(report: str, pattern: str) -> int:
    found = re.search(pattern, report)
    return int(found.group(1)) if found else 0


def _latencies_ms(logs: Path) -> Iterator[float]:
    """Each done transaction's latency from pgbench's --log files (a failed one says so)."""
    for path in logs.glob("tx.*"):
        for line in path.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[2].isdigit():
                yield int(fields[2]) / 1000.0


# -- invariants ---------------------------------------------------------------


def anomalies(query: Query, scale: int, transactions: int) -> dict[str, list[str]]:
    """What breaks TPC-B's invariants, by kind (empty: nothing).

    ``transactions``: how many pgbench reported as done since ``pgbench -i``
    (each wrote one history row). ``query`` answers one row of a query.
    """
    found: dict[str, list[str]] = {}

    def note(kind: str, what: str) -> None:
        found.setdefault(kind, []).append(what)

    sums: dict[str, int] = {}
    for table, key, balance, per_scale in TABLES:
        try:
            rows, keys, low, high, total = query(
                f"SELECT count(*), count(DISTINCT {key}), min({key}), max({key}), "
                f"sum({balance}) FROM {table}"
            )
        except Exception as exc:  # a row that cannot be read is an anomaly, not a crash
            note("unreadable", f"{table}: {type(exc).__name__}: {exc}")
            continue
        want = per_scale * scale
        if rows != want:
            note("row count", f"{table} has {rows} rows, pgbench made {want}")
        if keys != rows:
            note("duplicated key", f"{table} has {rows} rows but {keys} distinct {key}")
        if (low, high) != (1, want):
            note("key range", f"{table}.{key} spans {low}..{high}, pgbench made 1..{want}")
        sums[balance] = int(total or 0)
    try:
        history, delta = query("SELECT count(*), sum(delta) FROM pgbench_history")
        sums["delta"] = int(delta or 0)
        if history != transactions:
            note("history rows", f"{history} history rows after {transactions} transactions")
    except Exception as exc:
        note("unreadable", f"pgbench_history: {type(exc).__name__}: {exc}")
    if len(set(sums.values())) > 1:
        note("balance sums differ", ", ".join(f"sum({k}) = {v}" for k, v in sums.items()))
    return found


@contextmanager
def psycopg_query(dsn: str) -> Iterator[Query]:
    """``query`` for ``anomalies`` on a psycopg connection of its own."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as con:

        def one(sql: str) -> tuple[Any, ...]:
            row = con.execute(sql).fetchone()
            assert row is not None
            return tuple(row)

        yield one


@contextmanager
def served(client: Path, workers: int | None = None) -> Iterator[str]:
    """``veil serve --insecure-local`` on a free loopback port; yields the port.

    ``workers`` None: in this process; a number: ``veil serve --workers N`` as a
    process of its own (``served_process``)."""
    if workers is not None:
        with served_process(client, workers) as (_, port):
            yield port
        return
    from veil._native import WireServer
    from veil.serve.engine import Engine

    engine = Engine(client)
    server = WireServer(engine, "127.0.0.1:0", None, None, True)
    try:
        yield server.address.rsplit(":", 1)[1]
    finally:
        server.stop()
        engine.close()


@contextmanager
def served_process(
    client: Path, workers: int, *options: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``veil serve --workers N --insecure-local --no-audit`` (and ``options``) on a free
    loopback port; yields the process and the port, and stops it with SIGTERM."""
    command = [
        sys.executable, "-m", "veil.cli", "serve", str(client), "--listen", "127.0.0.1:0",
        "--insecure-local", "--no-audit", "--workers", str(workers), *options,
    ]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            banner = process.stdout.readline()  # type: ignore[union-attr]
            if " on " not in banner:
                raise RuntimeError(f"veil serve did not start (exit {process.wait(60)})")
            yield process, banner.split(" on ")[1].split()[0].rsplit(":", 1)[1]
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(60)


def empty_client_dir(path: Path, server_url: str) -> Path:
    """A client directory with no table yet over ``server_url`` (tables come by DDL)."""
    from veil.backends import connect
    from veil.design.model import PhysicalDesign
    from veil.session.clientdir import create_client_dir

    client, master = create_client_dir(path, server_url)
    PhysicalDesign(master.fingerprint()).save(client.design_path)
    connect(server_url).close()  # an embedded DuckDB server's file is made here
    return path


# -- the benchmark ------------------------------------------------------------


def run_oltp(args: argparse.Namespace) -> int:
    from veil_dev.servers.postgres import SUPERUSER, ThrowawayCluster

    # each Veil session holds two server connections, and with --workers every server's
    # sessions stay open side by side: PostgreSQL's 40 were too few for two servers at 8 clients
    cluster = ThrowawayCluster(settings={"max_connections": "200"} if args.workers else None)
    cluster.start()
    work = Path(tempfile.mkdtemp(prefix="veil-oltp-"))
    runs: list[Run] = []
    inits: dict[str, dict[str, Any]] = {}
    breakdown: list[dict[str, Any]] = []
    try:
        cluster.create_database("plain")
        inits["postgres"] = _bench_side(
            args, "postgres", {None: cluster.port}, SUPERUSER, "plain", runs
        )
        if args.backend == "postgres":
            cluster.create_database("encrypted")
            url = cluster.create_schema("veil_oltp", database="encrypted")
        else:
            url = f"duckdb://{work / 'server.duckdb'}"
        client = empty_client_dir(work / "client", url)
        with ExitStack() as stack:
            counts = [int(n) for n in args.workers.split(",")] if args.workers else [None]
            ports = {n: stack.enter_context(served(client, n)) for n in counts}
            inits["veil"] = _bench_side(args, "veil", ports, "bench", "veil", runs)
        if args.breakdown and args.backend == "postgres":
            breakdown = _breakdown(args, cluster, client)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    _report(args, runs, inits, breakdown)
    return 1 if any(r.anomalies or r.exit_code for r in runs) else 0


def _bench_side(
    args: argparse.Namespace,
    side: str,
    ports: Mapping[int | None, int | str],
    user: str,
    database: str,
    runs: list[Run],
) -> dict[str, Any]:
    """``pgbench -i``, then every mode and client count on one side; returns the init's figures.

    ``ports``: the side's servers by ``--workers`` (None: in this process), all over the
    one database: each mode and client count runs on each in turn, side by side."""
    first = next(iter(ports.values()))
    start = time.perf_counter()
    line = initialize(first, args.scale, user=user, database=database)
    init = {"seconds": time.perf_counter() - start, "pgbench": line, "load": _load_average()}
    print(f"{side}: pgbench -i -s {args.scale}: {init['seconds']:.1f} s ({line})", flush=True)
    dsn = f"host=127.0.0.1 port={first} user={user} dbname={database}"
    done = 0
    for mode in args.modes.split(","):
        for clients in (int(c) for c in args.clients.split(",")):
            for workers, port in ports.items():
                run = run_tpcb(
                    port,
                    Run(side, mode, clients, args.seconds, workers=workers),
                    max_tries=args.max_tries,
                    user=user,
                    database=database,
                )
                run.load = _load_average()
                done += run.transactions
                with psycopg_query(dsn) as query:
                    run.anomalies = anomalies(query, args.scale, done)
                runs.append(run)
                print(_line(run), flush=True)
    return init


def _breakdown(args: argparse.Namespace, cluster: Any, client: Path) -> list[dict[str, Any]]:
    """``oltp_breakdown.measure`` over the sides' databases, Veil's served by this process."""
    import psycopg

    from veil_dev.bench import oltp_breakdown
    from veil_dev.servers.postgres import SUPERUSER

    def backends() -> list[int]:
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            found = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = 'encrypted' "
                "AND backend_type = 'client backend'"
            ).fetchall()
        return [int(pid) for (pid,) in found]

    with served(client, None) as port:
        return oltp_breakdown.measure(
            pgbench_program(),
            args.breakdown,
            args.modes.split(","),
            (cluster.port, SUPERUSER, "plain"),
            (port, "bench", "veil"),
            backends,
        )


def _load_average() -> list[str]:
    """The machine's 1, 5 and 15 minute load averages (other work shares the cores)."""
    try:
        return Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        return []


def _side(run: Run) -> str:
    """The run's side, with its ``--workers`` when it ran through separate processes."""
    return run.side if run.workers is None else f"{run.side} -w{run.workers}"


def _line(run: Run) -> str:
    kinds = {k: len(v) for k, v in run.anomalies.items()}
    return (
        f"{_side(run):8} -M {run.mode:8} -c {run.clients}: {run.tps:.2f} tps, "
        f"{run.transactions} done, {run.failed} failed, {run.retries} retries, "
        f"p50 {run.p50_ms} ms, p99 {run.p99_ms} ms, anomalies {kinds or 0}"
    )


def _report(
    args: argparse.Namespace,
    runs: list[Run],
    inits: dict[str, Any],
    breakdown: list[dict[str, Any]],
) -> None:
    headers = ["side", "mode", "clients", "tps", "p50 ms", "p99 ms", "done", "retried",
               "retries", "failed", "anomalies"]  # fmt: skip
    rows = [
        [_side(r), r.mode, r.clients, r.tps, r.p50_ms, r.p99_ms, r.transactions, r.retried,
         r.retries, r.failed, sum(len(v) for v in r.anomalies.values())]
        for r in runs
    ]  # fmt: skip
    print(format_table(headers, rows))
    document = {
        "scale": args.scale,
        "seconds": args.seconds,
        "backend": args.backend,
        "max_tries": args.max_tries,
        "workers": args.workers or None,
        "load_average_after": _load_average(),
        "init": inits,
        "runs": [asdict(r) for r in runs],
        "breakdown": breakdown,
    }
    if args.json:
        write_json(args.json, document)
        print(f"wrote {args.json}")
    if args.png:
        labels = list(dict.fromkeys((r.mode, r.clients) for r in runs))
        sides = list(dict.fromkeys(_side(r) for r in runs))
        tps = {
            side: [
                next((r.tps for r in runs if (_side(r), r.mode, r.clients) == (side, *k)), None)
                for k in labels
            ]
            for side in sides
        }
        names = {"postgres": "plaintext PostgreSQL", "veil": f"veil serve ({args.backend})"}
        for side in sides[1:]:
            names.setdefault(side, f"veil serve --workers {side.split('-w')[1]} ({args.backend})")
        bar_plot(
            args.png,
            [f"-M {mode}, {clients} client(s)" for mode, clients in labels],
            {names[side]: tps[side] for side in sides},
            title=f"pgbench TPC-B, scale {args.scale}, -T {args.seconds}",
            ylabel="transactions per second",
        )
        print(f"wrote {args.png}")
