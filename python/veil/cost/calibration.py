"""What work costs on this client and this server, measured: the cost model's constants.

The cost model (``veil.cost.model``) turns a plan's estimated rows and bytes into
seconds. The seconds per unit come from here, not from constants in code: a
short profile over the client directory's own server and design, run by
``veil calibrate CDIR`` or on first use, and kept in ``CDIR/calibration.json``.

It measures, reading only (nothing is written to the server):

- per kind of stored column (``cost_class``: scheme, layer, integer or bytes),
  the client's time to decrypt and decode one value: up to ``SAMPLE_ROWS`` rows
  of the largest column of that kind are fetched and decrypted as a query would;
- the time to fetch a result byte over this link (those fetches' seconds over
  their bytes) and a statement's round trip (``SELECT 1``);
- the server's seconds per unit of its optimizer's estimate (``Backend.estimate``:
  PostgreSQL's cost, DuckDB's rows handled) on a scan of the largest table;
- where the server lists its plan's operators and can profile a statement
  (DuckDB), the seconds of each kind of work (``server_time.OperatorCosts``)
  from profiled statements over the largest table (filtered scans, aggregates
  of few and many groups, hash joins), and a result byte's transfer from a
  whole-column fetch of it; elsewhere (PostgreSQL) a result row's own fetch
  cost, its JIT per function compiled (``compile_time``), and rows built into
  hash tables past the caches and index lookups (``build_rate``);
- the client's own time per statement of a query (a one-row query run);
- the local DuckDB plan's time per input row, on a grouped aggregate.

Each figure is the fastest of a few runs; the file says when it was measured.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
from sqlglot import exp

from veil.backends.base import Backend, quote
from veil.backends.duckdb import DuckDBBackend
from veil.cost.build_rate import hash_and_lookup_ns
from veil.cost.compile_time import jit_seconds
from veil.cost.context import CostContext
from veil.cost.server_time import spent_by_kind, spilled_share
from veil.cost.timing import fastest
from veil.crypto.ashe import Ashe
from veil.design.model import BLOCKS, DET, OPE, RND, Encryption, TableDesign, write_private
from veil.exec.decrypt import BlockReader, decrypt_columns
from veil.exec.server import FetchStats, run_remote
from veil.sql.errors import ClientDirectoryError
from veil.sql.plan import RND_ROW_ID
from veil.sql.remote import render

CALIBRATION_FILE = "calibration.json"
CALIBRATION_VERSION = 9  # 2: small tables' samples repeated; 3: per-operator server costs;
# 4: ASHE priced per run of summed ids, the local plan per operator; 5: scans' filters apart;
# 6: groups out of the caches apart; 7: probes too; 8: filters compare a stored column;
# 9: every filter a comparison, those on bytes apart; the client's seconds per statement;
# a result row's fetch; PostgreSQL's JIT
SAMPLE_ROWS = 10_000  # enough for the repeated-values path (``decrypt._repeats``) to apply
CLASS_PREFIX = "class:"
# what a query fetches and decrypts (SEARCH and JOIN-ADJ are matched on the server only)
_DECRYPTABLE = (DET, OPE, RND, BLOCKS)
_RUNS = 5
_LOCAL_ROWS = 200_000
_ASHE_BLOCKS = 4096
_LOCAL_OPERATOR_ROWS = 1_000_000  # the local table the local plan's work is timed on
# the rows a table needs for its statements to time the server's operators
_OPERATOR_ROWS = 10_000
_CACHED_GROUPS = 16_384  # groups of an aggregate whose hash table stays in the caches
_SCATTER = 2_654_435_761  # Knuth's multiplicative hash: row ids to scattered keys
# decrypting a kind of column the design does not hold yet (a later DDL): a DET
# text column's cost on a 2-core 2026 server, so that an estimate stays an estimate
_DEFAULT_DECRYPT_NS = 300.0


@dataclass
class Calibration:
    """Seconds per unit of work, measured on one client directory's client and server."""

    server: str  # the backend's dialect when measured
    # per value: by server column name, and by ``CLASS_PREFIX + cost_class`` (medians)
    decrypt_ns: dict[str, float]
    fetch_ns_per_byte: float  # a result byte from the server into Arrow on the client
    statement_seconds: float  # one trivial statement's round trip
    server_seconds_per_cost: float  # per unit of ``Backend.estimate``'s cost
    local_ns_per_row: float  # the local DuckDB plan, per input row
    local_statement_seconds: float  # ... and once per query (parse, bind, small plan)
    ashe_ns_per_run: float  # removing the two pads of one run of ids an ASHE word summed
    measured: str = ""  # ISO time
    version: int = CALIBRATION_VERSION
    sampled: dict[str, int] = field(default_factory=dict)  # values decrypted per column
    # nanoseconds per unit of each kind of server work (``server_time.OperatorCosts``),
    # where the backend lists its plan's operators (DuckDB); empty: priced by its cost
    operator_ns: dict[str, float] = field(default_factory=dict)
    # the same for the local DuckDB plan (``veil.cost.local_time``), and its planning time
    # per node of its SQL (``local_statement_seconds`` the rest)
    local_operator_ns: dict[str, float] = field(default_factory=dict)
    local_ns_per_node: float = 0.0
    # the client's own seconds per statement of a query (rendering it, binding, handing its
    # rows on), beyond the server's, decrypting and the local plan: TPC-H Q20's four steps
    # took 17 ms of it, ~8% of every small query's time
    step_seconds: float = 0.0
    # a result row's own fetch cost beyond its bytes (PostgreSQL's wire protocol: a
    # message per row, ~60 ns; TPC-H Q18's 6M lineitem rows spent 0.57 s in them)
    fetch_ns_per_row: float = 0.0
    # seconds per function the server's JIT compiles before running a statement, ``plain``
    # and ``optimized`` (``compile_time.jit_seconds``); empty: it compiles none
    jit_seconds: dict[str, float] = field(default_factory=dict)
    # nanoseconds per row built into a hash table out of the caches, beyond the cost units
    # (``build_rate``; PostgreSQL)
    build_ns: float = 0.0
    # ... and per index lookup a nested loop makes (its inner runs)
    lookup_ns: float = 0.0

    def decrypt_seconds(self, enc: Encryption | None, rows: float) -> float:
        if enc is None:
            return 0.0  # a row id or a count: nothing to decrypt
        per_value = self.decrypt_ns.get(enc.name) or self.decrypt_ns.get(
            CLASS_PREFIX + cost_class(enc), _DEFAULT_DECRYPT_NS
        )
        return rows * per_value * 1e-9

    def compile_seconds(self, functions: int, optimized: bool) -> float:
        """The seconds a server's JIT takes to compile ``functions`` functions."""
        rate = self.jit_seconds.get("optimized" if optimized else "plain", 0.0)
        return functions * rate

    def classes(self) -> dict[str, float]:
        """The median cost per value of each kind of column (``cost_class``)."""
        return {
            k.removeprefix(CLASS_PREFIX): v
            for k, v in self.decrypt_ns.items()
            if k.startswith(CLASS_PREFIX)
        }

    def save(self, path: str) -> None:
        write_private(path, json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: str) -> Calibration | None:
        """The calibration in ``path``; None if absent or of another version (measure again)."""
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as exc:
            raise ClientDirectoryError(
                f"{path} is unreadable ({exc}); delete it and run `veil calibrate`"
            ) from None
        if not isinstance(data, dict) or data.get("version") != CALIBRATION_VERSION:
            return None
        try:
            return cls(**data)
        except TypeError:
            return None


