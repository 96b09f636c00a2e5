"""Differential checks: one query on plaintext DuckDB and through Veil.

A query plaintext DuckDB rejects (or runs past the time guard) is discarded.
Otherwise Veil must return the same multiset of rows (numbers to 1e-9
relative) with the same Arrow column types (Veil's local DuckDB should type a
result as DuckDB does: a DECIMAL(38,0) where DuckDB gives DOUBLE shows up in a
UNION or a CAST sooner or later); a Veil error where plaintext succeeds is a
failure, and so is any exception that is not a ``veil.errors.VeilError`` (a
crash). So is a right answer that Veil found by falling back to fetching whole
tables (``veil.sql.fallbacks``) for a shape not on docs/sql.md's list: a
planner failure the answers alone would hide. Other warnings Veil logs are
counted as notes, not failures. Each failure gets
a *signature* (its class with names and numbers blanked out), so that a batch
reports each distinct problem once.

The fuzz database (``build_env``) is TPC-H SF 0.01 plus the edge tables,
loaded with a workload of the TPC-H queries, ``features.sql`` and
``WORKLOAD_SEEDS`` generated queries, so that the design stores DET, OPE, HOM
and SEARCH encryptions and the planner pushes work to the server.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import functools
import logging
import math
import os
import random
import re
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import veil.load.loader as loader
from tests.fuzz.generator import Query, generate, workload
from tests.fuzz.schema import Catalog, plain_connection, read_catalog, write_source
from tests.fuzz.ties import tied, window
from veil.designer.greedy import greedy_design
from veil.errors import VeilError
from veil.load.loader import load
from veil.session.session import Session
from veil.sql import fallbacks
from veil_dev.tpch.queries import query_texts

# Generated queries that join the designer's workload (never used as test seeds).
WORKLOAD_SEEDS = range(1_000_000, 1_000_300)
HOM_MODES = ("auto", "always")
PLAIN_TIMEOUT = 5.0
VEIL_TIMEOUT = 30.0
REL_TOL = 1e-9
FEATURES = Path(__file__).parents[1] / "support" / "fixtures" / "features.sql"


# -- the fuzz database ----------------------------------------------------------


@dataclass
class FuzzEnv:
    """A loaded fuzz database: plaintext copy, catalog and Veil client directory."""

    source: Path
    plain: duckdb.DuckDBPyConnection
    catalog: Catalog
    client_dir: Path
    backend: str


def prepare_source(root: Path) -> tuple[Path, duckdb.DuckDBPyConnection, Catalog]:
    source = write_source(root / "source")
    plain = plain_connection(source)
    return source, plain, read_catalog(plain, root / "catalog.json")


def feature_queries() -> list[str]:
    blocks = re.split(r"^-- title:.*$", FEATURES.read_text(), flags=re.M)
    return [b.strip().rstrip(";") for b in blocks if b.strip()]


def design_workload(catalog: Catalog) -> list[str]:
    return [*feature_queries(), *query_texts().values(), *workload(catalog, WORKLOAD_SEEDS)]


def build_env(root: Path, server_url: str, backend: str, *, onions: bool = False) -> FuzzEnv:
    """Write the source (once per root), load it through Veil into ``server_url``.

    ``onions``: no workload, every column as onions the queries peel as they go
    (``veil.designer.onions``), so queries meet columns in every layer state.
    """
    source, plain, catalog = prepare_source(root)
    client_dir = root / f"client-{backend}"
    shutil.rmtree(client_dir, ignore_errors=True)
    # the fuzzer's tables are small: few-valued keys take the bytes form as large ones do
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loader, "BYTES_FORM_MIN_ROWS", 0)
        # every encryption the workload asks for, read by its plans or not: the generated
        # queries go beyond the workload, and each one stored is a server path they test
        patch.setattr(loader, "greedy_design", functools.partial(greedy_design, prune=False))
        load(
            str(source),
            server_url,
            str(client_dir),
            workload=[] if onions else design_workload(catalog),
            progress=lambda _: None,
        )
    return FuzzEnv(source, plain, catalog, client_dir, backend)


@contextlib.contextmanager
def hom_mode(mode: str) -> Iterator[None]:
    """``VEIL_HOM_PUSHDOWN`` set to ``mode`` while a Session is being opened."""
    before = os.environ.get("VEIL_HOM_PUSHDOWN")
    os.environ["VEIL_HOM_PUSHDOWN"] = mode
    try:
        yield
    finally:
        if before is None:
            del os.environ["VEIL_HOM_PUSHDOWN"]
        else:
            os.environ["VEIL_HOM_PUSHDOWN"] = before


def open_session(client_dir: Path, mode: str) -> Session:
    with hom_mode(mode):
        return Session(client_dir)


# -- one query ----------------------------------------------------------------


@dataclass
class Outcome:
    status: str  # "ok", "discard" or "fail"
    signature: str = ""
    detail: str = ""
    seconds: float = 0.0
    # Warnings Veil logged while answering (e.g. a split plan that failed and
    # fell back to running the query on the client): right answers, but worth knowing.
    notes: list[str] = field(default_factory=list)
    got: pa.Table | None = field(default=None, repr=False)  # Veil's result, when it gave one


class _Notes(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)  # Veil logs its fallbacks at INFO
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


@contextlib.contextmanager
def veil_warnings() -> Iterator[list[str]]:
    """The messages Veil's loggers emit at INFO or above inside the block."""
    handler = _Notes()
    logger = logging.getLogger("veil")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


