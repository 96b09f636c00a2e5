"""The two databases ``veil bench tpch`` compares: plaintext TPC-H and Veil's ciphertexts.

Both live in the same engine (two DuckDB files, two PostgreSQL databases in
one cluster, or two Spark warehouses of Parquet files) and get the same indexes
(Spark has none: both sides are plain Parquet scans): the primary keys plus
lineitem(l_partkey, l_suppkey) and lineitem(l_suppkey), without which
PostgreSQL runs Q17/Q20 as a scan of lineitem per outer row. On Veil's side an
index covers the DET ciphertext column of each indexed column (the server can
only look up equal ciphertexts), and each table's row id (sequential), which the
semi-join reductions and DML select by.

DuckDB databases and Spark warehouses are cached in the work directory (a marker
file records a finished load); a throwaway PostgreSQL cluster is loaded afresh each run.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from veil.backends import Backend, connect
from veil.backends.base import quote
from veil.design.model import DESIGN_VERSION, PhysicalDesign, TableDesign
from veil.load.loader import load
from veil.session.clientdir import open_client_dir
from veil_dev.servers.postgres import ThrowawayCluster
from veil_dev.tpch.gen import TABLES, generate, read_table
from veil_dev.tpch.queries import query_texts

PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "region": ("r_regionkey",),
    "nation": ("n_nationkey",),
    "part": ("p_partkey",),
    "supplier": ("s_suppkey",),
    "partsupp": ("ps_partkey", "ps_suppkey"),
    "customer": ("c_custkey",),
    "orders": ("o_orderkey",),
    "lineitem": ("l_orderkey", "l_linenumber"),
}
SECONDARY_INDEXES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("lineitem", ("l_partkey", "l_suppkey")),
    ("lineitem", ("l_suppkey",)),
)
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

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


def prepare(
    backend: str,
    scale_factor: float,
    work_dir: Path,
    server: str | None = None,
    design: str | None = None,
) -> BenchServers:
    """Generate (cached), then load both sides into fresh or cached databases.

    ``design``: a design file (``veil design``) to load Veil's side under; without it,
    the greedy design of the 22 queries.
    """
    data = work_dir / f"data_sf{scale_factor:g}"
    if not all((data / f"{t}.parquet").exists() for t in TABLES):
        say(f"generating TPC-H SF {scale_factor:g} in {data}")
        generate(scale_factor, data, overwrite=True)
    root = work_dir / f"{backend}_sf{scale_factor:g}"
    if backend == "duckdb":
        return _cached(
            root, data, ("plain.duckdb", "veil.duckdb"), lambda p: f"duckdb:///{p}", design
        )
    if backend == "spark":
        # ``server``: a standalone master (spark://HOST:PORT); each master its own warehouses
        master = server or "spark-local[2]"
        if server is not None:
            root = work_dir / f"spark_{server.split('//')[-1].replace(':', '_')}_sf{scale_factor:g}"
        return _cached(root, data, ("plain", "veil"), lambda p: f"{master}?warehouse={p}", design)
    if server is not None:
        plain_url, veil_url = (_fresh_schema(server, f"veil_bench_{s}") for s in ("plain", "veil"))
        servers = BenchServers(plain_url, veil_url, root / "client", data)
    else:
        cluster = ThrowawayCluster()
        cluster.start()
        servers = BenchServers(
            cluster.create_database("tpch_plain"),
            cluster.create_database("tpch_veil"),
            root / "client",
            data,
            cluster=cluster,
        )
    _remove(root / "client")
    try:
        _load_both(servers, design)
    except BaseException:
        servers.close()
        raise
    return servers


def _cached(
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
    _load_both(servers, design)
    marker.write_text(json.dumps(servers.load_seconds))
    return servers


def _design_is_current(client_dir: Path) -> bool:
    """Whether a cached Veil database was loaded under this Veil's design version."""
    try:
        version = json.loads((client_dir / "design.json").read_text()).get("version")
    except (OSError, ValueError):
        return False
    return bool(version == DESIGN_VERSION)


def _load_both(servers: BenchServers, design: str | None = None) -> None:
    started = time.perf_counter()
    plain = connect(servers.plain_url)
    try:
        for table in TABLES:
            plain.bulk_load(table, read_table(servers.data_dir, table))
        servers.load_seconds["plain_load"] = time.perf_counter() - started
        started = time.perf_counter()
        for statement in plain_index_sql():
            plain.execute(statement)
        analyze(plain)
        servers.load_seconds["plain_index"] = time.perf_counter() - started
    finally:
        plain.close()
    say(f"plaintext loaded in {sum(servers.load_seconds.values()):.1f} s")
    started = time.perf_counter()
    queries = list(query_texts().values()) if design is None else []
    chosen = PhysicalDesign.load(design) if design is not None else None
    load(str(servers.data_dir), servers.veil_url, str(servers.client_dir), queries, _quiet,
         design=chosen)  # fmt: skip
    servers.load_seconds["veil_load"] = time.perf_counter() - started
    started = time.perf_counter()
    veil = connect(servers.veil_url)
    try:
        for statement in veil_index_sql(design_of(servers.client_dir)):
            veil.execute(statement)
        analyze(veil)
    finally:
        veil.close()
    servers.load_seconds["veil_index"] = time.perf_counter() - started
    say(f"Veil loaded in {servers.load_seconds['veil_load']:.1f} s (+ indexes)")


def plain_index_sql() -> list[str]:
    statements = [
        f"CREATE UNIQUE INDEX {table}_pk ON {table} ({', '.join(columns)})"
        for table, columns in PRIMARY_KEYS.items()
    ]
    for number, (table, columns) in enumerate(SECONDARY_INDEXES):
        statements.append(f"CREATE INDEX {table}_ix{number} ON {table} ({', '.join(columns)})")
    return statements


def veil_index_sql(design: PhysicalDesign) -> list[str]:
    """The same indexes over DET ciphertext columns (and one per row id)."""
    statements = []
    wanted = [*PRIMARY_KEYS.items(), *SECONDARY_INDEXES]
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
    for table in design.tables.values():
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
    import shutil

    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _quiet(_: str) -> None:
    """The loader reports every batch; the benchmark only says when a side is done."""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