def cost_class(enc: Encryption) -> str:
    """The kind of stored column, as far as decrypting it costs: scheme, layer, form."""
    form = "int" if enc.sql_type.is_integral else "bytes"
    return f"{enc.scheme}{'+' + enc.outer if enc.outer else ''} {form}"


def calibration_of(
    session: CostContext, *, again: bool = False, progress: Callable[[str], None] | None = None
) -> Calibration:
    """The client directory's calibration, measured now if it has none (or ``again``)."""
    path = str(session.client.path / CALIBRATION_FILE)
    found = None if again else Calibration.load(path)
    if found is not None and found.server == session.backend.dialect:
        return found
    measured = calibrate(session, progress)
    measured.save(path)
    return measured


def calibrate(session: CostContext, progress: Callable[[str], None] | None = None) -> Calibration:
    """Measure every figure of a ``Calibration`` on ``session``'s client and server."""
    say = progress or (lambda _: None)
    backend = session.backend
    statement = fastest(lambda: backend.execute("SELECT 1"))
    decrypt_ns: dict[str, float] = {}
    sampled: dict[str, int] = {}
    by_class: dict[str, list[float]] = {}
    fetches: list[tuple[int, float]] = []  # (bytes, seconds) of each sample's statement
    columns = _fetchable(session)
    for number, (table, enc) in enumerate(columns, 1):
        say(f"decrypting column {number} of {len(columns)} ({table.name}.{enc.source})")
        sample, seconds = _sample(session, table, enc)
        if sample.num_rows == 0:
            continue
        fetches.append((sample.nbytes, seconds))
        sample = _repeated(sample)
        wanted: list[tuple[str, Encryption | None]] = [("v", enc)]
        if enc.row_bound:
            wanted.append((RND_ROW_ID, None))
        blocks = BlockReader(backend, FetchStats())  # a calibration is no query: not counted
        decrypting = fastest(
            lambda: decrypt_columns(sample, table, wanted, session.ciphers, blocks)  # noqa: B023
        )
        nanos = decrypting / sample.num_rows * 1e9
        decrypt_ns[enc.name] = round(nanos, 2)
        sampled[enc.name] = sample.num_rows
        by_class.setdefault(CLASS_PREFIX + cost_class(enc), []).append(nanos)
    # a column added later (DDL) costs what the median column of its kind costs
    decrypt_ns.update({k: round(statistics.median(v), 2) for k, v in by_class.items()})
    say("timing a scan of the largest table")
    per_cost = _server_seconds_per_cost(session, statement)
    per_byte = _per_byte(fetches)
    say("timing scans, hash joins and aggregates on the server")
    operators = _operator_ns(session, statement)
    if operators:
        per_byte = operators.pop("byte") * 1e-9
    say("timing the server's JIT and hash tables")
    jit = jit_seconds(session)
    built = hash_and_lookup_ns(session, statement, per_cost) if not operators else {}
    say("timing a query's own work on the client")
    step = _step_seconds(session)
    # a whole column's fetch (``operators``' byte) counts its rows' own cost in its bytes;
    # the samples' slope leaves it out
    row_fetch = 0.0 if operators else _per_row(session, per_byte)
    say("timing the local DuckDB plan and ASHE unpadding")
    per_row, _ = _local_costs()
    per_statement, per_node = _local_planning()
    local_operators = _local_operator_ns()
    say("")
    return Calibration(
        server=backend.dialect,
        decrypt_ns=decrypt_ns,
        fetch_ns_per_byte=round(per_byte * 1e9, 4),
        statement_seconds=statement,
        server_seconds_per_cost=per_cost,
        local_ns_per_row=round(per_row, 2),
        local_statement_seconds=per_statement,
        ashe_ns_per_run=round(_ashe_ns_per_run(session), 2),
        measured=datetime.now(UTC).isoformat(timespec="seconds"),
        sampled=sampled,
        operator_ns=operators,
        local_operator_ns=local_operators,
        local_ns_per_node=round(per_node * 1e9, 2),
        step_seconds=step,
        fetch_ns_per_row=round(row_fetch * 1e9, 4),
        jit_seconds=jit,
        build_ns=round(built.get("build", 0.0), 4),
        lookup_ns=round(built.get("lookup", 0.0), 4),
    )


