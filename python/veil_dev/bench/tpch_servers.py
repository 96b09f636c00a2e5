"""The two databases ``veil bench tpch|tpcds`` compares: plaintext and Veil's ciphertexts.

Both live in the same engine (two DuckDB files, two PostgreSQL databases in
one cluster, or two Spark warehouses of Parquet files) and get the same indexes
(Spark has none: both sides are plain Parquet scans): the primary keys plus
lineitem(l_partkey, l_suppkey) and lineitem(l_suppkey), without which
PostgreSQL runs Q17/Q20 as a scan of lineitem per outer row. On Veil's side an
index covers the DET ciphertext column of each indexed column (the server can
only look up equal ciphertexts), and each table's row id (sequential), which the
semi-join reductions and DML select by.

TPC-DS gets its tables' primary keys (``suite.TPCDS_PRIMARY_KEYS``) on both sides.

DuckDB databases and Spark warehouses are cached in the work directory (a marker
file records a finished load); a throwaway PostgreSQL cluster is loaded afresh each run.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from veil.backends import Backend, connect
from veil.backends.base import quote
from veil.design.model import DESIGN_VERSION, PhysicalDesign, TableDesign
from veil.load.loader import load
from veil.session.clientdir import open_client_dir
from veil_dev.bench.suite import PRIMARY_KEYS, SECONDARY_INDEXES, Suite
from veil_dev.servers.postgres import ThrowawayCluster
from veil_dev.servers.toxiproxy import Link
from veil_dev.tpch.gen import read_batches

MARKER = "loaded.json"


@dataclass
class BenchServers:
    """URLs of the plaintext and the Veil database, and how loading them went."""

    plain_url: str
    veil_url: str
    client_dir: Path
    data_dir: Path
    load_seconds: dict[str, float] = field(default_factory=dict)
    cluster: ThrowawayCluster | None = None
    link: Link | None = None
    # where queries reach the servers when they differ from the load's URLs (a link proxy)
    plain_query_url: str | None = None
    veil_query_dir: Path | None = None

    def close(self) -> None:
        if self.link is not None:
            self.link.close()
        if self.cluster is not None:
            self.cluster.stop()


def prepare(
    suite: Suite,
    backend: str,
    scale_factor: float,
    work_dir: Path,
    server: str | None = None,
    design: str | None = None,
    link: str | None = None,
) -> BenchServers:
    """Generate (cached), then load both sides into fresh or cached databases.

    ``design``: a design file (``veil design``) to load Veil's side under; without it,
    the greedy design of the suite's queries. ``link`` (PostgreSQL): a preset of
    ``veil_dev.servers.toxiproxy.LINKS`` the queries cross; loads go direct.
    """
    data = work_dir / f"data_sf{scale_factor:g}"
    if not all((data / f"{t}.parquet").exists() for t in suite.tables):
        say(f"generating {suite.title} SF {scale_factor:g} in {data}")
        suite.generate(scale_factor, data)
    root = work_dir / f"{backend}_sf{scale_factor:g}"
    if backend == "duckdb":
        files = ("plain.duckdb", "veil.duckdb")
        return _cached(suite, root, data, files, lambda p: f"duckdb:///{p}", design)
    if backend == "spark":
        # ``server``: a standalone master (spark://HOST:PORT); each master its own warehouses
        master = server or "spark-local[2]"
        if server is not None:
            root = work_dir / f"spark_{server.split('//')[-1].replace(':', '_')}_sf{scale_factor:g}"
        url_of: Callable[[Path], str] = lambda p: f"{master}?warehouse={p}"  # noqa: E731
        return _cached(suite, root, data, ("plain", "veil"), url_of, design)
    if server is not None:
        plain_url, veil_url = (
            _fresh_schema(server, f"veil_bench_{suite.name}_{s}") for s in ("plain", "veil")
        )
        servers = BenchServers(plain_url, veil_url, root / "client", data)
    else:
        cluster = ThrowawayCluster()
        cluster.start()
        servers = BenchServers(
            cluster.create_database(f"{suite.name}_plain"),
            cluster.create_database(f"{suite.name}_veil"),
            root / "client",
            data,
            cluster=cluster,
        )
    _remove(root / "client")
    try:
        _load_both(suite, servers, design)
        if link is not None:
            _route_through(servers, link, root / "client_link")
    except BaseException:
        servers.close()
        raise
    return servers


def _route_through(servers: BenchServers, preset: str, client_copy: Path) -> None:
    """Send both sides' queries through a Toxiproxy link: plaintext's URL, and a copy of
    Veil's client directory whose server URL names the proxy (the load used the original)."""
    plain, veil = urlsplit(servers.plain_url), urlsplit(servers.veil_url)
    if (plain.hostname, plain.port) != (veil.hostname, veil.port):
        raise SystemExit("--link needs both databases on one server")
    servers.link = Link.start(preset, f"{plain.hostname}:{plain.port}")
    servers.plain_query_url = servers.link.route(servers.plain_url)
    _remove(client_copy)
    shutil.copytree(servers.client_dir, client_copy)
    (client_copy / "server.json").write_text(
        json.dumps({"url": servers.link.route(servers.veil_url)}) + "\n"
    )
    servers.veil_query_dir = client_copy


def _cached(
    suite: Suite,
    root: Path,
    data: Path,
    files: tuple[str, str],
    url_of: Callable[[Path], str],
    design: str | None,
) -> BenchServers:
    """Plaintext and Veil servers in ``root``'s ``files`` (DuckDB files, Spark warehouses):
    loaded once, reused while the marker says the load finished under this design version."""
    servers = BenchServers(url_of(root / files[0]), url_of(root / files[1]), root / "client", data)
    marker = root / MARKER
    if marker.exists() and _design_is_current(root / "client"):
        servers.load_seconds = json.loads(marker.read_text())
        say(f"reusing the databases loaded in {root}")
        return servers
    for old in (*files, "client"):
        _remove(root / old)
    root.mkdir(parents=True, exist_ok=True)
    _load_both(suite, servers, design)
    marker.write_text(json.dumps(servers.load_seconds))
    return servers


