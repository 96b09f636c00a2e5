"""DML mode: random INSERT / UPDATE / DELETE sequences, mirrored on plaintext DuckDB.

Each sequence gets a fresh, small Veil database (the edge tables and nation,
loaded with a workload that gives every column DET, OPE, HOM or SEARCH) and a
plaintext copy. After each statement the row counts must agree, and so must a
few checks: the whole table, aggregates per column (HOM sums, OPE min/max),
and filters that the server answers (DET/OPE) with the values just written.
Inserted values include each column type's boundary values.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from tests.fuzz.generator import Query, sql_literal
from tests.fuzz.harness import Outcome, check, open_session, veil_warnings
from tests.fuzz.schema import BIGINT, BOOL, DATE, DECIMAL, DOUBLE, INT, VARCHAR, Catalog, Table
from veil.errors import VeilError
from veil.load.loader import load
from veil.session.session import Session

DML_TABLES = ("fz_items", "fz_people", "fz_empty", "nation")

# Boundary values per column type (DuckDB's own limits where Veil can encode them).
BOUNDARIES: dict[str, list[object]] = {
    INT: [2147483647, -2147483648, 0, -1, None],
    BIGINT: [9223372036854775807, -9223372036854775808, 0, -1, None],
    DECIMAL: ["max", "min", decimal.Decimal("0"), decimal.Decimal("-0.01"), None],
    DOUBLE: [
        1.7976931348623157e308,
        -1.7976931348623157e308,
        5e-324,
        -0.0,
        0.25,
        float("inf"),
        float("-inf"),
        float("nan"),
        None,
    ],
    DATE: [
        dt.date(1, 1, 1),
        dt.date(9999, 12, 31),
        dt.date(1970, 1, 1),
        dt.date(1969, 12, 31),
        None,
    ],
    BOOL: [True, False, None],
    VARCHAR: ["", "x" * 300, "日本語 テキスト", "O'Brien", "special requests", "🎉", None],
}


def _decimal_bound(sql_type: str, sign: int) -> decimal.Decimal:
    precision, scale = (int(x) for x in sql_type[sql_type.index("(") + 1 : -1].split(","))
    digits = "9" * (precision - scale) + ("." + "9" * scale if scale else "")
    return decimal.Decimal(digits) * sign


def boundary_values(column_type: str, kind: str) -> list[object]:
    values: list[object] = []
    for value in BOUNDARIES[kind]:
        if value == "max":
            values.append(_decimal_bound(column_type, 1))
        elif value == "min":
            values.append(_decimal_bound(column_type, -1))
        else:
            values.append(value)
    return values


def dml_workload(catalog: Catalog) -> list[str]:
    """Queries that make the designer store DET, OPE, HOM and SEARCH on every DML column."""
    queries = []
    for name in DML_TABLES:
        table = catalog.tables[name]
        first = table.columns[0].name
        for column in table.columns:
            value = sql_literal(_first_sample(table, column.name))
            queries.append(f"SELECT * FROM {name} WHERE {column.name} = {value}")
            if column.kind != VARCHAR and column.kind != BOOL:
                queries.append(f"SELECT * FROM {name} WHERE {column.name} < {value}")
            if column.kind in (INT, BIGINT, DECIMAL, DOUBLE):
                queries.append(
                    f"SELECT {first}, SUM({column.name}), AVG({column.name}) FROM {name} GROUP BY 1"
                )
            if column.kind == VARCHAR:
                queries.append(f"SELECT * FROM {name} WHERE {column.name} LIKE '%special%'")
    return queries


def _first_sample(table: Table, name: str) -> object:
    column = table.column(name)
    if not column.samples:
        return (
            {INT: 1, BIGINT: 1, DECIMAL: 1, DOUBLE: 1.0, BOOL: True}.get(column.kind, "x")
            if column.kind != DATE
            else dt.date(2000, 1, 1)
        )
    value = column.samples[len(column.samples) // 2]
    if column.kind == DATE:
        return dt.date.fromisoformat(str(value))
    if column.kind == DECIMAL:
        return decimal.Decimal(str(value))
    return value


@dataclass
class DmlStep:
    table: str
    sql: str
    params: list[object]


@dataclass
class DmlFailure:
    seed: int
    steps: list[DmlStep]
    at: str
    outcome: Outcome

    def line(self) -> str:
        history = "\n".join(f"      {s.sql}  params={s.params!r}" for s in self.steps)
        return (
            f"dml seed {self.seed} [{self.outcome.signature}] after:\n{history}\n"
            f"    check: {self.at}\n    {self.outcome.detail[:400]}"
        )


@dataclass
class DmlReport:
    sequences: int = 0
    statements: int = 0
    discarded: int = 0
    checks: int = 0
    failures: list[DmlFailure] = field(default_factory=list)
    seconds: float = 0.0


class DmlGenerator:
    def __init__(self, catalog: Catalog, seed: int):
        self.catalog = catalog
        self.r = random.Random(seed)
        self.params: list[object] = []
        # One sequence in four writes each type's boundary values; the others stay
        # in the loaded data's range (so that they reach past the first statement).
        self.boundary_rate = 0.4 if seed % 4 == 0 else 0.0
        # UPDATE ... FROM, DELETE ... USING and WITH forms, on a generator of their own
        # (so each seed's plain statements stay the ones it had before them)
        self.forms = random.Random(f"forms-{seed}")

    def value(self, table: Table, name: str) -> object:
        column = table.column(name)
        if self.r.random() < self.boundary_rate:
            return self.r.choice(boundary_values(column.sql_type, column.kind))
        if column.samples and self.r.random() < 0.8:
            return _first_sample_at(table, name, self.r.randrange(len(column.samples)))
        if self.boundary_rate:
            return self.r.choice(boundary_values(column.sql_type, column.kind))
        return self.r.choice([None, _first_sample(table, name)])

    def lit(self, value: object) -> str:
        if self.r.random() < 0.3:
            self.params.append(value)
            return "?"
        return sql_literal(value)

    def statement(self) -> DmlStep:
        self.params = []
        table = self.catalog.tables[self.r.choice(DML_TABLES)]
        roll = self.r.randrange(10)
        if roll < 3:
            sql = self.insert_values(table)
        elif roll < 5:
            sql = self.insert_select(table)
        elif roll < 8:
            sql = self.update(table)
        else:
            sql = self.delete(table)
        return DmlStep(table.name, sql, list(self.params))

    def form(self) -> str:
        """How an UPDATE or DELETE names its rows: plain WHERE, another table, or WITH."""
        return self.forms.choice(["where", "where", "where", "joined", "with"])

    def keys(self, table: Table) -> tuple[str, str]:
        """A column of ``table`` and a query of distinct values of it (as ``k``)."""
        column = self.forms.choice(table.columns).name
        return column, f"SELECT DISTINCT {column} AS k FROM {table.name} WHERE {self.pred(table)}"

    def delete(self, table: Table) -> str:
        form = self.form()
        if form == "where":
            return f"DELETE FROM {table.name} WHERE {self.pred(table)}"
        column, keys = self.keys(table)
        if form == "joined":
            return f"DELETE FROM {table.name} USING ({keys}) AS o WHERE {table.name}.{column} = o.k"
        return f"WITH o AS ({keys}) DELETE FROM {table.name} WHERE {column} IN (SELECT k FROM o)"

    def insert_values(self, table: Table) -> str:
        columns = [c.name for c in table.columns]
        if self.r.random() < 0.5:
            columns = self.r.sample(columns, self.r.randint(1, len(columns)))
        rows = []
        for _ in range(self.r.randint(1, 3)):
            rows.append("(" + ", ".join(self.lit(self.value(table, c)) for c in columns) + ")")
        listed = (
            f" ({', '.join(columns)})"
            if len(columns) < len(table.columns) or self.r.random() < 0.5
            else ""
        )
        return f"INSERT INTO {table.name}{listed} VALUES {', '.join(rows)}"

    def insert_select(self, table: Table) -> str:
        source = self.catalog.tables[table.name]
        items = []
        for column in table.columns:
            roll = self.r.randrange(4)
            if roll == 0:
                items.append(self.lit(self.value(table, column.name)))
            elif roll == 1 and column.kind in (INT, DECIMAL):
                items.append(f"{column.name} + 1")
            elif roll == 2 and column.kind == VARCHAR:
                items.append(f"{column.name} || '!'")
            else:
                items.append(column.name)
        names = ", ".join(c.name for c in table.columns)
        return (
            f"INSERT INTO {table.name} ({names}) SELECT {', '.join(items)} "
            f"FROM {source.name} WHERE {self.pred(source)}"
        )

    def update(self, table: Table) -> str:
        form = self.form()
        if form == "with":
            column, keys = self.keys(table)  # first: its parameters come first in the text
            sets = self.assignments(table)
            return (
                f"WITH o AS ({keys}) UPDATE {table.name} SET {sets} "
                f"WHERE {column} IN (SELECT k FROM o)"
            )
        sets = self.assignments(table)
        if form == "joined":
            column, keys = self.keys(table)
            return (
                f"UPDATE {table.name} SET {sets} FROM ({keys}) AS o "
                f"WHERE {table.name}.{column} = o.k"
            )
        return f"UPDATE {table.name} SET {sets} WHERE {self.pred(table)}"

    def assignments(self, table: Table) -> str:
        targets = self.r.sample(table.columns, self.r.randint(1, 2))
        sets = []
        for column in targets:
            if column.kind in (INT, DECIMAL) and self.r.random() < 0.4:
                sets.append(f"{column.name} = {column.name} - 1")
            elif column.kind == VARCHAR and self.r.random() < 0.3:
                sets.append(f"{column.name} = upper({column.name})")
            else:
                sets.append(f"{column.name} = {self.lit(self.value(table, column.name))}")
        return ", ".join(sets)

    def pred(self, table: Table) -> str:
        column = self.r.choice(table.columns)
        roll = self.r.randrange(5)
        if roll == 0:
            return f"{column.name} IS NULL"
        if roll == 1 and column.kind not in (BOOL,):
            op = self.r.choice(["<", ">=", "<>"])
            return f"{column.name} {op} {self.lit(self.value(table, column.name))}"
        if roll == 2:
            return f"{column.name} IN ({self.lit(self.value(table, column.name))}, {self.lit(self.value(table, column.name))})"
        return f"{column.name} = {self.lit(self.value(table, column.name))}"


def _first_sample_at(table: Table, name: str, index: int) -> object:
    column = table.column(name)
    value = column.samples[index]
    if column.kind == DATE:
        return dt.date.fromisoformat(str(value))
    if column.kind == DECIMAL:
        return decimal.Decimal(str(value))
    return value


def checks_for(table: Table, step: DmlStep) -> list[Query]:
    """Queries that must agree after a statement on ``table``."""
    queries = [Query(0, f"SELECT * FROM {table.name}", [])]
    aggregates = []
    for column in table.columns:
        aggregates.append(f"count({column.name})")
        if column.kind != BOOL:
            aggregates.append(f"min({column.name}), max({column.name})")
        if column.kind in (INT, DECIMAL, BIGINT):
            aggregates.append(f"sum({column.name}), avg({column.name})")
    queries.append(Query(0, f"SELECT count(*), {', '.join(aggregates)} FROM {table.name}", []))
    group = next((c.name for c in table.columns if c.kind in (INT, BIGINT, BOOL)), None)
    number = next((c.name for c in table.columns if c.kind in (DECIMAL, INT)), None)
    if group and number:
        queries.append(
            Query(
                0,
                f"SELECT {group}, count(*), sum({number}), avg({number}) FROM {table.name} GROUP BY 1",
                [],
            )
        )
    for value in step.params[:2]:
        for column in table.columns:
            if value is not None and _fits(value, column.kind):
                queries.append(
                    Query(0, f"SELECT * FROM {table.name} WHERE {column.name} = ?", [value])
                )
                queries.append(
                    Query(0, f"SELECT count(*) FROM {table.name} WHERE {column.name} <= ?", [value])
                )
                break
    return queries


def _fits(value: object, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == BOOL
    if isinstance(value, int):
        return kind in (INT, BIGINT) and -(2**31) <= value < 2**31
    if isinstance(value, decimal.Decimal):
        return kind == DECIMAL
    if isinstance(value, float):
        return kind == DOUBLE
    if isinstance(value, dt.date):
        return kind == DATE
    return kind == VARCHAR


def load_dml_database(source: Path, root: Path, server_url: str, catalog: Catalog) -> Path:
    """A fresh Veil database of the DML tables; returns the client directory."""
    small = root / "dml-source"
    if not small.exists():
        small.mkdir(parents=True)
        for name in DML_TABLES:
            (small / f"{name}.parquet").symlink_to(source / f"{name}.parquet")
    client = root / "client"
    shutil.rmtree(client, ignore_errors=True)
    load(
        str(small), server_url, str(client), workload=dml_workload(catalog), progress=lambda _: None
    )
    return client


def plain_dml_copy(source: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for name in DML_TABLES:
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet('{source / name}.parquet')")
    return con


def run_sequence(
    session: Session,
    plain: duckdb.DuckDBPyConnection,
    catalog: Catalog,
    seed: int,
    length: int,
    report: DmlReport,
) -> DmlFailure | None:
    """Apply ``length`` statements of sequence ``seed``; the first disagreement, if any.

    Some statements run inside transactions, mirrored on plaintext DuckDB: a BEGIN
    before one, then a COMMIT or ROLLBACK after one, the tables compared after each.
    (The transaction choices draw on a generator of their own, so each seed's
    statements are the ones it had before transactions.)
    """
    generator = DmlGenerator(catalog, seed)
    transactions = _Transactions(session, plain, seed)
    done: list[DmlStep] = []
    for _ in range(length):
        step = generator.statement()
        done.extend(transactions.maybe_begin())
        try:
            expected = plain.execute(step.sql, step.params).fetchall()[0][0]
        except (duckdb.Error, OverflowError, ValueError):
            report.discarded += 1
            done.extend(transactions.end("ROLLBACK"))  # a failure aborted plaintext's
            continue
        done.append(step)
        report.statements += 1
        failure = _apply_in_veil(session, step, expected)
        if failure is not None:
            return DmlFailure(seed, done, step.sql, failure)
        ended = transactions.maybe_end()
        done.extend(ended)
        tables = DML_TABLES if ended else (step.table,)
        for name in tables:
            for query in checks_for(catalog.tables[name], step):
                report.checks += 1
                outcome = check(session, plain, query)
                if outcome.status == "fail":
                    return DmlFailure(seed, done, f"{query.sql}  params={query.params!r}", outcome)
    done.extend(transactions.end(transactions.rng.choice(["COMMIT", "ROLLBACK"])))
    for name in DML_TABLES:
        for query in checks_for(catalog.tables[name], DmlStep(name, "", [])):
            report.checks += 1
            outcome = check(session, plain, query)
            if outcome.status == "fail":
                return DmlFailure(seed, done, f"{query.sql}  params={query.params!r}", outcome)
    return None


class _Transactions:
    """BEGIN / COMMIT / ROLLBACK on both sides, chosen at random."""

    BEGIN_RATE, END_RATE = 0.3, 0.35

    def __init__(self, session: Session, plain: duckdb.DuckDBPyConnection, seed: int):
        self.session, self.plain = session, plain
        self.rng = random.Random(f"transactions-{seed}")
        self.open = False
        # a Spark warehouse has no transactions spanning statements (docs/sql.md)
        self.enabled = session.backend.dialect != "spark"

    def maybe_begin(self) -> list[DmlStep]:
        if not self.enabled or self.open or self.rng.random() >= self.BEGIN_RATE:
            return []
        self.plain.execute("BEGIN TRANSACTION")
        self.session.begin()
        self.open = True
        return [DmlStep("", "BEGIN", [])]

    def maybe_end(self) -> list[DmlStep]:
        if not self.open or self.rng.random() >= self.END_RATE:
            return []
        return self.end(self.rng.choice(["COMMIT", "ROLLBACK"]))

    def end(self, verb: str) -> list[DmlStep]:
        if not self.open:
            return []
        self.open = False
        if verb == "COMMIT":
            self.plain.execute("COMMIT")
            self.session.commit()
        else:
            self.plain.execute("ROLLBACK")
            self.session.rollback()
        return [DmlStep("", verb, [])]


def _apply_in_veil(session: Session, step: DmlStep, expected: int) -> Outcome | None:
    try:
        with veil_warnings():
            got = session.run(step.sql, step.params).rowcount
    except VeilError as exc:
        return Outcome(
            "fail", f"dml-veil-error:{type(exc).__name__}", f"{type(exc).__name__}: {exc}"
        )
    except Exception as exc:
        return Outcome("fail", f"dml-crash:{type(exc).__name__}", f"{type(exc).__name__}: {exc}")
    if got != expected:
        return Outcome("fail", "dml-rowcount", f"Veil changed {got} rows, plaintext {expected}")
    return None


def run_dml(
    source: Path,
    catalog: Catalog,
    root: Path,
    make_url: object,
    seeds: range,
    length: int = 8,
    hom: str = "auto",
) -> DmlReport:
    """Each seed: a fresh database from ``make_url(seed)``, one statement sequence."""
    report = DmlReport()
    started = time.perf_counter()
    for seed in seeds:
        place = root / f"dml-{seed}"
        shutil.rmtree(place, ignore_errors=True)
        place.mkdir(parents=True)
        url = make_url(seed, place)  # type: ignore[operator]
        client = load_dml_database(source, place, url, catalog)
        session = open_session(client, hom)
        try:
            plain = plain_dml_copy(source)
            report.sequences += 1
            failure = run_sequence(session, plain, catalog, seed, length, report)
            if failure is not None:
                report.failures.append(failure)
        finally:
            session.close()
            plain.close()
    report.seconds = time.perf_counter() - started
    return report
