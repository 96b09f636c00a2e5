"""``veil serve`` and ``veil user add|list|remove``."""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from veil.errors import VeilError


class ServeError(VeilError):
    anchor = "serve"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="serve a client directory over the PostgreSQL wire protocol (psql, drivers, BI tools)",
        description="Listen for PostgreSQL clients and answer their SQL through Veil: the keys "
        "stay here, the database server sees only ciphertexts. Users authenticate with "
        "SCRAM-SHA-256 (add them with `veil user add`); --insecure-local accepts anyone, on "
        "a loopback address only.",
    )
    serve.add_argument("client_dir")
    serve.add_argument(
        "--listen", default="127.0.0.1:5433", help="address:port (default %(default)s)"
    )
    serve.add_argument("--tls-cert", help="PEM certificate chain: TLS is offered to clients")
    serve.add_argument("--tls-key", help="PEM private key of --tls-cert")
    serve.add_argument(
        "--insecure-local",
        action="store_true",
        help="no passwords: any user and database name is accepted (loopback addresses only)",
    )
    serve.add_argument(
        "--no-audit",
        action="store_true",
        help="do not log statements to CLIENT_DIR/audit.jsonl (`veil audit` reads it)",
    )
    serve.add_argument(
        "--metrics",
        metavar="ADDR:PORT",
        help="serve Prometheus metrics over HTTP there (e.g. 127.0.0.1:9187), at /metrics",
    )
    serve.add_argument(
        "--log-level",
        choices=("warning", "info", "debug"),
        default="warning",
        help="what Veil logs to standard error; debug: one line per statement with its time "
        "by phase (parse, plan and whether it was cached, encrypt, server, fetch, decrypt, "
        "local) and its shape, parameters redacted (default %(default)s)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="processes answering on the one port, each with its own sessions, so "
        "connections' Python runs on several cores (default: one per core, at most 8, on a "
        "PostgreSQL server; 1 on an embedded DuckDB file or Spark, which one process holds)",
    )
    serve.set_defaults(handler=run_serve)

    user = subparsers.add_parser("user", help="users of `veil serve`")
    actions = user.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="add a user (or set a user's password)")
    add.add_argument("client_dir")
    add.add_argument("name")
    add.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input"
    )
    add.add_argument(
        "--restricted",
        action="store_true",
        help="a new user with no rights until an administrator GRANTs them (default: an "
        "administrator, with every right, DDL and GRANT)",
    )
    add.set_defaults(handler=run_user_add)
    listed = actions.add_parser("list", help="list the users `veil serve` accepts")
    listed.add_argument("client_dir")
    listed.set_defaults(handler=run_user_list)
    remove = actions.add_parser(
        "remove", help="remove a user (its next connection is refused; open ones go on)"
    )
    remove.add_argument("client_dir")
    remove.add_argument("name")
    remove.set_defaults(handler=run_user_remove)


def start(args: argparse.Namespace) -> tuple[object, object]:
    """The running server (``veil._native.WireServer``) for ``args``, and its engine."""
    log_to_stderr(getattr(args, "log_level", "warning"))
    from veil._native import WireServer
    from veil.serve.engine import Engine
    from veil.session.clientdir import open_client_dir

    client = open_client_dir(args.client_dir)  # a clear error before listening
    _check_listen(args)
    cert = Path(args.tls_cert).read_bytes() if args.tls_cert else None
    key = Path(args.tls_key).read_bytes() if args.tls_key else None
    metrics = None
    if getattr(args, "metrics", None):
        from veil.serve.metrics import Metrics

        metrics = Metrics(args.metrics)
    engine = Engine(client.path, audit=not getattr(args, "no_audit", False), metrics=metrics)
    try:
        return WireServer(engine, args.listen, cert, key, args.insecure_local), engine
    except OSError as exc:
        engine.close()
        raise ServeError(f"cannot serve on {args.listen}: {exc}") from None


def _check_listen(args: argparse.Namespace) -> None:
    host = args.listen.rsplit(":", 1)[0].strip("[]")
    if args.insecure_local and not _loopback(host):
        raise ServeError(
            f"--insecure-local accepts anyone without a password, so it listens on loopback "
            f"addresses only, not {host}; use 127.0.0.1, or add users with `veil user add`"
        )
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ServeError("--tls-cert and --tls-key go together")