def _per_row(session: CostContext, per_byte: float) -> float:
    """Seconds per result row beyond its bytes: the largest table's row ids fetched at two
    lengths (the difference in rows, less its bytes' cost, over the rows)."""
    tables = [t for t in session.design.tables.values() if t.row_count >= 2 * SAMPLE_ROWS]
    if not tables:
        return 0.0
    table = max(tables, key=lambda t: t.row_count)
    backend = session.backend
    fetched: list[tuple[int, int, float]] = []
    for rows in (SAMPLE_ROWS, min(table.row_count, 20 * SAMPLE_ROWS)):
        select = exp.select(exp.column(table.row_id)).from_(exp.to_table(table.server_name))
        sql, params = render(select.limit(rows), backend)
        size = backend.execute(sql, params or None).nbytes  # the warm-up run, measured
        seconds = fastest(lambda: backend.execute(sql, params or None))  # noqa: B023
        fetched.append((rows, size, seconds))
    (rows1, bytes1, seconds1), (rows2, bytes2, seconds2) = fetched
    extra = seconds2 - seconds1 - (bytes2 - bytes1) * per_byte
    return max(extra / (rows2 - rows1), 0.0)


def _step_seconds(session: CostContext) -> float:
    """The client's seconds around one statement of a query: a one-row fetch from the
    smallest table run as a query, less the time its stats give the server, decrypting
    and the local plan (the median of a few runs)."""
    table = min(session.design.tables.values(), key=lambda t: t.row_count)
    if not table.columns:
        return 0.0
    query = exp.select(exp.column(table.columns[0].name)).from_(exp.to_table(table.name)).limit(1)
    try:
        plan = session.plan(query)
        session.execute_plan(plan, FetchStats())  # warm: ciphers made, statements cached
    except Exception:  # a calibration measures: a table the planner refuses is not priced
        return 0.0
    left = []
    for _ in range(_RUNS * 2):
        stats = FetchStats()
        started = time.perf_counter()
        session.execute_plan(plan, stats)
        spent = time.perf_counter() - started
        accounted = stats.server_seconds + stats.decrypt_seconds + stats.local_seconds
        left.append(max(spent - accounted, 0.0) / max(stats.statements, 1))
    return statistics.median(left)


