"""``veil load``, ``query``, ``shell``, ``tables``, ``explain`` and ``calibrate``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from veil.design import SUM_SCHEMES

BANDWIDTH_HELP = (
    "the link to the server, `local` (as calibrated), `lan` (1 Gbit/s), `monomi` (10 Mbit/s) "
    "or Mbit/s (default local)"
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    load = subparsers.add_parser(
        "load",
        help="encrypt Parquet/CSV files or a DuckDB database into a server",
        description="Encode and encrypt every table of SOURCE per a physical design "
        "(greedy, from the workload's queries) and bulk-load it into the server. "
        "The client directory gets the key file, the design and the server settings.",
    )
    load.add_argument(
        "--source",
        required=True,
        help="a directory of .parquet/.csv files, one file, a .duckdb file, or a live "
        "PostgreSQL database (postgresql://user@host:port/db; its schema's tables, in one "
        "snapshot)",
    )
    load.add_argument(
        "--server",
        required=True,
        help="duckdb:///path/server.duckdb or postgresql://user@host:port/db",
    )
    load.add_argument(
        "--client-dir", required=True, help="the client directory (created if absent)"
    )
    load.add_argument(
        "--key", help="a key file from `veil keygen` to encrypt with (default: a new key)"
    )
    again = load.add_mutually_exclusive_group()
    again.add_argument(
        "--replace",
        action="store_true",
        help="load tables the client directory holds already anew (rows written to them "
        "since are lost); without it such a load is refused",
    )
    again.add_argument(
        "--append",
        action="store_true",
        help="add the source's rows to tables the client directory holds (as INSERTs, in "
        "one transaction); other tables of the source are loaded as new ones",
    )
    load.add_argument(
        "--key-provider",
        metavar="URI",
        help="keep the new key wrapped by a key provider: kmip://HOST:PORT?ca=..&cert=..&key=.. "
        "or pkcs11:token=LABEL?module-path=.. (docs/keys.md); the client directory then holds "
        "only the wrapped key",
    )
    load.add_argument(
        "--workload", nargs="*", default=[], help="SQL files whose queries the design should serve"
    )
    load.add_argument(
        "--design",
        metavar="FILE",
        help="load under this design file (from `veil design`) instead of designing here",
    )
    load.add_argument(
        "--adaptive",
        action="store_true",
        help="store every column as onions that queries peel as they need (the default "
        "without --workload; docs/onions.md)",
    )
    load.add_argument(
        "--sums",
        choices=SUM_SCHEMES,
        default="ashe",
        help="how the server adds the workload's SUM/AVG arguments: ashe (symmetric, the "
        "default), paillier (packed Paillier groups, slow to load; a party without the key can "
        "add them too) or none (every SUM runs on the client)",
    )
    load.add_argument(
        "--no-hom", dest="sums", action="store_const", const="none", help="the same as --sums none"
    )
    load.add_argument(
        "--domain",
        action="append",
        default=[],
        metavar="TABLE.COLUMN=LOW..HIGH",
        help="declare a column's value domain, narrower than its SQL type (repeatable; e.g. "
        "lineitem.l_quantity=0..100, orders.o_orderdate=1992-01-01..1998-12-31): narrower "
        "OPE/HOM widths; values outside it are refused (docs/sql.md#declared-domains)",
    )
    load.set_defaults(handler=run_load)

    query = subparsers.add_parser("query", help="run one SQL statement through Veil")
    query.add_argument("client_dir")
    query.add_argument("sql", help="the statement, or - to read it from standard input")
    query.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="VALUE",
        help="a value for the next ? of the statement (repeatable); numbers pass as numbers, "
        "anything else as text, which the query casts where it compares it with a column",
    )
    query.add_argument("--format", choices=("table", "csv", "json"), default="table")
    query.set_defaults(handler=run_query)

    shell = subparsers.add_parser(
        "shell", help="an interactive SQL prompt over a client directory (\\q quits)"
    )
    shell.add_argument("client_dir")
    shell.set_defaults(handler=run_shell)

    tables = subparsers.add_parser(
        "tables", help="list the tables of a client directory: columns, types, encryptions"
    )
    tables.add_argument("client_dir")
    tables.set_defaults(handler=run_tables)

    explain = subparsers.add_parser(
        "explain", help="show the RemoteSQL fragments, the local plan and what each step reveals"
    )
    explain.add_argument("client_dir")
    explain.add_argument("sql")
    explain.add_argument(
        "--analyze",
        action="store_true",
        help="run the query (peeling what it needs) and show, per statement, the cost "
        "model's estimate beside what it took (calibrates on first use: veil calibrate)",
    )
    explain.add_argument(
        "--bandwidth",
        type=bandwidth_type,
        default=None,
        help=f"with --analyze: {BANDWIDTH_HELP}",
    )
    explain.set_defaults(handler=run_explain)

    calibrate = subparsers.add_parser(
        "calibrate",
        help="measure what decryption, fetching and the server cost here (for the cost model)",
        description="Measure, reading only, the client's decryption cost per kind of stored "
        "column, the link's fetch speed, the server's seconds per unit of its optimizer's "
        "estimate and the local plan's cost per row; kept in CLIENT_DIR/calibration.json.",
    )
    calibrate.add_argument("client_dir")
    calibrate.add_argument("--json", action="store_true", help="print the figures as JSON")
    calibrate.set_defaults(handler=run_calibrate)


def run_load(args: argparse.Namespace) -> int:
    from veil.load.loader import LoadReport, load, read_workload

    if sum(map(bool, (args.adaptive, args.workload, args.design))) > 1:
        print(
            "veil: error: --adaptive stores onions for any query; --workload designs for given "
            "queries; --design loads a design file: choose one",
            file=sys.stderr,
        )
        return 2
    design = None
    if args.design:
        from veil.design.model import PhysicalDesign

        design = PhysicalDesign.load(args.design)
    new_key = args.key is None and not (Path(args.client_dir) / "key.json").exists()
    reports: list[LoadReport] = []
    skip: list[str] = []
    if args.append:
        from veil.frontend.append import append_source

        reports, others = append_source(args.source, args.client_dir, _say)
        skip = [r.table for r in reports]
        if not others:
            rows = sum(r.rows for r in reports)
            print(f"appended {rows:,} rows to {len(reports)} table(s) of {args.client_dir}")
            return 0
    workload = read_workload(args.workload)
    reports += load(
        args.source,
        args.server,
        args.client_dir,
        workload,
        sums=args.sums,
        domains=args.domain,
        key_file=args.key,
        key_provider=args.key_provider,
        design=design,
        replace=args.replace,
        skip=skip,
    )
    from veil.backends import canonical_url

    rows = sum(r.rows for r in reports)
    print(f"loaded {len(reports)} table(s), {rows:,} rows, into {canonical_url(args.server)}")
    if workload:
        from veil.session.workload_plans import plan_workload

        planned = plan_workload(args.client_dir, _as_written(args.workload))
        _say(f"planned {len(planned)} of the workload's queries ahead (plans.sealed)")
    if new_key:
        print(
            f"veil: the data is encrypted under a new master key, {args.client_dir}/key.json: "
            "keep it safe and apart from the server; losing it loses the data "
            "(`veil backup` leaves it out; docs/keys.md)",
            file=sys.stderr,
        )
    print(f'next: veil query {args.client_dir} "SHOW TABLES"', file=sys.stderr)
    return 0


def _as_written(paths: list[str]) -> list[str]:
    """The statements of the workload's files as written (an application sends these texts,
    which ``read_workload``'s renderings are not): their plans' keys."""
    import duckdb

    statements: list[str] = []
    for path in paths:
        try:
            statements += [s.query for s in duckdb.extract_statements(Path(path).read_text())]
        except duckdb.Error:  # (text DuckDB does not read: its queries plan at their first run)
            continue
    return statements


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def run_shell(args: argparse.Namespace) -> int:
    from veil.frontend.shell import shell

    return shell(args.client_dir)


def run_tables(args: argparse.Namespace) -> int:
    """Each table's columns with their SQL types and the server's encryptions of them."""
    from veil.session.clientdir import open_client_dir

    client = open_client_dir(args.client_dir)
    design = client.design(client.master_key())
    for name, table in sorted(design.tables.items()):
        print(name)
        for column in table.columns:
            schemes = sorted(
                {
                    f"{e.scheme} under RND" if e.outer else e.scheme  # a wrapped onion
                    for e in table.encryptions
                    if e.source == column.name
                }
            )
            print(f"  {column.name:<24} {column.type:<16} {', '.join(schemes) or '-'}")
    return 0


def _param(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def run_query(args: argparse.Namespace) -> int:
    from veil.session.session import Session
    from veil.statements import run

    sql = sys.stdin.read() if args.sql == "-" else args.sql
    session = Session(args.client_dir)
    try:
        result = run(session, sql, [_param(v) for v in args.param])
    finally:
        session.close()
    if result.table.num_columns == 0:
        print(f"{result.rowcount} row(s) affected")
        return 0
    from veil.frontend.output import print_table

    print_table(result.table, args.format)
    return 0


def bandwidth_type(text: str) -> float | None:
    from veil.cost.model import parse_bandwidth

    try:
        return parse_bandwidth(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_explain(args: argparse.Namespace) -> int:
    from veil.frontend.explain import explain
    from veil.session.session import Session

    session = Session(args.client_dir)
    try:
        if args.analyze:
            from veil.frontend.analyze import explain_analyze

            print(
                explain_analyze(
                    session, args.sql, bandwidth=args.bandwidth, progress=_progress_line
                )
            )
        else:
            print(explain(session, args.sql))
    finally:
        session.close()
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from veil.cost.calibration import calibration_of
    from veil.session.session import Session

    session = Session(args.client_dir)
    try:
        found = calibration_of(session, again=True, progress=_progress_line)
    finally:
        session.close()
    if args.json:
        print(json.dumps(asdict(found), indent=2, sort_keys=True))
        return 0
    print(f"calibrated {args.client_dir} on its {found.server} server ({found.measured}):")
    print(f"  a statement's round trip: {found.statement_seconds * 1e3:.2f} ms")
    print(f"  server: {found.server_seconds_per_cost * 1e9:.2f} ns per unit of its estimate")
    print(
        f"  fetch: {found.fetch_ns_per_byte:.2f} ns per result byte, "
        f"{found.fetch_ns_per_row:.1f} ns per row"
    )
    print(
        f"  local plan: {found.local_statement_seconds * 1e3:.2f} ms per query, "
        f"{found.local_ns_per_row:.1f} ns per row"
    )
    print(f"  client: {found.step_seconds * 1e3:.2f} ms of its own per statement of a query")
    if found.jit_seconds:
        print(
            "  JIT: "
            + ", ".join(
                f"{ms * 1e3:.2f} ms per {k} function" for k, ms in found.jit_seconds.items()
            )
        )
    print(f"  ASHE: {found.ashe_ns_per_run:,.1f} ns per run of summed row ids in a word's sum")
    print(f"  decrypt ({len(found.sampled)} columns sampled; the median column of each kind):")
    for kind, nanos in sorted(found.classes().items()):
        print(f"    {kind}: {nanos:,.1f} ns per value")
    return 0


def _progress_line(message: str) -> None:
    """A progress message on one rewritten terminal line (nothing when not a terminal)."""
    if sys.stderr.isatty():
        print(f"\r\033[K{message}", end="", file=sys.stderr, flush=True)