@contextlib.contextmanager
def time_guard(seconds: float, *connections: object) -> Iterator[threading.Event]:
    """Interrupt the connections if the block runs longer than ``seconds``."""
    fired = threading.Event()

    def interrupt() -> None:
        fired.set()
        for con in connections:
            with contextlib.suppress(Exception):
                if hasattr(con, "interrupt"):
                    con.interrupt()
                elif hasattr(con, "cancel"):
                    con.cancel()

    timer = threading.Timer(seconds, interrupt)
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()


def plain_result(
    plain: duckdb.DuckDBPyConnection,
    sql: str,
    params: Sequence[object],
    timeout: float = PLAIN_TIMEOUT,
) -> pa.Table | None:
    """Plaintext DuckDB's answer, or None when it rejects the query or runs too long."""
    try:
        with time_guard(timeout, plain):
            return plain.sql(sql, params=list(params)).to_arrow_table()
    except (duckdb.Error, OverflowError, ValueError):
        return None


def _session_connections(session: Session) -> list[object]:
    connections: list[object] = [session.local]
    server = getattr(session.backend, "_con", None)
    if server is not None:
        connections.append(server)
    return connections


def check(
    session: Session,
    plain: duckdb.DuckDBPyConnection,
    query: Query,
    timeouts: tuple[float, float] = (PLAIN_TIMEOUT, VEIL_TIMEOUT),
) -> Outcome:
    """Run ``query`` on both sides; ``timeouts``: plaintext's and Veil's guards."""
    expected = plain_result(plain, query.sql, query.params, timeouts[0])
    if expected is None:
        return Outcome("discard")
    before = fallbacks.counts()
    with veil_warnings() as notes:
        outcome = _veil_outcome(session, query, expected, timeouts[1])
    outcome.notes += [note_signature(n) for n in notes]
    unexpected = [f for f in fallbacks.since(before) if f[1] not in fallbacks.DOCUMENTED]
    if unexpected and outcome.status == "ok":  # a right answer, by fetching whole tables
        stage, shape, _, detail = unexpected[0]
        outcome.status, outcome.signature = "fail", f"fallback:{stage}:{_blank(shape)}"
        outcome.detail = f"fell back to fetching whole tables: {detail}"
    got = outcome.got
    ties = outcome.signature == "wrong-result:values" and got is not None
    if ties and _float_ties(plain, query, got, expected):
        outcome.status, outcome.signature = "ok", ""
        outcome.notes.append("float tie at the LIMIT")
    outcome.got = None
    return outcome


def _float_ties(
    plain: duckdb.DuckDBPyConnection, query: Query, got: pa.Table, expected: pa.Table
) -> bool:
    """Whether Veil's window differs from plaintext's only by nearly equal floats that
    sorted apart at its edge (``tests.fuzz.ties``)."""
    found = window(query.sql, query.params)
    whole = plain_result(plain, found.whole_sql, found.whole_params) if found else None
    if found is None or whole is None:
        return False
    floats = {i for i, t in enumerate(expected.schema.types) if pa.types.is_floating(t)}
    return tied(rows_of(got), rows_of(expected), rows_of(whole), found.keys, floats, values_equal)


_EVALUATION_ERRORS = ("Conversion Error", "Out of Range Error", "Invalid Input Error")


