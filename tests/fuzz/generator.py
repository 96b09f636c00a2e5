"""A seeded generator of random, valid SQL (DuckDB dialect) over the fuzz catalog.

``generate(catalog, seed)`` always returns the same ``Query`` for the same seed
and catalog. The generator knows each expression's kind (integer, decimal,
double, varchar, date, boolean), so what it writes binds; what DuckDB rejects
anyway (an overflow, a date out of range) the harness discards.

Results must not depend on row order, because Veil reads rows in another order
than plaintext DuckDB: LIMIT and DISTINCT ON only follow an ORDER BY of every
output column; order-sensitive window functions and frames only run over a
total order (every source's unique key); order-sensitive aggregates
(string_agg, list) get an ORDER BY of their own argument; arg_max-style
aggregates only take a unique key as their ordering argument. Shapes that
could explode (cross joins, joins on non-key columns) are only built over
small tables.

Half the shapes are the ones the split planner pushes to the server
(one-table comparisons of a column with constants, equi-joins on foreign keys,
GROUP BY of columns with COUNT/SUM/AVG/MIN/MAX); the rest are exotic.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import duckdb

from tests.fuzz.schema import (
    BIGINT,
    BOOL,
    DATE,
    DECIMAL,
    DOUBLE,
    INT,
    NUMERIC,
    VARCHAR,
    Catalog,
    Column,
    Table,
)

T = TypeVar("T")

# -- aggregates ---------------------------------------------------------------

# How each deterministic aggregate of DuckDB's catalog is called. Names missing
# from the running DuckDB's catalog are dropped; names not listed here are not
# generated (see EXCLUDED for why).
AGGREGATE_SHAPES: dict[str, str] = {
    "count": "any",
    "min": "any",
    "max": "any",
    "sum": "num",
    "avg": "num",
    "mean": "num",
    "favg": "num",
    "fsum": "num",
    "sumkahan": "num",
    "kahan_sum": "num",
    "median": "num",
    "quantile_cont": "quantile",
    "quantile_disc": "quantile",
    "quantile": "quantile",
    "stddev": "num",
    "stddev_pop": "num",
    "stddev_samp": "num",
    "var_pop": "num",
    "var_samp": "num",
    "variance": "num",
    "sem": "num",
    "mad": "num",
    "kurtosis": "num",
    "kurtosis_pop": "num",
    "skewness": "num",
    "product": "small_num",
    "entropy": "any",
    "bit_and": "int",
    "bit_or": "int",
    "bit_xor": "int",
    "bool_and": "bool",
    "bool_or": "bool",
    "count_if": "pred",
    "countif": "pred",
    "histogram": "low_card",
    "string_agg": "ordered_text",
    "group_concat": "ordered_text",
    "listagg": "ordered_text",
    "list": "ordered_list",
    "array_agg": "ordered_list",
    "arg_max": "by_key",
    "arg_min": "by_key",
    "argmax": "by_key",
    "argmin": "by_key",
    "max_by": "by_key",
    "min_by": "by_key",
    "arg_max_null": "by_key",
    "arg_min_null": "by_key",
    "corr": "two_num",
    "covar_pop": "two_num",
    "covar_samp": "two_num",
    "regr_avgx": "two_num",
    "regr_avgy": "two_num",
    "regr_count": "two_num",
    "regr_slope": "two_num",
    "regr_intercept": "two_num",
    "regr_r2": "two_num",
    "regr_sxx": "two_num",
    "regr_syy": "two_num",
    "regr_sxy": "two_num",
}
EXCLUDED = {
    "any_value": "returns any row's value",
    "arbitrary": "returns any row's value",
    "first": "depends on input order",
    "last": "depends on input order",
    "mode": "ties are broken by input order",
    "approx_count_distinct": "approximate",
    "approx_quantile": "approximate",
    "approx_top_k": "approximate",
    "reservoir_quantile": "random sample",
    "arg_max_nulls_last": "ties broken by input order when the key is NULL",
    "arg_min_nulls_last": "ties broken by input order when the key is NULL",
    "bitstring_agg": "needs range arguments",
    "histogram_exact": "needs bin arguments",
    "combine_aggr": "internal",
    "count_star": "internal name of COUNT(*)",
    "decimal_average": "internal",
    "sum_no_overflow": "internal",
    "lttb": "downsampling, needs point arguments",
    "variant_group_object": "VARIANT type",
}
# Shapes the split planner can push to the server; drawn more often.
PUSHABLE_AGGREGATES = ("count", "sum", "avg", "min", "max")


@functools.cache
def catalog_aggregates() -> tuple[str, ...]:
    """DuckDB's aggregate functions that the generator knows how to call."""
    with duckdb.connect() as con:
        names = {
            str(r[0])
            for r in con.execute(
                "SELECT DISTINCT function_name FROM duckdb_functions() "
                "WHERE function_type = 'aggregate'"
            ).fetchall()
        }
    return tuple(sorted(n for n in names if n in AGGREGATE_SHAPES))


# -- the generated query --------------------------------------------------------

_MARKER = re.compile(r"\x00P(\d+)\x00")


@dataclass
class Query:
    seed: int
    sql: str
    params: list[object]
    # Informational: the generator's idea of the shape ("agg", "setop", ...).
    shape: str = ""
    # each parameter's maker of another value of its kind (the fresh-parameter mode)
    makers: list[Callable[[random.Random], object]] = field(
        default_factory=list, repr=False, compare=False
    )

    def fresh(self, r: random.Random) -> Query:
        """The same statement with new parameter values (as an application sends them)."""
        if len(self.makers) != len(self.params):
            return self
        return Query(self.seed, self.sql, [make(r) for make in self.makers], self.shape)

    def inline(self) -> str:
        """The SQL with each ``?`` replaced by the literal of its parameter."""
        values = iter(self.params)
        return re.sub(r"\?", lambda _: sql_literal(next(values)), self.sql)


def sql_literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value!r}::DOUBLE" if math.isfinite(value) else f"'{value!r}'::DOUBLE"
    if isinstance(value, int | decimal.Decimal):
        return str(value)
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    return "'" + str(value).replace("'", "''") + "'"


# -- scopes -------------------------------------------------------------------


@dataclass
class Col:
    """A column visible in a scope: ``alias.name`` of some kind."""

    alias: str
    name: str
    kind: str
    origin: Column | None = None
    # True when the column may hold extreme values (arithmetic on it overflows).
    wide: bool = False

    @property
    def ref(self) -> str:
        return f"{self.alias}.{self.name}"


@dataclass
class Source:
    alias: str
    columns: list[Col]
    rows: int
    table: Table | None = None
    # Columns that identify a row of this source (empty: unknown).
    key: list[str] = field(default_factory=list)
    # How the source is written in a FROM clause.
    sql_from: str = ""


@dataclass
class Scope:
    sources: list[Source]
    outer: Scope | None = None
    # Whether aggregates are allowed in expressions built in this scope.
    rows: int = 1

    def columns(self, kinds: tuple[str, ...] | None = None) -> list[Col]:
        return [c for s in self.sources for c in s.columns if kinds is None or c.kind in kinds]

    def total_order(self) -> list[str] | None:
        """Columns whose values identify each row of the scope, if every source has a key."""
        refs: list[str] = []
        for source in self.sources:
            if not source.key:
                return None
            refs.extend(f"{source.alias}.{k}" for k in source.key)
        return refs


@dataclass
class Block:
    """A generated SELECT (or set operation) and its output columns."""

    sql: str
    columns: list[Col]
    rows: int
    # Names of output columns whose values identify rows (for ORDER BY LIMIT in subqueries).
    key: list[str] = field(default_factory=list)


def _family(kind: str) -> tuple[str, ...]:
    if kind in NUMERIC:
        return NUMERIC
    return (kind,)


# -- the generator --------------------------------------------------------------

