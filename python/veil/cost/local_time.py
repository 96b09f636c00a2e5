"""The local plan's work: its joins, filters and aggregates over the fetched rows.

The client finishes a query in an in-process DuckDB, so its time is priced as
the server's is (``server_time.Work``, each kind calibrated on a local DuckDB),
from the rows the plan fetches. One calibrated cost per fetched row, times a
pass per join and subquery, was 3x off either way on TPC-H SF 1: Q13's
1.6M rows through a join and two aggregates on integer keys took 30 ms (90
estimated), while Q10's 104K rows into 38K groups of seven customer columns
took 20 ms (7 estimated): a group costs per key column, as on the server.

The walk reads the local SQL: each source's rows (a fetched table's estimate,
a derived table's own output), key joins (the largest input probes the
others' hash tables and keeps its rows), the WHERE clause's predicates and
subqueries, GROUP BY keys (groups from the keys' distinct counts recorded at
load, else 100 a key, never more than the rows), DISTINCT aggregates, sorts
and LIMIT. Filters are taken to keep every row: the server has applied the
selective ones already.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping

from sqlglot import exp

from veil.cost.server_time import AGGREGATE_SHARE, Work, spilled_share

# a GROUP BY key the load has no distinct count for (a derived table's column)
_UNKNOWN_DISTINCT = 100.0
# a table the estimate has no rows for
_UNKNOWN_ROWS = 1000.0

Distinct = Callable[[str, str], "float | None"]  # (local table, column) -> distinct values


def local_work(
    query: exp.Expr, rows: Mapping[str, float], distinct: Distinct | None = None
) -> tuple[Work, float]:
    """The work of the local ``query`` and the rows it returns; ``rows``: each local table's
    rows, by name; ``distinct``: a column's distinct values (None: unknown)."""
    walk = _Walk(rows, distinct or (lambda table, column: None))
    out = walk.query(query)
    return walk.work, out


class _Walk:
    def __init__(self, rows: Mapping[str, float], distinct: Distinct) -> None:
        self.work = Work()
        self.rows = dict(rows)
        self.distinct = distinct

    def query(self, node: exp.Expr) -> float:
        # sqlglot keeps a WITH under ``with_``: read as ``with``, no CTE was ever priced and
        # each reference to one counted 1,000 rows (TPC-DS q05's three CTEs over 2.9M
        # fetched fact rows at SF 1: rules estimated 1.7 s, measured ~8 s)
        with_ = node.args.get("with_")
        for cte in with_.expressions if isinstance(with_, exp.With) else []:
            self.rows[cte.alias_or_name] = self.query(cte.this)
        if isinstance(node, exp.Subquery):
            return self.query(node.this)
        if isinstance(node, exp.SetOperation):
            left, right = self.query(node.left), self.query(node.right)
            if isinstance(node, exp.Union):
                if node.args.get("distinct"):
                    self._group(left + right, left + right, 1, 0)
                return left + right
            self._join(left, right)  # INTERSECT / EXCEPT: a hash join
            return left
        if isinstance(node, exp.Select):
            return self.select(node)
        return 1.0  # VALUES and the like: a few rows

    def select(self, select: exp.Select) -> float:
        aliases: dict[str, str] = {}  # alias -> local table, for distinct counts
        inputs: list[float] = []
        from_ = select.args.get("from_")
        sources = [from_.this] if isinstance(from_, exp.From) else []
        positional = 0
        for join in select.args.get("joins") or []:
            if str(join.args.get("method") or "").upper() == "POSITIONAL":
                positional += 1  # rows paired by position: no hash table
            sources.append(join.this)
        for source in sources:
            inputs.append(self.source(source, aliases))
        self.work.expression += sum(inputs)  # every source's rows read once
        rows = max(inputs) if inputs else 1.0
        joins = len(inputs) - 1 - positional
        if joins > 0:  # key joins: the largest input probes the others' hash tables
            for built in sorted(inputs)[:-1]:
                self._join(rows, built)
        where = select.args.get("where")
        if isinstance(where, exp.Where):
            self.predicates(where.this, rows)
        group = select.args.get("group")
        keys = list(group.expressions) if isinstance(group, exp.Group) else []
        aggregates = [a for item in select.expressions for a in _own(item, exp.AggFunc)]
        if keys or aggregates:
            groups = self.groups(keys, aliases, rows) if keys else 1.0
            self._group(rows, groups, len(keys), len(aggregates))
            for aggregate in aggregates:  # a DISTINCT aggregate groups its rows again
                if isinstance(aggregate.this, exp.Distinct):
                    self._group(rows, rows, len(keys) + 1, 0)
            rows = groups
        having = select.args.get("having")
        if isinstance(having, exp.Having):
            self.predicates(having.this, rows)
        if select.args.get("distinct"):
            self._group(rows, rows, len(select.expressions), 0)
        computed = sum(1 for item in select.expressions if not _passed_on(item))
        self.work.expression += rows * computed
        if select.args.get("order"):
            self.work.group_input += rows  # a sort handles each row about as a group does
        limit = select.args.get("limit")
        if isinstance(limit, exp.Limit) and isinstance(limit.expression, exp.Literal):
            rows = min(rows, float(limit.expression.name or rows))
        return rows

    def source(self, source: exp.Expr, aliases: dict[str, str]) -> float:
        if isinstance(source, exp.Table) and not source.args.get("db"):
            aliases[source.alias_or_name] = source.name
            return self.rows.get(source.name, _UNKNOWN_ROWS)
        if isinstance(source, exp.Subquery):
            return self.query(source.this)
        return 1.0

    def predicates(self, condition: exp.Expr, rows: float) -> None:
        """Each predicate on every row; a subquery run once, each row probing its result."""
        self.work.filter += rows * max(1, sum(1 for _ in _own(condition, exp.Predicate)))
        for sub in _own(condition, exp.Select):
            self._join(rows, self.query(sub))

    def groups(self, keys: list[exp.Expr], aliases: Mapping[str, str], rows: float) -> float:
        counts = []
        for key in keys:
            found = None
            if isinstance(key, exp.Column) and key.table in aliases:
                found = self.distinct(aliases[key.table], key.name)
            counts.append(found if found is not None else _UNKNOWN_DISTINCT)
        return min(rows, max(math.prod(counts), 1.0))

    def _join(self, probed: float, built: float) -> None:
        self.work.probe += probed
        self.work.probe_spill += probed * spilled_share(built)
        self.work.build += built

    def _group(self, rows: float, groups: float, keys: int, aggregates: int) -> None:
        # as ``server_time.plan_work`` prices a hash aggregate
        weight = (AGGREGATE_SHARE + max(aggregates, 1)) / (AGGREGATE_SHARE + 1)
        self.work.group_input += rows * weight
        self.work.group += groups * max(1, keys)
        self.work.group_spill += groups * max(1, keys) * spilled_share(groups)


def _own(node: exp.Expr, kind: type[exp.Expr]) -> Iterator[exp.Expr]:
    """The nodes of ``kind`` in ``node`` outside its subqueries (a subquery's own SELECT is
    yielded when ``kind`` is ``exp.Select``, its insides not)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, kind) and (current is not node or kind is not exp.Select):
            yield current
            if isinstance(current, exp.Select):
                continue
        elif isinstance(current, exp.Select) and current is not node:
            continue
        stack.extend(current.iter_expressions())


def _passed_on(item: exp.Expr) -> bool:
    inner = item.this if isinstance(item, exp.Alias) else item
    return isinstance(inner, exp.Column | exp.Star | exp.Literal)