def _veil_outcome(session: Session, query: Query, expected: pa.Table, timeout: float) -> Outcome:
    started = time.perf_counter()
    try:
        with time_guard(timeout, *_session_connections(session)) as fired:
            got = session.run(query.sql, list(query.params)).table
    except VeilError as exc:
        elapsed = time.perf_counter() - started
        if fired.is_set():
            return Outcome("fail", "timeout", f"Veil ran past {timeout}s", elapsed)
        if expected.num_rows == 0 and str(exc).startswith(_EVALUATION_ERRORS):
            # DuckDB raises these only for rows an expression is evaluated on: its
            # plaintext plan reached none, Veil's local plan (another plan) some
            outcome = Outcome("ok", seconds=elapsed)
            outcome.notes = [f"evaluation-order error: {str(exc).split(':')[0]}"]
            return outcome
        return Outcome("fail", error_signature("veil-error", exc), _message(exc), elapsed)
    except Exception as exc:
        elapsed = time.perf_counter() - started
        return Outcome("fail", error_signature("crash", exc), _message(exc), elapsed)
    elapsed = time.perf_counter() - started
    try:
        problem = difference(got, expected)
    except (OverflowError, ValueError, pa.ArrowException):
        return Outcome("discard", "incomparable")  # values Python cannot hold
    if problem is not None:
        return Outcome("fail", f"wrong-result:{problem[0]}", problem[1], elapsed, got=got)
    types = type_difference(got.schema, expected.schema)
    if types is not None:
        signature = f"wrong-type:{re.sub(r'[0-9]+', 'N', types)}"
        return Outcome("fail", signature, f"result column types {types}", elapsed)
    return Outcome("ok", seconds=elapsed)


def type_difference(got: pa.Schema, expected: pa.Schema) -> str | None:
    """The first column whose type differs (Veil's local DuckDB should give DuckDB's types)."""
    for g, e in zip(got.types, expected.types, strict=True):
        if g != e:
            return f"{g} from Veil, {e} expected"
    return None


def note_signature(message: str) -> str:
    return "fallback:" + _blank(message)[:120]


def _message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:600]}"


def error_signature(prefix: str, exc: BaseException) -> str:
    """The error's class and message with the query-specific parts blanked out."""
    return f"{prefix}:{type(exc).__name__}:{_blank(str(exc))[:90]}"