def log_to_stderr(level: str) -> None:
    """Veil's own loggers (not the libraries': a driver's debug lines are not ours to show)."""
    import logging

    if level == "warning":
        return  # Python's own: warnings and errors reach standard error
    logger = logging.getLogger("veil")
    logger.setLevel(level.upper())
    if not any(getattr(h, "_veil_serve", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler._veil_serve = True  # type: ignore[attr-defined]
        logger.addHandler(handler)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_serve(args: argparse.Namespace) -> int:
    from veil.serve import workers
    from veil.session.clientdir import open_client_dir

    url = open_client_dir(args.client_dir).server_url()
    count = args.workers if args.workers is not None else workers.default_count(url)
    workers.check_count(count, url)
    stopping = _stop_on_signals()
    if count > 1:
        return _run_workers(args, count, stopping)
    server, engine = start(args)
    audit, metrics = engine.audit, engine.metrics  # type: ignore[attr-defined]
    _announce(args, server.address, audit and audit.path, metrics and metrics.address)  # type: ignore[attr-defined]
    try:
        while not stopping.wait(0.5):
            pass
    finally:
        print("veil: stopping", file=sys.stderr)
        server.stop()  # type: ignore[attr-defined]
        engine.close()  # type: ignore[attr-defined]
    return 0


def _stop_on_signals() -> threading.Event:
    """Set on Ctrl-C (SIGINT) or SIGTERM: the server then closes its connections and exits."""
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    return stopping


def _run_workers(args: argparse.Namespace, count: int, stopping: threading.Event) -> int:
    """``--workers N`` (N > 1): a supervisor and N worker processes on one socket."""
    from veil.audit.log import AUDIT_FILE
    from veil.serve.workers import Workers

    _check_listen(args)
    log_to_stderr(args.log_level)
    config = {
        "client_dir": str(Path(args.client_dir).resolve()),
        "tls_cert": args.tls_cert and str(Path(args.tls_cert).resolve()),
        "tls_key": args.tls_key and str(Path(args.tls_key).resolve()),
        "trust": args.insecure_local,
        "audit": not args.no_audit,
        "metrics": bool(args.metrics),
        "log_level": args.log_level,
    }
    pool = Workers(args.listen, count, config)
    summed = None
    try:
        pool.start()
        if args.metrics:
            from veil.serve.metrics import serve_summed

            summed, _ = serve_summed(args.metrics, pool.metrics_addresses, lambda: pool.restarts)
        audit = Path(args.client_dir) / AUDIT_FILE if config["audit"] else None
        metrics = f"{summed.server_address[0]}:{summed.server_address[1]}" if summed else None
        _announce(args, pool.address, audit, metrics, count)
        pool.watch(stopping)
    finally:
        print("veil: stopping", file=sys.stderr)
        pool.stop()
        if summed is not None:
            summed.shutdown()
            summed.server_close()
    return 0


def _announce(
    args: argparse.Namespace,
    address: str,
    audit: Path | None,
    metrics: str | None,
    workers: int = 1,
) -> None:
    """The banner: where the server listens, its audit log and metrics, and a warning."""
    host, port = address.rsplit(":", 1)
    auth = "no passwords (--insecure-local)" if args.insecure_local else "SCRAM-SHA-256"
    processes = f", {workers} worker processes" if workers > 1 else ""
    print(
        f"veil: serving {args.client_dir} on {address} ({auth}{processes}); Ctrl-C stops",
        flush=True,
    )
    print(f"      psql -h {host.strip('[]')} -p {port} -U USER veil", flush=True)
    if audit is not None:
        print(f"veil: audit log {audit} (`veil audit {args.client_dir}`)", flush=True)
    if metrics is not None:
        print(f"veil: metrics on http://{metrics}/metrics", flush=True)
    if args.insecure_local:
        print(
            "veil: WARNING: --insecure-local: anyone who can open a connection on this machine "
            "can read and change every table, without a password; add users with "
            "`veil user add` and drop --insecure-local to require SCRAM",
            file=sys.stderr,
            flush=True,
        )


def run_user_add(args: argparse.Namespace) -> int:
    from veil.serve import users
    from veil.session.clientdir import open_client_dir

    client = open_client_dir(args.client_dir)
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise ServeError("the two passwords differ; nothing was changed")
    users.add(client.path, args.name, password, admin=not args.restricted)
    print(f"veil: user {args.name} can now connect to `veil serve {args.client_dir}`")
    return 0


def run_user_list(args: argparse.Namespace) -> int:
    from veil.serve import users
    from veil.serve.grants import rights_of
    from veil.session.clientdir import open_client_dir

    entries = users.load(open_client_dir(args.client_dir).path)
    known = sorted(entries)
    for name in known:
        print(f"{name}\t{_rights_text(rights_of(entries[name]))}")
    if not known:
        print(
            f"veil: no users yet; add one with `veil user add {args.client_dir} NAME`",
            file=sys.stderr,
        )
    return 0


def _rights_text(rights: Any) -> str:
    """``admin``, or each table's grants: ``orders: SELECT, UPDATE(status)``."""
    if rights.admin:
        return "admin"
    if not rights.grants:
        return "no rights"
    tables = []
    for table, held in sorted(rights.grants.items()):
        parts = [
            name if "*" in columns else f"{name}({', '.join(columns)})"
            for name, columns in sorted(held.items())
        ]
        tables.append(f"{table}: {', '.join(parts)}")
    return "; ".join(tables)


def run_user_remove(args: argparse.Namespace) -> int:
    from veil.serve import users
    from veil.session.clientdir import open_client_dir

    users.remove(open_client_dir(args.client_dir).path, args.name)
    print(
        f"veil: user {args.name} removed; `veil serve {args.client_dir}` refuses its next connection"
    )
    return 0