def _per_byte(fetches: list[tuple[int, float]]) -> float:
    """Seconds per result byte: the slope of a statement's seconds against its bytes (the
    intercept is the statement's fixed cost, which small samples would otherwise inflate)."""
    sizes = np.array([b for b, _ in fetches], dtype=np.float64)
    seconds = np.array([t for _, t in fetches], dtype=np.float64)
    if len(fetches) >= 3 and np.ptp(sizes) > 0:
        slope = float(np.polyfit(sizes, seconds, 1)[0])
        if slope > 0:
            return slope
    total = float(sizes.sum())
    return float(seconds.sum()) / total if total else 1e-9


def _fetchable(session: CostContext) -> list[tuple[TableDesign, Encryption]]:
    """Every stored column a query may fetch and decrypt."""
    return [
        (table, enc)
        for table in session.design.tables.values()
        for enc in table.encryptions
        if enc.scheme in _DECRYPTABLE and not enc.is_expression
    ]


def _sample(session: CostContext, table: TableDesign, enc: Encryption) -> tuple[pa.Table, float]:
    """Up to ``SAMPLE_ROWS`` stored values of ``enc`` (with row ids), and the fetch's seconds."""
    columns = [exp.column(table.stored_column(enc))]
    if enc.row_bound:
        columns.append(exp.column(table.row_id))
    select = exp.select(*columns).from_(exp.to_table(table.server_name)).limit(SAMPLE_ROWS)
    stats = FetchStats()
    return run_remote(select, session.backend, stats), stats.server_seconds