def _design_is_current(client_dir: Path) -> bool:
    """Whether a cached Veil database was loaded under this Veil's design version."""
    try:
        version = json.loads((client_dir / "design.json").read_text()).get("version")
    except (OSError, ValueError):
        return False
    return bool(version == DESIGN_VERSION)


def _load_both(suite: Suite, servers: BenchServers, design: str | None = None) -> None:
    started = time.perf_counter()
    plain = connect(servers.plain_url)
    try:
        for table in suite.tables:
            schema, batches = read_batches(servers.data_dir, table)
            plain.bulk_load(table, batches, schema=schema)
        servers.load_seconds["plain_load"] = time.perf_counter() - started
        started = time.perf_counter()
        for statement in plain_index_sql(suite.primary_keys, suite.secondary_indexes):
            plain.execute(statement)
        analyze(plain)
        servers.load_seconds["plain_index"] = time.perf_counter() - started
    finally:
        plain.close()
    say(f"plaintext loaded in {sum(servers.load_seconds.values()):.1f} s")
    started = time.perf_counter()
    queries = list(suite.queries.values()) if design is None else []
    chosen = PhysicalDesign.load(design) if design is not None else None
    load(str(servers.data_dir), servers.veil_url, str(servers.client_dir), queries, _quiet,
         design=chosen)  # fmt: skip
    servers.load_seconds["veil_load"] = time.perf_counter() - started
    started = time.perf_counter()
    veil = connect(servers.veil_url)
    try:
        keys, secondary = suite.primary_keys, suite.secondary_indexes
        row_ids = veil.dialect != "duckdb"  # see veil_index_sql
        for statement in veil_index_sql(design_of(servers.client_dir), keys, secondary, row_ids):
            veil.execute(statement)
        analyze(veil)
    finally:
        veil.close()
    servers.load_seconds["veil_index"] = time.perf_counter() - started
    say(f"Veil loaded in {servers.load_seconds['veil_load']:.1f} s (+ indexes)")


def plain_index_sql(
    primary_keys: dict[str, tuple[str, ...]] = PRIMARY_KEYS,
    secondary: tuple[tuple[str, tuple[str, ...]], ...] = SECONDARY_INDEXES,
) -> list[str]:
    statements = [
        f"CREATE UNIQUE INDEX {table}_pk ON {table} ({', '.join(columns)})"
        for table, columns in primary_keys.items()
    ]
    for number, (table, columns) in enumerate(secondary):
        statements.append(f"CREATE INDEX {table}_ix{number} ON {table} ({', '.join(columns)})")
    return statements


def veil_index_sql(
    design: PhysicalDesign,
    primary_keys: dict[str, tuple[str, ...]] = PRIMARY_KEYS,
    secondary: tuple[tuple[str, tuple[str, ...]], ...] = SECONDARY_INDEXES,
    row_ids: bool = True,
) -> list[str]:
    """The same indexes over DET ciphertext columns, and with ``row_ids`` one per row id.

    PostgreSQL probes the row-id indexes (a reduction's ``rid IN (...)``, point writes);
    DuckDB's planner never uses them for Veil's statements (its EXPLAIN shows sequential
    scans and hash semi-joins with or without them), so there they only cost build time:
    TPC-DS SF 1, 7.2 of 27.6 s of Veil's index builds at load average 8, inventory's 3.9 s.
    """
    statements = []
    wanted = [*primary_keys.items(), *secondary]
    for number, (name, columns) in enumerate(wanted):
        table = design.tables.get(name)
        if table is None:
            continue
        det = [_det_column(table, c) for c in columns]
        if None in det[:1]:
            continue  # no DET on the leading column: nothing the server could look up
        present = [d for d in det if d is not None]
        statements.append(
            f"CREATE INDEX {quote(f'{table.server_name}_ix{number}')} "
            f"ON {quote(table.server_name)} ({', '.join(quote(d) for d in present)})"
        )
    for table in design.tables.values() if row_ids else ():
        statements.append(
            f"CREATE INDEX {quote(f'{table.server_name}_rid')} "
            f"ON {quote(table.server_name)} ({quote(table.row_id)})"
        )
    return statements


def _det_column(table: TableDesign, source: str) -> str | None:
    found = table.find(source, "DET")
    return None if found is None else found.name


def design_of(client_dir: Path) -> PhysicalDesign:
    client = open_client_dir(client_dir)
    return client.design(client.master_key())


def analyze(backend: Backend) -> None:
    """Fresh optimizer statistics (PostgreSQL plans joins from them)."""
    if backend.dialect == "postgres":
        backend.execute("ANALYZE")


def server_bytes(url: str) -> dict[str, int]:
    """Bytes of every table the server holds at ``url`` (its database or schema).

    All tables, not just those a design names, so that side tables (HOM
    ciphertexts) and anything else Veil stores are counted; on PostgreSQL a
    table's bytes include its indexes and TOAST.
    """
    backend = connect(url)
    try:
        return {t: backend.table_bytes(t) for t in backend.table_names()}
    finally:
        backend.close()


def _fresh_schema(url: str, name: str) -> str:
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        con.execute(f"CREATE SCHEMA {name}")
        con.execute("CREATE EXTENSION IF NOT EXISTS veil")
    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}options=-csearch_path%3D{name}%2Cpublic"


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _quiet(_: str) -> None:
    """The loader reports every batch; the benchmark only says when a side is done."""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