def _blank(message: str) -> str:
    text = message.split("\n")[0]
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\b[tc]_[0-9a-f]{16}\b", "<name>", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return re.sub(r"\(see docs/errors\.md#[\w-]+\)", "", text).strip()


# -- result comparison ----------------------------------------------------------


def rows_of(table: pa.Table) -> list[tuple[object, ...]]:
    columns = [_values(column) for column in table.columns]
    return [tuple(_normal(v) for v in row) for row in zip(*columns, strict=True)]


def _values(column: pa.ChunkedArray) -> list[object]:
    try:
        return column.to_pylist()
    except (OverflowError, ValueError):
        # Dates and timestamps past Python's year 9999: compare their text.
        return column.cast(pa.string()).to_pylist()


def _normal(value: object) -> object:
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, list | tuple):
        return tuple(_normal(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted(((str(k), _normal(v)) for k, v in value.items()), key=str))
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


def values_equal(a: object, b: object) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(map(values_equal, a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        x, y = float(a), float(b)
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) and math.isnan(y)
        return math.isclose(x, y, rel_tol=REL_TOL, abs_tol=1e-12)
    if isinstance(a, str) and isinstance(b, str) and a != b:
        return _float_texts_equal(a, b)
    return a == b


def _float_texts_equal(a: str, b: str) -> bool:
    """Two texts of floats equal to 1e-9 (a float a set operation cast to VARCHAR: the
    last digits of an aggregate differ with the order it summed in)."""
    if not (_FLOAT_TEXT.fullmatch(a) and _FLOAT_TEXT.fullmatch(b)):
        return False
    x, y = float(a), float(b)
    return math.isclose(x, y, rel_tol=REL_TOL, abs_tol=1e-12)


_FLOAT_TEXT = re.compile(r"-?[0-9]+\.[0-9]+(e[-+]?[0-9]+)?", re.I)


def _sort_key(value: object) -> tuple[object, ...]:
    if value is None:
        return (0,)
    if isinstance(value, bool):
        return (1, int(value))
    if isinstance(value, int | float):
        x = float(value)
        return (2, 0.0 if math.isnan(x) else float(f"{x:.6g}"), math.isnan(x))
    if isinstance(value, tuple):
        return (3, tuple(_sort_key(v) for v in value))
    return (4, str(type(value)), str(value))


def _row_key(row: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(_sort_key(v) for v in row)


def _rows_equal(g: tuple[object, ...], e: tuple[object, ...]) -> bool:
    return len(g) == len(e) and all(map(values_equal, g, e))


def difference(got: pa.Table, expected: pa.Table) -> tuple[str, str] | None:
    """None when both hold the same multiset of rows, else (class, description)."""
    if got.num_columns != expected.num_columns:
        return "columns", f"{got.num_columns} columns from Veil, {expected.num_columns} expected"
    g_rows, e_rows = rows_of(got), rows_of(expected)
    if len(g_rows) != len(e_rows):
        sample = _first_missing(g_rows, e_rows)
        return "rowcount", f"{len(g_rows)} rows from Veil, {len(e_rows)} expected{sample}"
    g_sorted, e_sorted = sorted(g_rows, key=_row_key), sorted(e_rows, key=_row_key)
    if all(map(_rows_equal, g_sorted, e_sorted)):
        return None
    # Nearly equal floats may sort apart: match greedily before calling it a difference.
    unmatched = list(e_sorted)
    for row in g_sorted:
        hit = next((i for i, e in enumerate(unmatched) if _rows_equal(row, e)), None)
        if hit is None:
            close = min(unmatched, key=lambda e: _distance(row, e)) if unmatched else None
            return (
                "values",
                f"Veil row {_short(row)} not expected; nearest expected {_short(close)}",
            )
        unmatched.pop(hit)
    return None


def _first_missing(got: list[tuple[object, ...]], expected: list[tuple[object, ...]]) -> str:
    extra = [r for r in got if not any(_rows_equal(r, e) for e in expected)][:1]
    missing = [e for e in expected if not any(_rows_equal(r, e) for r in got)][:1]
    parts = []
    if missing:
        parts.append(f"; missing e.g. {_short(missing[0])}")
    if extra:
        parts.append(f"; unexpected e.g. {_short(extra[0])}")
    return "".join(parts) if len(got) + len(expected) < 20000 else ""


def _distance(a: tuple[object, ...], b: tuple[object, ...]) -> int:
    return sum(not values_equal(x, y) for x, y in zip(a, b, strict=False))


def _short(row: object) -> str:
    text = repr(row)
    return text if len(text) < 300 else text[:300] + "…"


# -- batches --------------------------------------------------------------------


@dataclass
class Failure:
    seed: int
    query: Query
    outcome: Outcome

    def line(self) -> str:
        return (
            f"seed {self.seed} [{self.outcome.signature}] {self.outcome.detail[:300]}\n"
            f"    {self.query.sql}\n    params={self.query.params!r}"
        )


@dataclass
class Report:
    generated: int = 0
    discarded: int = 0
    run: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0
    notes: dict[str, list[int]] = field(default_factory=dict)

    @property
    def signatures(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for f in self.failures:
            found.setdefault(f.outcome.signature, []).append(f.seed)
        return found

    def add(self, other: Report) -> None:
        self.generated += other.generated
        self.discarded += other.discarded
        self.run += other.run
        self.failures.extend(other.failures)
        self.seconds += other.seconds
        for note, seeds in other.notes.items():
            self.notes.setdefault(note, []).extend(seeds)

    def summary(self) -> str:
        lines = [
            f"generated {self.generated}, discarded {self.discarded}, run {self.run}, "
            f"failed {len(self.failures)}, distinct signatures {len(self.signatures)}, "
            f"{self.seconds:.1f}s"
        ]
        for signature, seeds in sorted(self.signatures.items(), key=lambda s: -len(s[1])):
            lines.append(f"  {len(seeds):5d}  {signature}   seeds {seeds[:8]}")
        if self.notes:
            lines.append("notes (right answers, but Veil logged a warning):")
        for note, seeds in sorted(self.notes.items(), key=lambda s: -len(s[1])):
            lines.append(f"  {len(seeds):5d}  {note}   seeds {seeds[:8]}")
        return "\n".join(lines)


def run_queries(
    session: Session,
    plain: duckdb.DuckDBPyConnection,
    catalog: Catalog,
    seeds: range | Sequence[int],
    progress: object = None,
    fresh: int = 0,
    literals: bool = False,
) -> Report:
    """Each seed's query checked against plaintext; ``fresh``: then run again that many
    times with new parameter values, each answer checked (a plan made for one value
    must answer the next: ``veil.session.templates``); ``literals``: every value written
    into the text, as pgbench -M simple and psql send them (``veil.sql.literals``)."""
    report = Report()
    started = time.perf_counter()

    def sent(query: Query) -> Query:
        if not literals or query.sql.count("?") != len(query.params):
            return query  # a ? of a string's own: sent with its markers
        return Query(query.seed, query.inline(), [], query.shape)

    for n, seed in enumerate(seeds):
        query = generate(catalog, seed)
        report.generated += 1
        outcome = check(session, plain, sent(query))
        if outcome.status == "discard":
            report.discarded += 1
            continue
        report.run += 1
        for note in dict.fromkeys(outcome.notes):
            report.notes.setdefault(note, []).append(seed)
        if outcome.status == "fail":
            report.failures.append(Failure(seed, query, outcome))
        values = random.Random(seed)
        for again in [query.fresh(values) for _ in range(fresh if query.params else 0)]:
            outcome = check(session, plain, sent(again))
            if outcome.status == "fail":
                report.failures.append(Failure(seed, again, outcome))
                break
        if callable(progress) and (n + 1) % 100 == 0:
            progress(n + 1, report)
    report.seconds = time.perf_counter() - started
    return report