def _repeated(sample: pa.Table) -> pa.Table:
    """A small table's sample repeated to ``SAMPLE_ROWS`` rows, as a join repeats its rows.

    Timed alone, nation's 25 keys cost 27 µs a value (the call's fixed cost
    over 25 values), and the model priced Q9's 320K joined rows of n_name at
    ten times the query; repeated, they take the dictionary path
    (``decrypt._repeats``) a joined fetch takes.
    """
    if sample.num_rows >= SAMPLE_ROWS:
        return sample
    copies = -(-SAMPLE_ROWS // sample.num_rows)
    return pa.concat_tables([sample] * copies).slice(0, SAMPLE_ROWS).combine_chunks()


def _server_seconds_per_cost(session: CostContext, statement: float) -> float:
    """Seconds per unit of the server's estimate, on a filtered scan of the largest table."""
    tables = [t for t in session.design.tables.values() if t.row_count > 0]
    if not tables:
        return 1e-8
    table = max(tables, key=lambda t: t.row_count)
    # a filter no statistics decide: the server must read every row
    row_id = exp.column(table.row_id)
    third = exp.Mod(this=row_id.copy(), expression=exp.Literal.number(3))
    select = (
        exp.select(exp.Count(this=exp.Star()), exp.Max(this=row_id))
        .from_(exp.to_table(table.server_name))
        .where(exp.EQ(this=third, expression=exp.Literal.number(1)))
    )
    sql, params = render(select, session.backend)
    backend = session.backend
    cost = backend.estimate(sql, params or None).cost or float(table.row_count)
    seconds = fastest(lambda: backend.execute(sql, params or None))
    return max(seconds - statement, 1e-6) / max(cost, 1.0)


def _operator_ns(session: CostContext, statement: float) -> dict[str, float]:
    """Nanoseconds per unit of each kind of server work, and per result byte (``"byte"``).

    Each statement is profiled: its operators' rows and the time each took
    (summed over the server's threads), so each kind's cost is its own
    operators' time over their work, not a difference of statement times (under
    load those drowned a join in its scans). The statements' wall times over
    their profiled times scale them to wall seconds. A scan and two aggregates
    (into few groups, whose groups cost nothing, and into many) give a row's
    expression, a row into an aggregate and a group made; a join gives a probe
    and a build (alike); a fetch of a whole column gives a byte. Empty when
    the backend cannot profile, or the largest table is too small to time.
    """
    backend = session.backend
    tables = [t for t in session.design.tables.values() if t.row_count >= _OPERATOR_ROWS]
    # DuckDB's profiler times each operator; PostgreSQL's EXPLAIN ANALYZE adds its clock
    # reads to every row (TPC-H Q1's sort: 8.3 s of a 1.5 s statement): priced by its cost
    if backend.dialect != "duckdb" or not tables:
        return {}
    table = max(tables, key=lambda t: t.row_count)
    name, row_id = quote(table.server_name), quote(table.row_id)
    # a filter as queries have them, a stored column against a constant: a DET integer
    # column's ciphertexts (their order is no column's, so no row group is skipped)
    keys = [
        e for e in table.encryptions if e.scheme == DET and e.sql_type.is_integral and not e.outer
    ]
    compared = quote(max(keys, key=_distinct).name) if keys else row_id
    # a filter on text, as queries have them: a DET text column's ciphertexts (bytes)
    texts = [
        e
        for e in table.encryptions
        if e.scheme == DET and not e.sql_type.is_integral and not e.outer and _distinct(e) > 1
    ]
    text = quote(max(texts, key=_distinct).name) if texts else None
    return _operator_costs(backend, name, row_id, compared, table.row_count, statement, text)


def _distinct(enc: Encryption) -> int:
    distinct = enc.params.get("distinct")
    return distinct if isinstance(distinct, int) else 0


def _operator_costs(
    backend: Backend,
    name: str,
    row_id: str,
    compared: str,
    rows: int,
    statement: float,
    text: str | None = None,
) -> dict[str, float]:
    """``_operator_ns`` on table ``name`` of ``rows`` rows numbered by ``row_id``, its
    filters comparing integer column ``compared`` with its quantiles (and bytes column
    ``text``, if given, with its most common value)."""
    profile = getattr(backend, "profile", None)
    if profile is None:  # a backend that cannot profile a statement
        return {}
    cached = max(rows // (4 * _CACHED_GROUPS), 1)
    # the rows each statement keeps: a half, a quarter, a 64th, a ``cached``-th; compared
    # with a constant as queries filter (a computed test costs more than a comparison)
    shares = [0.5, 0.25, 1 / 64, 1 / cached]
    listed = ", ".join(str(share) for share in shares)
    found = backend.execute(f"SELECT quantile_disc({compared}, [{listed}]) FROM {name}").column(0)
    bounds = found[0].as_py() if len(found) else None
    if isinstance(bounds, list) and all(isinstance(b, int) for b in bounds):
        half, quarter, built_share, few = (f"{compared} < {b}" for b in bounds)
    else:  # no integer column: every k-th row
        half, quarter, built_share, few = (f"{row_id} % {k} = 0" for k in (2, 4, 64, cached))

    # keys scattered over the groups (a row and the next hash far apart), as a query's
    # keys are: consecutive ids into consecutive groups stayed in the caches at any size
    def scattered(modulo: int) -> str:
        return f"({row_id} * {_SCATTER}) % {modulo}"

    def grouped(groups: int, where: str = "") -> str:
        inner = f"SELECT {scattered(groups)} AS g, count(*) AS c FROM {name}{where} GROUP BY g"
        return f"SELECT count(*), max(c) FROM ({inner}) AS s"

    # a self-join of a 64th of the rows (``a.r = b.r`` carries ``b``'s filter over to
    # ``a``): as many rows built as probe
    built = f"SELECT {row_id} AS r FROM {name} WHERE {built_share}"
    # every row probing a quarter of them, scattered: a table out of the caches
    large = f"SELECT {scattered(rows)} AS r FROM {name} WHERE {quarter}"

    statements = {
        "scan": f"SELECT count(*), max({row_id}) FROM {name} WHERE {half}",
        "few groups": grouped(16),
        # 16,384 groups of about four rows each: a group's cost in a table in the caches
        "cached groups": grouped(_CACHED_GROUPS, f" WHERE {few}"),
        "many groups": grouped(max(rows // 4, 17)),
        "join": f"SELECT count(*) FROM {name} AS a JOIN ({built}) AS b ON a.{row_id} = b.r",
        "large join": f"SELECT count(*) FROM {name} AS a JOIN ({large}) AS b ON a.{row_id} = b.r",
        # every row probes a table of 1,024 keys (no filter of the scan by them: the key
        # is computed), where the self-join builds as many as it probes
        "probes": (
            f"SELECT count(*) FROM {name} AS a JOIN range(1024) AS b(r) ON a.{row_id} % 1024 = b.r"
        ),
    }
    found = backend.execute(f"SELECT mode({text}) FROM {name}").column(0) if text else None
    common = found[0].as_py() if found is not None and len(found) else None
    if isinstance(common, bytes):  # a text filter, as TPC-H Q19's on lineitem's ship mode
        literal = "".join(f"\\x{byte:02X}" for byte in common)
        statements["text scan"] = (
            f"SELECT count(*), max({row_id}) FROM {name} WHERE {text} = '{literal}'::BLOB"
        )
    walls, spent = 0.0, 0.0
    kinds: dict[str, dict[str, tuple[float, float]]] = {}
    for label, sql in statements.items():
        backend.execute(sql)  # warm: the columns' blocks in memory, as a query finds them
        walls += max(fastest(lambda: backend.execute(sql)) - statement, 1e-6)  # noqa: B023
        # the least busy of a few profiles, as for the wall times (``fastest``)
        runs = [spent_by_kind(profile(sql)) for _ in range(_RUNS)]
        kinds[label] = min(runs, key=lambda run: sum(seconds for _, seconds in run.values()))
        spent += sum(seconds for _, seconds in kinds[label].values())
    # the profiler's times are summed over the server's threads: wall seconds per one
    parallel = walls / max(spent, 1e-9)

    def per_unit(kind: str, labels: list[str]) -> float:
        units = sum(kinds[label][kind][0] for label in labels)
        seconds = sum(kinds[label][kind][1] for label in labels)
        return seconds / max(units, 1.0)

    expression, filtering, on_bytes = (
        x * parallel
        for x in _fit(kinds, list(kinds), "expression", "expression", "filter", "filter_bytes")
    )
    if "text scan" not in statements:  # nothing measured it
        on_bytes = filtering
    joins = ["join", "large join", "probes"]
    probe, probe_spill, build = (
        x * parallel for x in _fit(kinds, joins, "join", "probe", "probe_spill", "build")
    )
    group_input = max(per_unit("group", ["few groups"]) * parallel, 1e-12)

    def per_group(label: str) -> tuple[float, float]:
        """Seconds per group made (per key column) by a statement, and the groups."""
        units, seconds = kinds[label]["group"]
        made = kinds[label]["groups"][0]
        return max((seconds * parallel - units * group_input) / max(made, 1.0), 1e-12), made

    group, _ = per_group("cached groups")
    many, made = per_group("many groups")
    share = spilled_share(made)
    group_spill = max(many - group, 0.0) / share if share > 0 else 0.0
    fetched = f"SELECT {row_id} FROM {name}"
    size = float(backend.execute(fetched).nbytes)  # the warm-up run, measured
    seconds = max(fastest(lambda: backend.execute(fetched)) - statement, 1e-6)
    byte = max(seconds - rows * expression, seconds * 0.1) / max(size, 1.0)
    costs = {
        "expression": expression,
        "filter": filtering,
        "filter_bytes": on_bytes,
        "probe": probe,
        "probe_spill": probe_spill,
        "build": build,
        "group_input": group_input,
        "group": group,
        "group_spill": group_spill,
        "byte": byte,
    }
    return {kind: round(value * 1e9, 4) for kind, value in costs.items()}


def _local_costs() -> tuple[float, float]:
    """The local plan's nanoseconds per input row (a grouped aggregate over an Arrow table)
    and seconds per query (the same over a few rows)."""
    rng = np.random.default_rng(0)
    data = pa.table(
        {
            "k": rng.integers(0, 1000, _LOCAL_ROWS),
            "v": rng.integers(0, 1 << 40, _LOCAL_ROWS),
            "s": pa.array([f"text {i % 5000}" for i in range(_LOCAL_ROWS)]),
        }
    )
    con = duckdb.connect()
    try:
        sql = "SELECT k, count(*), sum(v), max(s) FROM t GROUP BY k ORDER BY 2 DESC LIMIT 10"
        con.register("t", data.slice(0, 100))
        statement = fastest(lambda: con.sql(sql).to_arrow_table())
        con.register("t", data)
        whole = fastest(lambda: con.sql(sql).to_arrow_table())
        return max(whole - statement, 0.0) / _LOCAL_ROWS * 1e9, statement
    finally:
        con.close()


def _fit(
    kinds: dict[str, dict[str, tuple[float, float]]], labels: list[str], spent: str, *parts: str
) -> tuple[float, ...]:
    """Seconds per unit of kinds of work that share their operators' time (``spent``'s): the
    least squares fit over the ``labels``' statements (a scan's columns and filters, a
    join's probes, probes out of the caches and builds), none below a tenth of their
    blended rate."""
    units = np.array([[kinds[k][part][0] for part in parts] for k in labels])
    seconds = np.array([kinds[k][spent][1] for k in labels])
    blended = seconds.sum() / max(units.sum(), 1.0)
    fit = np.linalg.lstsq(units, seconds, rcond=None)[0]
    return tuple(max(float(x), blended * 0.1) for x in fit)


def _local_operator_ns() -> dict[str, float]:
    """``_operator_ns`` on a local in-memory DuckDB: the costs of the local plan's work."""
    backend = DuckDBBackend("duckdb://:memory:")
    try:
        backend.execute(
            f"CREATE TABLE t AS SELECT range AS r, (range * {_SCATTER}) % 1000003 AS v "
            f"FROM range({_LOCAL_OPERATOR_ROWS})"
        )
        costs = _operator_costs(backend, "t", "r", "v", _LOCAL_OPERATOR_ROWS, statement=0.0)
        costs.pop("byte", None)  # nothing crosses a link
        return costs
    finally:
        backend.close()


def _local_planning() -> tuple[float, float]:
    """A local statement's fixed seconds, and its planning's seconds per node of its SQL:
    the same aggregate over a few rows with one predicate and with a hundred (TPC-H Q19's
    local plan, 198 nodes over 323 rows, took 3.6 ms; Q4's, 27 over 5, 1.6 ms)."""
    con = duckdb.connect()
    try:
        con.register("t", pa.table({"k": np.arange(100) % 7, "v": np.arange(100)}))
        times, sizes = [], []
        for terms in (1, 100):
            test = " OR ".join(f"v = {i}" for i in range(terms))
            sql = f"SELECT k, count(*), sum(v) FROM t WHERE {test} GROUP BY k ORDER BY k"
            sizes.append(sum(1 for _ in exp.maybe_parse(sql, dialect="duckdb").walk()))
            times.append(fastest(lambda: con.sql(sql).to_arrow_table()))  # noqa: B023
        per_node = max(times[1] - times[0], 0.0) / (sizes[1] - sizes[0])
        return max(times[0] - sizes[0] * per_node, 0.0), per_node
    finally:
        con.close()


def _ashe_ns_per_run(session: CostContext) -> float:
    """Unpadding one word's sums of 64-id blocks, half their ids summed at random, per run of
    summed ids (a run costs its two ends' pads, whatever its length); a throwaway key."""
    blocks = np.arange(_ASHE_BLOCKS, dtype=np.int64)
    masks = np.random.default_rng(0).integers(0, 2**64, _ASHE_BLOCKS, dtype=np.uint64)
    starts = masks & ~(masks << np.uint64(1))  # a run starts where its lower bit is clear
    runs = int(np.unpackbits(starts.view(np.uint8)).sum())
    ashe = Ashe.from_master(session.master, "calibration", column="calibration")
    return fastest(lambda: ashe.pad_sums_blocks(blocks, masks)) / runs * 1e9