SMALL_TABLE_ROWS = 2000
TABLE_WEIGHTS = {
    "region": 2,
    "nation": 3,
    "supplier": 3,
    "customer": 3,
    "part": 3,
    "partsupp": 2,
    "orders": 3,
    "lineitem": 3,
    "fz_items": 6,
    "fz_people": 4,
    "fz_empty": 2,
}


class Generator:
    def __init__(self, catalog: Catalog, seed: int):
        self.catalog = catalog
        self.seed = seed
        self.r = random.Random(seed)
        self.params: list[object] = []
        self.makers: list[Callable[[random.Random], object]] = []
        self.aliases = 0
        self.param_rate = self.r.choice([0.0, 0.0, 0.15, 0.4])
        self.depth_budget = self.r.choice([1, 2, 2, 3])
        self.ctes: list[Source] = []
        self.aggregates = catalog_aggregates()

    # -- helpers --------------------------------------------------------------

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def pick(self, items: Sequence[T]) -> T:
        return items[self.r.randrange(len(items))]

    def alias(self, prefix: str = "t") -> str:
        self.aliases += 1
        return f"{prefix}{self.aliases}"

    def param(self, value: object, make: Callable[[random.Random], object] | None = None) -> str:
        self.params.append(value)
        self.makers.append(make or (lambda _: value))
        return f"\x00P{len(self.params) - 1}\x00"

    def finish(self, sql: str, shape: str) -> Query:
        order: list[object] = []
        makers: list[Callable[[random.Random], object]] = []

        def take(match: re.Match[str]) -> str:
            order.append(self.params[int(match.group(1))])
            makers.append(self.makers[int(match.group(1))])
            return "?"

        text = _MARKER.sub(take, sql)
        return Query(self.seed, text, order, shape, makers)

    def _maker(self, kind: str, origin: Column | None) -> Callable[[random.Random], object]:
        """Another value of ``kind`` (from ``origin``'s samples too), drawn from ``r``."""

        def make(r: random.Random) -> object:
            other = Generator(self.catalog, self.seed)
            other.r = r
            return other.value(kind, origin)

        return make

    # -- literals -----------------------------------------------------------------

    def value(self, kind: str, origin: Column | None = None) -> object:
        """A Python value of ``kind``: mostly a sample of the column, sometimes an edge value."""
        if origin is not None and origin.samples and self.chance(0.8):
            return _python_value(self.pick(origin.samples), kind)
        if kind in (INT, BIGINT):
            return self.pick([0, 1, -1, 2, 3, 5, 7, 10, 25, 100, 1000, -50, 2147483647])
        if kind == DECIMAL:
            return decimal.Decimal(
                self.pick(["0.00", "1.50", "-3.25", "100.00", "0.05", "9999.99"])
            )
        if kind == DOUBLE:
            return self.pick([0.0, 0.25, -1.5, 2.75, 100.0, -0.0, 1e6, math.inf])
        if kind == DATE:
            return dt.date.fromisoformat(
                self.pick(["1995-01-01", "1970-01-01", "0001-01-01", "9999-12-31", "1998-12-01"])
            )
        if kind == BOOL:
            return self.chance(0.5)
        return self.pick(["", "a", "ANN", "Paris", "BUILDING", "MAIL", "special", "é", "F"])

    def literal(self, kind: str, origin: Column | None = None, allow_param: bool = True) -> str:
        value = self.value(kind, origin)
        if allow_param and self.chance(self.param_rate):
            return self.param(value, self._maker(kind, origin))
        if kind == DOUBLE and isinstance(value, float):
            return repr(value) if self.chance(0.5) else f"{value!r}::DOUBLE"
        return sql_literal(value)

    # -- expressions --------------------------------------------------------------

    def column(self, scope: Scope, kinds: tuple[str, ...] | None) -> Col | None:
        candidates = scope.columns(kinds)
        return self.pick(candidates) if candidates else None

    def expr(self, scope: Scope, kind: str, depth: int = 0) -> str:
        """A scalar expression of ``kind`` over the scope (no aggregates)."""
        if kind == BOOL and self.chance(0.5):
            return self.pred(scope, depth + 1)
        col = self.column(scope, _family(kind) if kind in NUMERIC else (kind,))
        if depth >= 2 or self.chance(0.45):
            if col is not None and self.chance(0.8):
                return col.ref
            return self.literal(kind, col.origin if col else None)
        makers = {
            INT: self._int_expr,
            BIGINT: self._int_expr,
            DECIMAL: self._num_expr,
            DOUBLE: self._num_expr,
            VARCHAR: self._text_expr,
            DATE: self._date_expr,
            BOOL: self._bool_expr,
        }
        if self.chance(0.12):
            return self._generic_expr(scope, kind, depth)
        return makers[kind](scope, depth + 1)

    def _generic_expr(self, scope: Scope, kind: str, depth: int) -> str:
        choice = self.r.randrange(5)
        if choice == 0:
            return (
                f"CASE WHEN {self.pred(scope, depth + 1)} THEN {self.expr(scope, kind, depth + 1)} "
                f"ELSE {self.expr(scope, kind, depth + 1)} END"
            )
        if choice == 1:
            return f"COALESCE({self.expr(scope, kind, depth + 1)}, {self.literal(kind)})"
        if choice == 2:
            return f"NULLIF({self.expr(scope, kind, depth + 1)}, {self.literal(kind)})"
        if choice == 3 and depth < 2 and self.depth_budget > 1:
            return f"({self.scalar_subquery(scope, kind, depth + 1)})"
        return f"CASE {self.expr(scope, kind, depth + 1)} WHEN {self.literal(kind)} THEN {self.literal(kind)} END"

    def _narrow_number(self, scope: Scope, kinds: tuple[str, ...]) -> str:
        cols = [c for c in scope.columns(kinds) if not c.wide]
        if cols and self.chance(0.85):
            return self.pick(cols).ref
        return self.literal(self.pick(kinds))

    def _int_expr(self, scope: Scope, depth: int) -> str:
        a = self._narrow_number(scope, (INT, BIGINT))
        makers: list[Callable[[], str]] = [
            lambda: f"({a} + {self.literal(INT)})",
            lambda: f"({a} - {self._narrow_number(scope, (INT, BIGINT))})",
            lambda: f"({a} * {self.pick(['2', '-1', '3'])})",
            lambda: f"abs({a})",
            lambda: f"({a} % {self.pick(['3', '7', '10'])})",
            lambda: f"length({self.expr(scope, VARCHAR, depth)})",
            lambda: (
                f"EXTRACT({self.pick(['year', 'month', 'day', 'dow', 'quarter'])} "
                f"FROM {self.expr(scope, DATE, depth)})"
            ),
            lambda: f"CAST({self._narrow_number(scope, (DECIMAL, DOUBLE))} AS BIGINT)",
            lambda: f"sign({a})",
            # a list slice up to a column: ``[:c]`` once read as a ``:c`` parameter (issue 40)
            lambda: "len([{0}, {1}, {0}][{2}:{3}])".format(
                a, self.literal(INT), self.pick(["", "2"]), self._narrow_number(scope, (INT,))
            ),
        ]
        return makers[self.r.randrange(len(makers))]()

    def _num_expr(self, scope: Scope, depth: int) -> str:
        a = self._narrow_number(scope, NUMERIC)
        makers: list[Callable[[], str]] = [
            lambda: f"({a} + {self._narrow_number(scope, NUMERIC)})",
            lambda: f"({a} * (1 - {self._narrow_number(scope, (DECIMAL,))}))",
            lambda: f"round({a}, {self.pick(['0', '1', '2'])})",
            lambda: f"({a} / {self.pick(['2', '4', '100', '0.5'])})",
            lambda: f"abs({a})",
            lambda: f"CAST({a} AS {self.pick(['DOUBLE', 'DECIMAL(18,3)', 'BIGINT'])})",
            lambda: f"greatest({a}, {self.literal(DECIMAL)})",
            lambda: f"({a} / NULLIF({self._narrow_number(scope, (INT, BIGINT))}, 0))",
            lambda: f"-{a}",
        ]
        return makers[self.r.randrange(len(makers))]()

    def _text_expr(self, scope: Scope, depth: int) -> str:
        a = self.expr(scope, VARCHAR, depth + 1)
        makers: list[Callable[[], str]] = [
            lambda: f"upper({a})",
            lambda: f"lower({a})",
            lambda: f"substring({a}, {self.pick(['1', '2', '3'])}, {self.pick(['1', '2', '5'])})",
            lambda: f"({a} || {self.literal(VARCHAR)})",
            lambda: f"trim({a})",
            lambda: "replace({}, {}, {})".format(
                a, self.pick(["'a'", "' '", "'é'"]), self.pick(["'_'", "''"])
            ),
            lambda: f"CAST({self._narrow_number(scope, (INT, BIGINT, DECIMAL))} AS VARCHAR)",
            lambda: f"strftime({self.expr(scope, DATE, depth)}, '%Y-%m')",
            lambda: f"left({a}, {self.pick(['1', '3'])})",
            lambda: f"concat_ws('-', {a}, {self.expr(scope, VARCHAR, depth + 1)})",
            lambda: "({})[{}:{}]".format(  # a string slice, its bounds columns or constants
                a,
                self.pick(["", "2", "-3"]),
                self.pick(["", "3", self._narrow_number(scope, (INT,))]),
            ),
        ]
        return makers[self.r.randrange(len(makers))]()

    def _date_expr(self, scope: Scope, depth: int) -> str:
        col = self.column(scope, (DATE,))
        a = col.ref if col else self.literal(DATE)
        makers: list[Callable[[], str]] = [
            lambda: f"({a} + INTERVAL {self.pick(['1', '30', '365'])} DAY)",
            lambda: f"CAST(date_trunc('{self.pick(['month', 'year'])}', {a}) AS DATE)",
            lambda: f"last_day({a})",
            lambda: f"({a} - INTERVAL {self.pick(['1', '3'])} MONTH)::DATE",
            lambda: f"greatest({a}, {self.literal(DATE)})",
        ]
        return makers[self.r.randrange(len(makers))]()

    def _bool_expr(self, scope: Scope, depth: int) -> str:
        col = self.column(scope, (BOOL,))
        if col is not None and self.chance(0.5):
            return self.pick([col.ref, f"NOT {col.ref}", f"{col.ref} IS NOT TRUE"])
        return self.pred(scope, depth)

    # -- predicates ---------------------------------------------------------------

    def pred(self, scope: Scope, depth: int = 0) -> str:
        roll = self.r.random()
        if depth < 2 and roll < 0.12:
            op = self.pick(["AND", "OR", "AND"])
            return f"({self.pred(scope, depth + 1)} {op} {self.pred(scope, depth + 1)})"
        if depth < 2 and roll < 0.15:
            return f"NOT ({self.pred(scope, depth + 1)})"
        if depth < 2 and roll < 0.25 and self.depth_budget > 1:
            return self.subquery_pred(scope, depth + 1)
        return self.simple_pred(scope, depth)

    def simple_pred(self, scope: Scope, depth: int) -> str:
        col = self.column(scope, None)
        if col is None:
            return self.pick(["true", "false", "1 = 1"])
        kind, lit = col.kind, functools.partial(self.literal, col.kind, col.origin)
        roll = self.r.randrange(14)
        if roll <= 3:
            op = self.pick(["=", "=", "<>", "<", "<=", ">", ">="])
            return f"{col.ref} {op} {lit()}"
        if roll == 4:
            low, high = sorted(
                [self.value(kind, col.origin), self.value(kind, col.origin)], key=_key
            )
            word = "NOT BETWEEN" if self.chance(0.15) else "BETWEEN"
            return f"{col.ref} {word} {self._lit_or_param(low)} AND {self._lit_or_param(high)}"
        if roll == 5:
            items = ", ".join(lit() for _ in range(self.r.randint(1, 4)))
            word = "NOT IN" if self.chance(0.25) else "IN"
            return f"{col.ref} {word} ({items})"
        if roll == 6:
            return f"{col.ref} IS {self.pick(['', 'NOT '])}NULL"
        if roll == 7:
            return self.like_pred(scope)
        if roll == 8:
            other = [c for c in scope.columns(_family(kind)) if c is not col]
            if other:
                op = self.pick(["=", "<", "<>", ">="])
                return f"{col.ref} {op} {self.pick(other).ref}"
            return f"{col.ref} IS NOT NULL"
        if roll == 9:
            return f"{self.expr(scope, kind, depth + 1)} {self.pick(['=', '<', '>'])} {lit()}"
        if roll == 10 and kind == DATE:
            return f"EXTRACT(year FROM {col.ref}) = {self.pick(['1995', '1970', '1', '9999'])}"
        if roll == 11:
            return f"{col.ref} IS NOT DISTINCT FROM {lit()}"
        if roll == 12 and kind == VARCHAR:
            return f"substring({col.ref}, 1, 2) IN ({lit()}, {self.literal(VARCHAR)})"
        return f"{col.ref} = {lit()}"

    def _lit_or_param(self, value: object) -> str:
        if self.chance(self.param_rate):
            return self.param(value)
        return sql_literal(value)

    def like_pred(self, scope: Scope) -> str:
        col = self.column(scope, (VARCHAR,))
        if col is None:
            return "true"
        words = (col.origin.words if col.origin else []) or ["special", "requests", "a", "é"]
        roll = self.r.randrange(6)
        w1, w2 = self.pick(words), self.pick(words)
        pattern = [
            f"%{w1}%",
            f"%{w1}%{w2}%",
            f"{w1[:3]}%",
            f"%{w1[-3:]}",
            "%special%requests%",
            f"_{w1[1:4]}%",
        ][roll]
        if col.origin and col.origin.samples and self.chance(0.2):
            pattern = str(col.origin.samples[0])[:4] + "%"
        op = self.pick(["LIKE", "LIKE", "NOT LIKE", "ILIKE", "NOT ILIKE"])
        return f"{col.ref} {op} {self._lit_or_param(pattern)}"

    def subquery_pred(self, scope: Scope, depth: int) -> str:
        roll = self.r.randrange(5)
        if roll <= 1:
            word = self.pick(["EXISTS", "NOT EXISTS"])
            inner = self.subquery(scope, None, depth, correlated=self.chance(0.8))
            return f"{word} ({inner.sql})"
        col = self.column(scope, None)
        if col is None:
            return "true"
        if roll <= 3:
            word = self.pick(["IN", "IN", "NOT IN"])
            inner = self.subquery(scope, col.kind, depth, correlated=self.chance(0.4))
            return f"{col.ref} {word} ({inner.sql})"
        op = self.pick(["=", "<", ">", "<>"])
        return f"{col.ref} {op} ({self.scalar_subquery(scope, col.kind, depth)})"

    # -- subqueries -----------------------------------------------------------------

    def subquery(self, outer: Scope, kind: str | None, depth: int, correlated: bool) -> Block:
        """A one-column SELECT over a new table, maybe correlated with ``outer``."""
        source = self.base_source(self.pick_table(small=True))
        scope = Scope([source], outer, source.rows)
        conjuncts = []
        if correlated:
            link = self.correlation(source, outer)
            if link:
                conjuncts.append(link)
        if self.chance(0.6):
            conjuncts.append(self.pred(scope, depth + 1))
        if kind is not None and not correlated and depth < 4 and self.chance(0.5):
            conjuncts.append(self.in_chain_level(scope, depth))
        where = f" WHERE {' AND '.join(conjuncts)}" if conjuncts else ""
        if kind is None:
            return Block(f"SELECT 1 FROM {source.sql_from}{where}", [], source.rows)
        col = self.column(scope, _family(kind)) or None
        value = col.ref if col else self.literal(kind)
        distinct = "DISTINCT " if self.chance(0.2) else ""
        return Block(
            f"SELECT {distinct}{value} FROM {source.sql_from}{where}",
            [],
            source.rows,
        )

    def in_chain_level(self, scope: Scope, depth: int) -> str:
        """``col [NOT] IN (SELECT c ...)`` inside an uncorrelated IN-subquery: a chain of
        levels, each one table (TPC-DS q83's dates of the weeks of three dates)."""
        col = self.column(scope, None)
        if col is None:
            return "true"
        inner = self.subquery(scope, col.kind, depth + 1, correlated=False)
        return f"{col.ref} {self.pick(['IN', 'IN', 'NOT IN'])} ({inner.sql})"

    def scalar_subquery(self, outer: Scope, kind: str, depth: int) -> str:
        source = self.base_source(self.pick_table(small=True))
        scope = Scope([source], outer, source.rows)
        conjuncts = []
        if self.chance(0.5):
            link = self.correlation(source, outer)
            if link:
                conjuncts.append(link)
        if self.chance(0.5):
            conjuncts.append(self.simple_pred(scope, depth + 1))
        where = f" WHERE {' AND '.join(conjuncts)}" if conjuncts else ""
        frm = source.sql_from
        col = self.column(scope, _family(kind))
        if col is None:
            return f"SELECT {self.literal(kind)}"
        if kind in (INT, BIGINT) and self.chance(0.4):
            return f"SELECT count(*) FROM {frm}{where}"
        if kind in NUMERIC and col.kind in NUMERIC and self.chance(0.5):
            fn = self.pick(["sum", "avg", "min", "max"])
            return f"SELECT {fn}({col.ref}) FROM {frm}{where}"
        if self.chance(0.5):
            return f"SELECT {self.pick(['min', 'max'])}({col.ref}) FROM {frm}{where}"
        direction = self.pick(["", " DESC"])
        return (
            f"SELECT {col.ref} FROM {frm}{where} ORDER BY {col.ref}{direction} NULLS LAST LIMIT 1"
        )

    def correlation(self, inner: Source, outer: Scope | None) -> str | None:
        """An equality linking ``inner`` to a column of the enclosing scope."""
        if outer is None:
            return None
        outer_cols = outer.columns(None)
        if inner.table is not None:
            for table, col, ref_table, ref_col in self.catalog.foreign_keys:
                for oc in outer_cols:
                    if oc.origin is None:
                        continue
                    if table == inner.table.name and oc.origin.name == ref_col:
                        return f"{inner.alias}.{col} = {oc.ref}"
                    if ref_table == inner.table.name and oc.origin.name == col:
                        return f"{inner.alias}.{ref_col} = {oc.ref}"
        for ic in self.r.sample(inner.columns, len(inner.columns)):
            same = [c for c in outer_cols if _family(c.kind) == _family(ic.kind)]
            if same:
                op = self.pick(["=", "=", "<", "<>"])
                return f"{ic.ref} {op} {self.pick(same).ref}"
        return None

    # -- sources ----------------------------------------------------------------------

    def pick_table(self, small: bool = False) -> Table:
        names = [
            n
            for n in self.catalog.tables
            if n in TABLE_WEIGHTS and (not small or self.catalog.tables[n].rows <= 16000)
        ]
        weights = [TABLE_WEIGHTS[n] for n in names]
        return self.catalog.tables[self.r.choices(names, weights)[0]]

    def base_source(self, table: Table) -> Source:
        alias = self.alias(table.name[:1] if not table.name.startswith("fz_") else "f")
        cols = [
            Col(alias, c.name, c.kind, c, wide=c.kind == BIGINT and _wide(c)) for c in table.columns
        ]
        source = Source(alias, cols, table.rows, table, list(table.key))
        source.sql_from = f"{table.name} AS {alias}"
        return source

    def derived_source(self, depth: int) -> Source:
        block = self.select_block(None, depth + 1, None, top=False)
        alias = self.alias("d")
        cols = [Col(alias, c.name, c.kind, c.origin, c.wide) for c in block.columns]
        source = Source(alias, cols, block.rows, None, list(block.key))
        source.sql_from = f"({block.sql}) AS {alias}"
        return source

    def cte_source(self, cte: Source) -> Source:
        alias = self.alias("c")
        cols = [Col(alias, c.name, c.kind, c.origin, c.wide) for c in cte.columns]
        source = Source(alias, cols, cte.rows, None, list(cte.key))
        source.sql_from = f"{cte.alias} AS {alias}"
        return source

    def any_source(self, depth: int) -> Source:
        if self.ctes and self.chance(0.5):
            return self.cte_source(self.pick(self.ctes))
        if depth < self.depth_budget and self.chance(0.12):
            return self.derived_source(depth)
        return self.base_source(self.pick_table())

    def from_clause(self, depth: int) -> tuple[str, Scope, list[str]]:
        """The FROM text, the scope it makes visible, and WHERE conjuncts it needs."""
        first = self.any_source(depth)
        sources, text, extra = [first], first.sql_from, []
        rows = first.rows
        for _ in range(self.pick([0, 0, 0, 1, 1, 1, 2])):
            joined = self.join(sources, rows, depth)
            if joined is None:
                break
            source, clause, kept, rows, where = joined
            text += clause
            if kept:
                sources.append(source)
            extra.extend(where)
        return text, Scope(sources, None, rows), extra

    def join(
        self, sources: list[Source], rows: int, depth: int
    ) -> tuple[Source, str, bool, int, list[str]] | None:
        fk = self.fk_partner(sources)
        if fk is not None and self.chance(0.7):
            left_col, table, right_name = fk
            source = self.base_source(table)
            condition = f"{left_col.ref} = {source.alias}.{right_name}"
            new_rows = max(rows, table.rows)
        else:
            source = self.any_source(depth)
            same = [
                (lc, rc)
                for lc in (c for s in sources for c in s.columns)
                for rc in source.columns
                if _family(lc.kind) == _family(rc.kind)
                and lc.kind != BOOL
                and not (_computed_float(lc) or _computed_float(rc))
            ]
            if not same or rows * source.rows > 400_000:
                if rows * source.rows > 40_000:
                    return None
                source_from = source.sql_from
                return source, f" CROSS JOIN {source_from}", True, rows * source.rows, []
            lc, rc = self.pick(same)
            condition = f"{lc.ref} = {rc.ref}"
            new_rows = min(rows * source.rows, 400_000)
        if self.chance(0.2):
            condition += f" AND {self.simple_pred(Scope([source]), 1)}"
        kind = self.r.choices(
            ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", ",", "SEMI JOIN", "ANTI JOIN"],
            [5, 3, 1, 1, 2, 1, 1],
        )[0]
        source_from = source.sql_from
        if kind == ",":
            return source, f", {source_from}", True, new_rows, [condition]
        kept = kind not in ("SEMI JOIN", "ANTI JOIN")
        if kind in ("LEFT JOIN", "FULL JOIN"):
            for col in source.columns:
                col.origin = col.origin  # the nullable side keeps its samples
        return source, f" {kind} {source_from} ON {condition}", kept, new_rows if kept else rows, []

    def fk_partner(self, sources: list[Source]) -> tuple[Col, Table, str] | None:
        options = []
        for source in sources:
            for col in source.columns:
                if col.origin is None:
                    continue
                for table, name, ref_table, ref_name in self.catalog.foreign_keys:
                    if source.table is not None and table == source.table.name and name == col.name:
                        options.append((col, self.catalog.tables[ref_table], ref_name))
                    if (
                        source.table is not None
                        and ref_table == source.table.name
                        and ref_name == col.name
                        and self.catalog.tables[table].rows <= 16000
                    ):
                        options.append((col, self.catalog.tables[table], name))
        return self.pick(options) if options else None

    # -- SELECT blocks ------------------------------------------------------------

    def select_block(
        self, outer: Scope | None, depth: int, kinds: list[str] | None, top: bool
    ) -> Block:
        frm, scope, conjuncts = self.from_clause(depth)
        scope.outer = outer
        for _ in range(self.pick([0, 1, 1, 1, 2, 2, 3])):
            conjuncts.append(self.pred(scope, 0 if depth < self.depth_budget else 2))
        where = f" WHERE {' AND '.join(conjuncts)}" if conjuncts else ""
        shape = self.r.choices(["plain", "agg", "window", "distinct"], [4, 5, 1, 1])[0]
        if kinds is not None and shape == "window":
            shape = "plain"
        if shape == "agg":
            return self.aggregate_block(scope, frm, where, depth, kinds)
        return self.plain_block(scope, frm, where, depth, kinds, shape, top)

    def plain_block(
        self,
        scope: Scope,
        frm: str,
        where: str,
        depth: int,
        kinds: list[str] | None,
        shape: str,
        top: bool,
    ) -> Block:
        wanted = (
            kinds
            or [
                c.kind
                for c in self.r.sample(
                    scope.columns(None), min(self.r.randint(1, 4), len(scope.columns(None)))
                )
            ]
            or [INT]
        )
        items, cols = [], []
        for i, kind in enumerate(wanted):
            name = f"c{i}"
            if self.chance(0.7):
                col = self.column(scope, (kind,))
                text = col.ref if col else self.expr(scope, kind)
                origin, wide = (col.origin, col.wide) if col else (None, False)
            else:
                text, origin, wide = self.expr(scope, kind), None, kind == BIGINT
            items.append(f"{text} AS {name}")
            cols.append(Col("", name, kind, origin, wide))
        order = scope.total_order()
        if shape == "window" and kinds is None:
            for _ in range(self.r.randint(1, 2)):
                text, kind = self.window_expr(scope, order)
                name = f"c{len(items)}"
                items.append(f"{text} AS {name}")
                cols.append(Col("", name, kind))
        distinct = ""
        key = [c.name for c in cols] if shape == "distinct" else []
        if shape == "distinct":
            distinct = "DISTINCT "
        qualify = ""
        if shape == "window" and self.chance(0.2):
            qualify = f" QUALIFY {cols[-1].name} IS NOT NULL"
        sql = f"SELECT {distinct}{', '.join(items)} FROM {frm}{where}{qualify}"
        rows = max(1, scope.rows // 3) if where else scope.rows
        return Block(sql, cols, rows, key)

    def window_expr(self, scope: Scope, order: list[str] | None) -> tuple[str, str]:
        part_col = self.column(scope, (INT, BIGINT, VARCHAR, BOOL, DATE))
        partition = f"PARTITION BY {part_col.ref} " if part_col and self.chance(0.6) else ""
        num = self.column(scope, NUMERIC)
        arg = num.ref if num else "1"
        ord_col = self.column(scope, (*NUMERIC, DATE, VARCHAR))
        peer_order = f"ORDER BY {ord_col.ref}" if ord_col else ""
        if order and self.chance(0.5):
            total = "ORDER BY " + ", ".join(f"{k}{self.pick(['', ' DESC'])}" for k in order)
            roll = self.r.randrange(7)
            frame = self.pick(
                [
                    "ROWS BETWEEN 2 PRECEDING AND CURRENT ROW",
                    "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 FOLLOWING",
                    "ROWS BETWEEN 1 FOLLOWING AND 3 FOLLOWING",
                    "ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING",
                ]
            )
            if roll == 0:
                return f"row_number() OVER ({partition}{total})", BIGINT
            if roll == 1:
                return f"lag({arg}, 1) OVER ({partition}{total})", DOUBLE
            if roll == 2:
                return f"lead({arg}, 2, 0) OVER ({partition}{total})", DOUBLE
            if roll == 3:
                return f"first_value({arg}) OVER ({partition}{total} {frame})", DOUBLE
            if roll == 4:
                return f"ntile(3) OVER ({partition}{total})", BIGINT
            fn = self.pick(["sum", "min", "max", "count", "avg"])
            return f"{fn}({arg}) OVER ({partition}{total} {frame})", DOUBLE
        roll = self.r.randrange(6)
        if roll == 0 and peer_order:
            return f"{self.pick(['rank', 'dense_rank'])}() OVER ({partition}{peer_order})", BIGINT
        if roll == 1 and peer_order:
            return (
                f"{self.pick(['percent_rank', 'cume_dist'])}() OVER ({partition}{peer_order})",
                DOUBLE,
            )
        if roll == 2 and peer_order:
            frame = self.pick(
                [
                    "",
                    " GROUPS BETWEEN 1 PRECEDING AND CURRENT ROW",
                    " RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
                ]
            )
            fn = self.pick(["sum", "min", "max", "count"])
            return f"{fn}({arg}) OVER ({partition}{peer_order}{frame})", DOUBLE
        if roll == 3 and num is not None and num.kind in (INT, BIGINT) and not num.wide:
            return (
                f"count(*) OVER ({partition}ORDER BY {num.ref} RANGE BETWEEN 5 PRECEDING AND 5 FOLLOWING)",
                BIGINT,
            )
        fn = self.pick(["sum", "avg", "min", "max", "count"])
        return f"{fn}({arg}) OVER ({partition.strip()})", DOUBLE

    def aggregate_block(
        self, scope: Scope, frm: str, where: str, depth: int, kinds: list[str] | None
    ) -> Block:
        if kinds is not None:
            n_keys = (
                0
                if len(kinds) == 1 and kinds[0] in NUMERIC and self.chance(0.5)
                else len(kinds) - 1
            )
            key_kinds, agg_kinds = kinds[:n_keys], kinds[n_keys:]
        else:
            key_kinds, agg_kinds = None, None
        groupable = [c for c in scope.columns(None) if not (c.kind == DOUBLE and self.chance(0.5))]
        keys: list[Col] = []
        if key_kinds is not None:
            for kind in key_kinds:
                col = self.column(scope, (kind,))
                keys.append(col or Col("", self.literal(kind, allow_param=False), kind))
        else:
            n = self.pick([0, 1, 1, 1, 2, 2, 3])
            keys = self.r.sample(groupable, min(n, len(groupable)))
        items, cols = [], []
        for i, key in enumerate(keys):
            items.append(f"{key.ref if key.alias else key.name} AS c{i}")
            cols.append(Col("", f"c{i}", key.kind, key.origin, key.wide))
        single_table = len(scope.sources) == 1 and scope.sources[0].table is not None
        wanted: list[str | None] = list(agg_kinds or []) or [None] * self.r.randint(1, 3)
        for agg_kind in wanted:
            text, out_kind = self.aggregate(scope, agg_kind, single_table)
            name = f"c{len(items)}"
            items.append(f"{text} AS {name}")
            cols.append(Col("", name, out_kind))
        group = ""
        key_refs = [k.ref if k.alias else k.name for k in keys]
        if keys:
            roll = self.r.randrange(10)
            if roll == 0 and kinds is None:
                group = f" GROUP BY ROLLUP ({', '.join(key_refs)})"
            elif roll == 1 and kinds is None:
                group = f" GROUP BY CUBE ({', '.join(key_refs)})"
            elif roll == 2 and kinds is None:
                sets = ", ".join(f"({r})" for r in key_refs) + ", ()"
                group = f" GROUP BY GROUPING SETS ({sets})"
            elif roll == 3:
                group = " GROUP BY ALL"
            else:
                group = f" GROUP BY {', '.join(key_refs)}"
            if group.startswith(" GROUP BY ALL") and not all(k.alias for k in keys):
                group = f" GROUP BY {', '.join(key_refs)}"
            grouping_sets = "ROLLUP" in group or "CUBE" in group or "GROUPING SETS" in group
            if grouping_sets and self.chance(0.5) and kinds is None:
                name = f"c{len(items)}"
                items.append(f"grouping({key_refs[0]}) AS {name}")
                cols.append(Col("", name, BIGINT))
        having = ""
        if self.chance(0.3):
            having = f" HAVING {self.having_pred(scope, depth, single_table)}"
        sql = f"SELECT {', '.join(items)} FROM {frm}{where}{group}{having}"
        rows = 1 if not keys else min(scope.rows, 50 ** len(keys))
        key_names = (
            [c.name for c in cols[: len(keys)]]
            if group.startswith(" GROUP BY ") and "(" not in group
            else []
        )
        return Block(sql, cols, rows, key_names if keys else [c.name for c in cols])

    def having_pred(self, scope: Scope, depth: int, single_table: bool) -> str:
        roll = self.r.randrange(4)
        if roll == 0:
            return f"count(*) > {self._lit_or_param(self.pick([0, 1, 2, 5]))}"
        text, kind = self.aggregate(scope, self.pick([INT, DECIMAL, DOUBLE]), single_table)
        if roll == 1 and self.depth_budget > 1:
            return f"{text} > ({self.scalar_subquery(scope, kind, depth + 1)})"
        op = self.pick(["<", ">", "<>", ">="])
        return f"{text} {op} {self.literal(kind if kind in NUMERIC else DOUBLE)}"

    def aggregate(self, scope: Scope, kind: str | None, single_table: bool) -> tuple[str, str]:
        """An aggregate call and its result kind (``kind`` forces a numeric result)."""
        if kind is not None and kind not in NUMERIC:
            col = self.column(scope, (kind,))
            return (f"{self.pick(['min', 'max'])}({col.ref if col else self.literal(kind)})", kind)
        pushable = [n for n in PUSHABLE_AGGREGATES if n in self.aggregates]
        if kind is not None or self.chance(0.5):
            name = self.pick(pushable)
        else:
            name = self.pick(self.aggregates)
        shape = AGGREGATE_SHAPES[name]
        if kind is not None and shape not in ("num", "any", "small_num", "quantile", "two_num"):
            name, shape = "sum", "num"
        filt = ""
        if self.chance(0.08):
            filt = f" FILTER (WHERE {self.simple_pred(scope, 2)})"
        return self._call_aggregate(scope, name, shape, single_table, filt)

    def _call_aggregate(
        self, scope: Scope, name: str, shape: str, single_table: bool, filt: str
    ) -> tuple[str, str]:
        num = self.column(scope, NUMERIC)
        num_ref = num.ref if num else "1"
        narrow = [c for c in scope.columns(NUMERIC) if not c.wide]
        arg = self.pick(narrow).ref if narrow else "1"
        if self.chance(0.2) and narrow:
            arg = self._num_expr(scope, 2)
        any_col = self.column(scope, None)
        any_ref = any_col.ref if any_col else "1"
        if name == "count":
            roll = self.r.randrange(3)
            text = ["count(*)", f"count({any_ref})", f"count(DISTINCT {any_ref})"][roll]
            return text + filt, BIGINT
        if name in ("min", "max"):
            return f"{name}({arg if self.chance(0.6) else any_ref}){filt}", (
                DOUBLE if self.chance(0.6) else (any_col.kind if any_col else INT)
            )
        if shape == "num":
            distinct = "DISTINCT " if name in ("sum", "avg") and self.chance(0.1) else ""
            return f"{name}({distinct}{arg}){filt}", DOUBLE
        if shape == "small_num":
            return f"{name}(({num_ref}) % 3 + 1){filt}", DOUBLE
        if shape == "quantile":
            q = self.pick(["0.5", "0.25", "0.9"])
            return f"{name}({arg}, {q}){filt}", DOUBLE
        if shape == "two_num":
            other = self.pick(narrow).ref if narrow else "1"
            return f"{name}({arg}, {other}){filt}", DOUBLE
        if shape == "int":
            ints = [c for c in scope.columns((INT, BIGINT))]
            ref = self.pick(ints).ref if ints else "1"
            return f"{name}({ref}){filt}", BIGINT
        if shape == "bool":
            bools = scope.columns((BOOL,))
            ref = self.pick(bools).ref if bools else self.simple_pred(scope, 2)
            return f"{name}({ref}){filt}", BOOL
        if shape == "pred":
            return f"{name}({self.simple_pred(scope, 2)})", BIGINT
        if shape == "any":
            return f"{name}({any_ref}){filt}", DOUBLE
        if shape == "low_card":
            low = [
                c
                for c in scope.columns((INT, VARCHAR, BOOL))
                if c.origin and len(c.origin.samples) < 12
            ]
            ref = self.pick(low).ref if low else "1"
            return f"{name}({ref}){filt}", VARCHAR
        if shape == "ordered_text":
            texts = scope.columns((VARCHAR,))
            ref = self.pick(texts).ref if texts else "'x'"
            return f"{name}({ref}, ',' ORDER BY {ref}){filt}", VARCHAR
        if shape == "ordered_list":
            return f"{name}({any_ref} ORDER BY {any_ref}){filt}", VARCHAR
        if shape == "by_key":
            source = scope.sources[0]
            if single_table and len(source.key) == 1:
                key = f"{source.alias}.{source.key[0]}"
                return f"{name}({any_ref}, {key}){filt}", DOUBLE
            return f"max({any_ref}){filt}", DOUBLE
        return f"count(*){filt}", BIGINT

    # -- whole queries --------------------------------------------------------------

    def query(self) -> Query:
        with_text = ""
        roll = self.r.random()
        if roll < 0.15:
            with_text = self.with_clause()
        elif roll < 0.2:
            with_text = self.recursive_cte()
        shape = self.r.choices(
            ["select", "setop", "pushable", "star", "positional", "nested"], [6, 1, 3, 2, 1, 1]
        )[0]
        if shape == "positional" and not with_text:
            return self.finish(self.positional_query(), shape)
        if shape == "nested" and not with_text and "fz_nested" in self.catalog.tables:
            return self.finish(self.nested_query(), shape)
        if shape == "setop":
            body = self.set_operation()
        elif shape == "pushable" and not with_text:
            body = self.pushable_block()
        elif shape == "star" and not with_text:
            body = self.star_block()
        else:
            body = self.select_block(None, 0, None, top=True)
        sql = with_text + body.sql + self.order_limit(body)
        return self.finish(sql, shape)

    def positional_query(self) -> str:
        """Unaliased scalar subqueries of a select list that ORDER BY or GROUP BY
        point at by position: ``SELECT (SELECT 1) FROM t1 ORDER BY 1`` (issue 40).
        The ORDER BY ends with the table's key, so the order is total."""
        source = self.base_source(self.pick_table())
        scope = Scope([source], None, source.rows)
        kind = self.pick([INT, BIGINT, VARCHAR, DATE, DECIMAL])
        where = f" WHERE {self.simple_pred(scope, 1)}" if self.chance(0.5) else ""
        if self.chance(0.3) or not source.key:  # grouped: an uncorrelated subquery
            alone = Scope([], None, 1)
            sub = f"({self.scalar_subquery(alone, kind, 1)})"
            return f"SELECT {sub}, count(*) FROM {source.sql_from}{where} GROUP BY 1 ORDER BY 1, 2"
        items = [f"({self.scalar_subquery(scope, kind, 1)})"]
        if self.chance(0.5):
            items.append(self.expr(scope, self.pick([INT, VARCHAR]), 1))
        items += [f"{source.alias}.{k}" for k in source.key]
        order = [f"{i}{self.pick(['', ' DESC'])}" for i in range(1, len(items) + 1)]
        return (
            f"SELECT {', '.join(items)} FROM {source.sql_from}{where} ORDER BY {', '.join(order)}"
        )

    def nested_query(self) -> str:
        """LIST, STRUCT, MAP, UBIGINT and DECIMAL(38, 2) columns (issue 40): slices,
        fields, lookups and equality on the wide numbers, in order of the key."""
        table = self.catalog.tables["fz_nested"]
        ub, d38 = (self.pick(table.column(c).samples or [0]) for c in ("ub", "d38"))
        k = self.pick(["", "1", "2", "-1"])
        outputs = [
            f"n.li[:{k}]", f"n.li[{self.pick(['1', '2', '-1'])}]", "len(n.li)", "n.st.a",
            "n.st['b']", f"n.mp['{self.pick(['k0', 'k1', 'z'])}']", "n.ub", "n.d38", "n.st",
            "n.mp", "n.li", f"list_contains(n.li, {self.pick([0, 1, 2])})", "n.li[n.st.a:]",
            "cardinality(n.mp)", "n.ub // 7", "-n.d38",
        ]  # fmt: skip
        predicates = [
            f"n.ub = {self._lit_or_param(int(str(ub)))}", f"n.d38 = {d38}",
            f"n.st.a > {self.pick([0, 2])}", "n.li IS NULL", "n.st IS NOT NULL",
            f"n.mp['k1'] = {self.pick([1, 4])}", f"n.ub > {self.pick([0, 3 * 10**18])}",
            f"n.d38 BETWEEN -1 AND {self.pick([1, 10**30])}", "len(n.li) >= 2",
            f"n.st = {{'a': {self.pick([1, 2, 3])}, 'b': {self.pick(['x', 'Zoë', ''])!r}}}",
        ]  # fmt: skip
        items = ["n.nid", *self.r.sample(outputs, self.r.randint(1, 4))]
        where = ""
        if self.chance(0.7):
            chosen = self.r.sample(predicates, self.r.randint(1, 2))
            where = " WHERE " + f" {self.pick(['AND', 'OR'])} ".join(chosen)
        if self.chance(0.25):
            group = self.pick(["n.st.a", "n.ub", "n.d38", "len(n.li)", "n.mp['z']"])
            return (
                f"SELECT {group}, count(*), max(n.ub), min(n.d38) FROM fz_nested AS n{where} "
                "GROUP BY 1 ORDER BY 1 NULLS FIRST"
            )
        return f"SELECT {', '.join(items)} FROM fz_nested AS n{where} ORDER BY n.nid"

    def pushable_block(self) -> Block:
        """A shape the planner sends to the server whole: one table (or a foreign-key
        join), WHERE of column-versus-constant comparisons, GROUP BY of columns with
        COUNT/SUM/AVG/MIN/MAX."""
        table = self.pick_table()
        source = self.base_source(table)
        frm, sources = source.sql_from, [source]
        if self.chance(0.25):
            fk = self.fk_partner(sources)
            if fk is not None:
                left, partner, right = fk
                joined = self.base_source(partner)
                frm += f" JOIN {joined.sql_from} ON {left.ref} = {joined.alias}.{right}"
                sources.append(joined)
        scope = Scope(sources, None, table.rows)
        conjuncts = [self.pushable_pred(scope) for _ in range(self.pick([0, 1, 1, 2, 3]))]
        where = f" WHERE {' AND '.join(conjuncts)}" if conjuncts else ""
        low = [
            c
            for c in scope.columns((INT, BIGINT, VARCHAR, DATE, BOOL, DECIMAL))
            if c.origin is not None and len(c.origin.samples) < 25
        ]
        keys = self.r.sample(low, min(len(low), self.pick([0, 1, 1, 2])))
        items = [f"{k.ref} AS c{i}" for i, k in enumerate(keys)]
        cols = [Col("", f"c{i}", k.kind, k.origin, k.wide) for i, k in enumerate(keys)]
        numbers = [c for c in scope.columns(NUMERIC) if not c.wide]
        for _ in range(self.r.randint(1, 4)):
            name = f"c{len(items)}"
            fn = self.pick(PUSHABLE_AGGREGATES)
            col = (
                self.pick(numbers) if numbers and fn in ("sum", "avg") else self.column(scope, None)
            )
            if col is None or (fn == "count" and self.chance(0.5)):
                items.append(f"count(*) AS {name}")
            elif fn == "sum" and self.chance(0.2) and len(numbers) > 1:
                factor = self.pick(numbers)
                items.append(f"sum({col.ref} * (1 - {factor.ref})) AS {name}")
            else:
                items.append(f"{fn}({col.ref}) AS {name}")
            cols.append(Col("", name, DOUBLE))
        group = f" GROUP BY {', '.join(k.ref for k in keys)}" if keys else ""
        having = ""
        if keys and self.chance(0.2):
            having = f" HAVING count(*) > {self._lit_or_param(self.pick([1, 2, 10]))}"
        sql = f"SELECT {', '.join(items)} FROM {frm}{where}{group}{having}"
        return Block(sql, cols, 50, [c.name for c in cols[: len(keys)]])

    def star_block(self) -> Block:
        """A TPC-H-like join of a fact table with its dimensions along foreign keys:
        filters on the dimensions (LIKE '%word%' among them: bind filters), an IN
        subquery with GROUP BY ... HAVING (Q18), a correlated aggregate (Q17),
        GROUP BY a dimension column with SUM of a per-row expression."""
        fact = self.catalog.tables[self.pick(["lineitem", "orders", "partsupp", "fz_items"])]
        source = self.base_source(fact)
        sources, frm, links = [source], source.sql_from, []
        comma = self.chance(0.3)
        for _ in range(self.pick([1, 2, 2, 3])):
            fk = self.fk_partner(sources)
            if fk is None:
                break
            left, table, right = fk
            joined = self.base_source(table)
            if comma:
                frm += f", {joined.sql_from}"
                links.append(f"{left.ref} = {joined.alias}.{right}")
            else:
                word = self.r.choices(["JOIN", "LEFT JOIN"], [4, 1])[0]
                frm += f" {word} {joined.sql_from} ON {left.ref} = {joined.alias}.{right}"
            sources.append(joined)
        scope = Scope(sources, None, fact.rows)
        conjuncts = list(links)
        for dim in sources[1:]:
            if self.chance(0.6):
                dim_scope = Scope([dim])
                text_cols = dim_scope.columns((VARCHAR,))
                if text_cols and self.chance(0.5):
                    col = self.pick(text_cols)
                    words = (col.origin.words if col.origin else []) or ["special"]
                    conjuncts.append(
                        f"{col.ref} LIKE {self._lit_or_param('%' + self.pick(words) + '%')}"
                    )
                else:
                    conjuncts.append(self.pushable_pred(dim_scope))
        if self.chance(0.3):
            conjuncts.append(self.pushable_pred(Scope([source])))
        if self.chance(0.25):
            conjuncts.append(self.having_subquery(source))
        if self.chance(0.2):
            conjuncts.append(self.correlated_aggregate(source))
        where = f" WHERE {' AND '.join(conjuncts)}" if conjuncts else ""
        keys = [
            c
            for c in scope.columns((VARCHAR, INT, BIGINT, DATE))
            if c.origin and len(c.origin.samples) < 25
        ]
        keys = self.r.sample(keys, min(len(keys), self.pick([0, 1, 1, 2])))
        numbers = [c for c in source.columns if c.kind in NUMERIC and not c.wide]
        items = [f"{k.ref} AS c{i}" for i, k in enumerate(keys)]
        cols = [Col("", f"c{i}", k.kind, k.origin) for i, k in enumerate(keys)]
        measures = ["count(*)"]
        if numbers:
            a, b = self.pick(numbers), self.pick(numbers)
            measures += [
                f"sum({a.ref})",
                f"sum({a.ref} * (1 - {b.ref}))",
                f"avg({a.ref})",
                f"max({b.ref})",
            ]
        for measure in self.r.sample(measures, min(len(measures), self.r.randint(1, 3))):
            items.append(f"{measure} AS c{len(items)}")
            cols.append(Col("", f"c{len(cols)}", DOUBLE))
        group = f" GROUP BY {', '.join(k.ref for k in keys)}" if keys else ""
        return Block(f"SELECT {', '.join(items)} FROM {frm}{where}{group}", cols, 50)

    def having_subquery(self, source: Source) -> str:
        """``key IN (SELECT fk FROM child GROUP BY fk HAVING SUM(x) > ?)`` (TPC-H Q18)."""
        assert source.table is not None
        links = self.catalog.foreign_keys
        for table, col, ref_table, ref_col in self.r.sample(links, len(links)):
            if source.table.name not in (ref_table, table):
                continue
            if ref_table == source.table.name:
                other, mine, theirs = self.catalog.tables[table], ref_col, col
            else:
                other, mine, theirs = self.catalog.tables[ref_table], col, ref_col
            numbers = [c for c in other.columns if c.kind in NUMERIC and not _wide(c)]
            if numbers:
                measure = self.pick(numbers)
                bound = self._lit_or_param(
                    _python_value(self.pick(measure.samples or [0]), measure.kind)
                )
                return (
                    f"{source.alias}.{mine} IN (SELECT {theirs} FROM {other.name} GROUP BY {theirs} "
                    f"HAVING sum({measure.name}) > {bound})"
                )
        return "true"

    def correlated_aggregate(self, source: Source) -> str:
        """``x < (SELECT 0.2 * avg(x) FROM t i WHERE i.k = outer.k)`` (TPC-H Q17)."""
        numbers = [c for c in source.columns if c.kind in NUMERIC and not c.wide]
        keys = [c for c in source.columns if c.kind in (INT, BIGINT, VARCHAR) and not c.wide]
        if not numbers or not keys or source.table is None:
            return "true"
        x, k = self.pick(numbers), self.pick(keys)
        inner = self.alias("i")
        factor = self.pick(["0.2", "1", "1.5"])
        return (
            f"{x.ref} {self.pick(['<', '>'])} (SELECT {factor} * avg({inner}.{x.name}) "
            f"FROM {source.table.name} AS {inner} WHERE {inner}.{k.name} = {k.ref})"
        )

    def pushable_pred(self, scope: Scope) -> str:
        col = self.column(scope, None)
        if col is None:
            return "true"
        lit = functools.partial(self.literal, col.kind, col.origin)
        roll = self.r.randrange(8)
        if roll <= 2:
            return f"{col.ref} {self.pick(['=', '<', '>=', '<>'])} {lit()}"
        if roll == 3:
            low, high = sorted([self.value(col.kind, col.origin) for _ in range(2)], key=_key)
            return f"{col.ref} BETWEEN {self._lit_or_param(low)} AND {self._lit_or_param(high)}"
        if roll == 4:
            return f"{col.ref} IN ({', '.join(lit() for _ in range(self.r.randint(1, 3)))})"
        if roll == 5:
            return f"{col.ref} IS {self.pick(['', 'NOT '])}NULL"
        if roll == 6 and col.kind == VARCHAR:
            return self.like_pred(scope)
        return f"({col.ref} = {lit()} OR {col.ref} = {lit()})"

    def order_limit(self, body: Block) -> str:
        n = len(body.columns)
        if n == 0 or not self.chance(0.4):
            return ""
        if any(c.kind == VARCHAR and c.origin is None for c in body.columns) and self.chance(0.5):
            pass
        items = []
        for i in range(1, n + 1):
            direction = self.pick(["", " DESC", " ASC"])
            nulls = self.pick(["", " NULLS FIRST", " NULLS LAST"])
            items.append(f"{i}{direction}{nulls}")
        self.r.shuffle(items)
        text = f" ORDER BY {', '.join(items)}"
        if self.chance(0.7):
            limit = self.pick([1, 3, 10, 50])
            text += f" LIMIT {self._lit_or_param(limit)}"
            if self.chance(0.3):
                text += f" OFFSET {self._lit_or_param(self.pick([0, 1, 5]))}"
        return text

    def with_clause(self) -> str:
        parts = []
        for _ in range(self.pick([1, 1, 2])):
            block = self.select_block(None, 1, None, top=False)
            name = self.alias("cte")
            cols = [Col(name, c.name, c.kind, c.origin, c.wide) for c in block.columns]
            materialized = self.pick(["", "", " MATERIALIZED", " NOT MATERIALIZED"])
            parts.append(f"{name} AS{materialized} ({block.sql})")
            self.ctes.append(Source(name, cols, block.rows, None, list(block.key)))
        return "WITH " + ", ".join(parts) + " "

    def recursive_cte(self) -> str:
        name = self.alias("rec")
        if self.chance(0.5):
            start, stop = self.pick([0, 1, -2]), self.pick([3, 10, 25])
            body = f"SELECT {start} AS n UNION ALL SELECT n + 1 FROM {name} WHERE n < {self._lit_or_param(stop)}"
            self.ctes.append(Source(name, [Col(name, "n", INT)], stop - start + 1, None, ["n"]))
            return f"WITH RECURSIVE {name}(n) AS ({body}) "
        region = self._lit_or_param(self.pick([0, 1, 2]))
        body = (
            f"SELECT n_nationkey AS k, 0 AS depth FROM nation WHERE n_regionkey = {region} "
            f"UNION SELECT n.n_nationkey, r.depth + 1 FROM nation n JOIN {name} r "
            "ON n.n_regionkey = r.k % 5 WHERE r.depth < 3"
        )
        nation = self.catalog.tables["nation"].column("n_nationkey")
        cols = [Col(name, "k", BIGINT, nation), Col(name, "depth", INT)]
        self.ctes.append(Source(name, cols, 100, None, ["k", "depth"]))
        return f"WITH RECURSIVE {name}(k, depth) AS ({body}) "

    def set_operation(self) -> Block:
        first = self.select_block(None, 1, None, top=False)
        kinds = [c.kind for c in first.columns]
        sql = first.sql
        rows = first.rows
        for _ in range(self.pick([1, 1, 2])):
            op = self.pick(
                [
                    "UNION",
                    "UNION ALL",
                    "INTERSECT",
                    "EXCEPT",
                    "INTERSECT ALL",
                    "EXCEPT ALL",
                    "UNION ALL",
                ]
            )
            other = self.select_block(None, 1, kinds, top=False)
            sql = f"({sql}) {op} ({other.sql})" if self.chance(0.5) else f"{sql} {op} {other.sql}"
            rows += other.rows
        if " UNION " in sql and " ALL " not in sql and self.chance(0.0):
            pass
        return Block(f"SELECT * FROM ({sql}) AS s", first.columns, rows)


def _key(value: object) -> tuple[int, object]:
    return (0, value) if value is not None else (1, 0)


def _wide(column: Column) -> bool:
    numbers = [v for v in column.samples if isinstance(v, int)]
    return any(abs(v) > 10**12 for v in numbers)


def _python_value(sample: object, kind: str) -> object:
    if kind == DATE:
        return dt.date.fromisoformat(str(sample))
    if kind == DECIMAL:
        return decimal.Decimal(str(sample))
    if kind == DOUBLE:
        return float(sample)  # type: ignore[arg-type]
    return sample


def generate(catalog: Catalog, seed: int) -> Query:
    """The query for ``seed`` (same seed, same catalog: same query)."""
    return Generator(catalog, seed).query()


def workload(catalog: Catalog, seeds: range) -> list[str]:
    """Generated queries with their parameters inlined, for the designer's workload."""
    return [generate(catalog, s).inline() for s in seeds]


def _computed_float(col: Col) -> bool:
    """A float an expression computed: its last bits depend on the order rows were summed in
    (plaintext DuckDB's too, from one run to the next), so equality on it is no test."""
    return col.kind == DOUBLE and col.origin is None
