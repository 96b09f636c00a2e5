"""``python -m tests.fuzz SEED N``: run N generated queries (or DML sequences) from SEED.

    python -m tests.fuzz 0 2000 --backend duckdb --hom auto,always
    python -m tests.fuzz 0 50 --mode dml --backend postgres
    python -m tests.fuzz 0 500 --backend spark      # a local Spark, started for the run
    python -m tests.fuzz --replay tests/fuzz/regressions

Prints progress and a summary (generated, discarded, run, failed, distinct
failure signatures); each distinct failure is shrunk and written as a
regression file into ``--out`` (default ``tests/fuzz/regressions``). A
regression that reproduces an unfixed bug fails the replay test until the bug
is fixed: move it elsewhere (``--out``) if main must stay green.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.fuzz.dml import run_dml
from tests.fuzz.generator import Query
from tests.fuzz.harness import (
    HOM_MODES,
    FuzzEnv,
    Report,
    build_env,
    check,
    open_session,
    run_queries,
)
from tests.fuzz.shrink import read_regression, regression_text, shrink, write_regression
from veil.session.session import Session

REGRESSIONS = Path(__file__).parent / "regressions"


@contextlib.contextmanager
def server(backend: str, root: Path) -> Iterator[Callable[[str], str]]:
    """A function giving a fresh server URL per name, on ``backend``."""
    if backend == "duckdb":

        def fresh(name: str) -> str:
            (root / f"{name}.duckdb").unlink(missing_ok=True)
            return f"duckdb:///{root / name}.duckdb"

        yield fresh
        return
    if backend == "spark":
        from veil_dev.servers.spark import local_url, start_local

        start_local()

        def warehouse(name: str) -> str:
            place = root / f"spark-{name}"
            shutil.rmtree(place, ignore_errors=True)
            return local_url(place)

        yield warehouse
        return
    from veil_dev.servers.postgres import ThrowawayCluster

    cluster = ThrowawayCluster(Path(tempfile.mkdtemp(prefix="veil-fuzz-pg-")))
    cluster.start()
    try:
        yield lambda name: cluster.create_schema(name.replace("-", "_"))
    finally:
        cluster.stop()


def shrink_failure(session: Session, env: FuzzEnv, query: Query, signature: str) -> Query:
    same_class = signature.split(":")[0] if signature.startswith("wrong-result") else signature

    def still_fails(sql: str, params: list[object]) -> bool:
        # Short guards: an edit that makes the query explode is not a smaller case.
        outcome = check(session, env.plain, Query(query.seed, sql, params), (1.0, 5.0))
        if outcome.status != "fail":
            return False
        return outcome.signature.startswith(same_class)

    return shrink(query, still_fails)


def query_mode(args: argparse.Namespace, root: Path) -> int:
    total = Report()
    with server(args.backend, root) as url_for:
        started = time.perf_counter()
        env = build_env(root, url_for("fuzz"), args.backend, onions=args.design == "onions")
        print(f"loaded the fuzz database on {args.backend} in {time.perf_counter() - started:.1f}s")
        for mode in args.hom.split(","):
            session = open_session(env.client_dir, mode)
            seeds = range(args.seed, args.seed + args.n)

            def progress(done: int, report: Report, mode: str = mode) -> None:
                print(
                    f"  [{args.backend}/{mode}] {done}/{args.n}: run {report.run}, "
                    f"failed {len(report.failures)}",
                    flush=True,
                )

            report = run_queries(
                session, env.plain, env.catalog, seeds, progress, args.fresh, args.literals
            )
            print(f"{args.backend}/{mode}: {report.summary()}")
            for failure in report.failures if args.verbose else []:
                print(failure.line())
            if args.shrink:
                write_shrunk(session, env, report, args, mode)
            session.close()
            total.add(report)
    print(f"total: {total.summary()}")
    return 1 if total.failures else 0


def write_shrunk(
    session: Session, env: FuzzEnv, report: Report, args: argparse.Namespace, mode: str
) -> None:
    out = Path(args.out)
    for signature, seeds in report.signatures.items():
        failure = next(f for f in report.failures if f.seed == seeds[0])
        small = shrink_failure(session, env, failure.query, signature)
        outcome = check(session, env.plain, small)
        text = regression_text(
            small, args.backend, mode, "query", outcome.signature, outcome.detail
        )
        path = write_regression(out, text, small.sql, small.params)
        print(
            f"  shrunk seed {failure.seed} [{signature}] -> {path}\n    {small.sql}  {small.params}"
        )


def dml_mode(args: argparse.Namespace, root: Path) -> int:
    from tests.fuzz.harness import prepare_source

    source, _, catalog = prepare_source(root)
    failed = 0
    with server(args.backend, root) as url_for:
        for mode in args.hom.split(","):
            report = run_dml(
                source,
                catalog,
                root / "dml",
                lambda seed, place, mode=mode: url_for(f"dml_{mode}_{seed}"),
                range(args.seed, args.seed + args.n),
                hom=mode,
            )
            print(
                f"{args.backend}/{mode} dml: {report.sequences} sequences, "
                f"{report.statements} statements, {report.discarded} discarded, "
                f"{report.checks} checks, {len(report.failures)} failed, {report.seconds:.1f}s"
            )
            for failure in report.failures:
                print(failure.line())
            failed += len(report.failures)
    return 1 if failed else 0


def replay(args: argparse.Namespace, root: Path) -> int:
    files = sorted(Path(args.replay).glob("*.sql"))
    failed = 0
    with server(args.backend, root) as url_for:
        env = build_env(root, url_for("fuzz"), args.backend, onions=args.design == "onions")
        sessions = {mode: open_session(env.client_dir, mode) for mode in HOM_MODES}
        for path in files:
            fields, query = read_regression(path)
            outcome = check(sessions[fields.get("hom", "auto")], env.plain, query)
            print(f"{path.name}: {outcome.status} {outcome.signature} {outcome.detail[:200]}")
            failed += outcome.status != "ok"
        for session in sessions.values():
            session.close()
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz", description=__doc__.split("\n")[0]
    )
    parser.add_argument("seed", type=int, nargs="?", default=0)
    parser.add_argument("n", type=int, nargs="?", default=1000)
    parser.add_argument("--backend", choices=("duckdb", "postgres", "spark"), default="duckdb")
    parser.add_argument(
        "--hom", default="auto,always", help="VEIL_HOM_PUSHDOWN modes, comma-separated"
    )
    parser.add_argument("--mode", choices=("query", "dml"), default="query")
    parser.add_argument(
        "--design",
        choices=("workload", "onions"),
        default="workload",
        help="load with the designer's workload, or as onions the queries peel (query mode)",
    )
    parser.add_argument(
        "--fresh",
        type=int,
        default=0,
        help="run each query again this many times with fresh parameter values (query mode)",
    )
    parser.add_argument(
        "--literals",
        action="store_true",
        help="write each query's parameter values into its text (query mode)",
    )
    parser.add_argument("--out", default=str(REGRESSIONS), help="folder for shrunk regressions")
    parser.add_argument("--no-shrink", dest="shrink", action="store_false")
    parser.add_argument("--verbose", "-v", action="store_true", help="print every failure")
    parser.add_argument("--replay", help="replay the regression files of a folder instead")
    parser.add_argument("--workdir", help="keep the databases here (default: a temp dir)")
    args = parser.parse_args(argv)
    # A plain SIGTERM would skip the finally blocks that stop the PostgreSQL cluster.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="veil-fuzz-"))
    try:
        if args.replay:
            return replay(args, root)
        return dml_mode(args, root) if args.mode == "dml" else query_mode(args, root)
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
