"""How many of a table's rows a pushed filter keeps: an estimate for the planner's byte counts.

From what the loader recorded in the client's design, never from the server:
DET columns' distinct counts (``params["distinct"]``) and OPE columns'
quantiles of their encoded values (``params["quantiles"]``, 33 points). TPC-H
Q14's ``l_shipdate`` in one month keeps 1/84 of lineitem, so a join with part
repeats part's columns on 75,000 rows, not on six million: ``pushdown_joins``
joins on the server instead of scanning lineitem twice.

The usual independence assumptions (System R): AND multiplies, OR adds.
Anything without statistics counts ``UNKNOWN``; an estimate only moves a
choice between plans that are all exact, never an answer.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable

from sqlglot import exp

from veil.design.model import DET, OPE, Encryption
from veil.sql.columns import BaseColumn, like_source, order_source
from veil.sql.plan import Scan
from veil.sql.rewrite_server import ServerContext
from veil.sql.text import text

UNKNOWN = 0.5  # a filter the statistics say nothing about
# ``IN (subquery)``: the share of rows whose key a subquery returns, guessed (its rows are
# not estimated). A subquery used so picks few keys (TPC-H SF 1: Q20's parts 1%, Q18's
# orders 0.004%), so its ``NOT IN`` keeps most rows (Q16's suppliers 99.95%); one tenth,
# as the planner guesses for bind filters' keys (``veil.cost.model.BIND_KEPT``)
SUBQUERY_KEYS = 0.1
UNKNOWN_RANK = -1.0  # ``fraction_below`` without statistics
_FLIPPED: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.GT: exp.LT,
    exp.GTE: exp.LTE,
    exp.LT: exp.GT,
    exp.LTE: exp.GTE,
}
_EQUAL = 0.1  # an equality on a column of unknown distinct count
_NULL = 0.05  # IS NULL


def kept_share(
    conjuncts: list[exp.Expr], scan: Scan, resolved: dict[int, BaseColumn], ctx: ServerContext
) -> float:
    """The estimated fraction of ``scan``'s rows for which all ``conjuncts`` hold (0..1).

    Bounds on one column combine into one range (``d >= X AND d < X + 1 month``
    keeps the rows between, not the product of the two halves); other filters of
    one and the same column keep the fewest rows any of them keeps, as one set of
    values within another does (the planner's implied copies restate a filter:
    TPC-DS q74's ``d_year IN (2001, 2002)`` and its readers' ``d_year = 2001 OR
    d_year = 2002`` kept 1/200 of date_dim, not 1/40,000, which priced 1.1M
    joined rows at 840 and joined customer's text onto each of them, 144 MB at
    SF 1); the rest multiply.
    """
    est = _Estimator(scan, resolved, ctx)
    ranges: dict[
        str, list[float]
    ] = {}  # column -> [share below the low end, share below the high end]
    one_column: dict[str, float] = {}  # column -> the fewest rows a filter of it alone keeps
    share = 1.0
    for node in conjuncts:
        bound = est.bound(node)
        if bound is None:
            kept = max(0.0, min(1.0, est.of(node)))
            columns = {text(c, None) for c in node.find_all(exp.Column)}
            if len(columns) == 1 and node.find(exp.Subquery, exp.Exists) is None:
                column = columns.pop()
                one_column[column] = min(one_column.get(column, 1.0), kept)
            else:
                share *= kept
            continue
        column, low, high = bound
        span = ranges.setdefault(column, [0.0, 1.0])
        span[0], span[1] = max(span[0], low), min(span[1], high)
    for low, high in ranges.values():
        share *= max(0.0, high - low)
    for kept in one_column.values():
        share *= kept
    return share


def rank_range(
    node: exp.Expr, scan: Scan, resolved: dict[int, BaseColumn], ctx: ServerContext
) -> tuple[str, float, float] | None:
    """A range filter on one OPE column with quantiles as quantile ranks: (the column, the
    share of rows below its low end, the share at or below its high end); else None."""
    return _Estimator(scan, resolved, ctx).bound(node)


class _Estimator:
    def __init__(self, scan: Scan, resolved: dict[int, BaseColumn], ctx: ServerContext):
        self.scan, self.resolved, self.ctx = scan, resolved, ctx

    def of(self, node: exp.Expr) -> float:
        if isinstance(node, exp.Paren):
            return self.of(node.this)
        precomputed = self.precomputed(node)
        if precomputed is not None:
            return precomputed
        if isinstance(node, exp.And):
            return self.of(node.this) * self.of(node.expression)
        if isinstance(node, exp.Or):
            return min(1.0, self.of(node.this) + self.of(node.expression))
        if isinstance(node, exp.Not):
            return 1.0 - self.of(node.this)
        handler = _HANDLERS.get(type(node))
        return handler(self, node) if handler is not None else UNKNOWN

    def precomputed(self, node: exp.Expr) -> float | None:
        """The share a filter the design precomputed keeps, as the load counted it: a
        workload's LIKE (NOT LIKE keeps the rows it fails for), or two columns compared
        (TPC-H Q9's ``p_name LIKE '%green%'`` keeps 5%, not ``UNKNOWN``'s half)."""
        negated = isinstance(node, exp.Like | exp.ILike) and bool(node.args.get("negate"))
        found = like_source(node, self.resolved) or order_source(node, self.resolved)
        if found is None or found[0] != self.scan.table.name:
            return None
        enc = self.scan.table.find(found[1], DET)
        kept = enc.params.get("kept") if enc is not None else None
        if not isinstance(kept, list) or len(kept) != 2:
            return None
        return float(kept[1] if negated else kept[0])

    def bound(self, node: exp.Expr) -> tuple[str, float, float] | None:
        """A range on one OPE column with statistics: (column, share below, share at or below)."""
        if isinstance(node, exp.Paren):
            return self.bound(node.this)
        if isinstance(node, exp.Between):
            column = node.this
            low = self.fraction_below(column, node.args["low"], inclusive=False)
            high = self.fraction_below(column, node.args["high"], inclusive=True)
        elif type(node) in _FLIPPED:
            column, constant, kind = node.this, node.expression, type(node)
            if not isinstance(column, exp.Column):
                column, constant, kind = constant, column, _FLIPPED[kind]
            if isinstance(constant, exp.Column):
                return None
            at = self.fraction_below(column, constant, inclusive=kind in (exp.LTE, exp.GT))
            low, high = (0.0, at) if kind in (exp.LT, exp.LTE) else (at, 1.0)
        else:
            return None
        if not isinstance(column, exp.Column) or UNKNOWN_RANK in (low, high):
            return None
        return text(column, None), low, high

    def encryption(self, node: exp.Expr, scheme: str) -> Encryption | None:
        ref = self.resolved.get(id(node)) if isinstance(node, exp.Column) else None
        if ref is None or ref.alias != self.scan.alias:
            return None
        return self.scan.table.find(ref.column, scheme)

    def fraction_below(self, node: exp.Expr, constant: exp.Expr, inclusive: bool) -> float:
        """Fraction of rows whose ``node`` is below (or at) ``constant``."""
        enc = self.encryption(node, OPE)
        points = enc.params.get("quantiles") if enc is not None else None
        value = self.ctx.encoded_constant(constant, enc) if enc is not None else None
        if not isinstance(points, list) or not isinstance(value, int) or len(points) < 2:
            return UNKNOWN_RANK
        return quantile_rank(points, value, inclusive)


def distinct_rows(encs: list[Encryption | None]) -> float | None:
    """The most distinct rows these columns can form: their distinct counts (recorded at
    load) multiplied; None when one has no count."""
    product = 1.0
    for enc in encs:
        distinct = enc.params.get("distinct") if enc is not None else None
        if not isinstance(distinct, int) or distinct <= 0:
            return None
        product *= distinct
    return product


def group_count(rows: float, distinct: list[float]) -> float:
    """Groups that ``rows`` rows form under keys of these distinct counts.

    Rows fall at random among the keys' combinations (``D``, the counts
    multiplied): ``D * (1 - (1 - 1/D) ** rows)`` of them are met, never more
    than the rows. TPC-H Q16: 30,000 combinations (sizes narrowed to its IN
    list's 8), 120,000 joined rows, 18,314 groups; DuckDB estimated 462.
    """
    combinations = max(math.prod(distinct), 1.0)
    if combinations <= 1.0:
        return min(rows, 1.0)
    met = combinations * -math.expm1(rows * math.log1p(-1.0 / combinations))
    return max(1.0, min(rows, met))


def ashe_pairs(rows: float, kept: float, groups: float) -> float:
    """(group, block of 64 row ids) pairs with a kept row: the rows an ASHE sum returns.

    ``kept`` of ``rows`` consecutive ids are kept at random, each in one of
    ``groups``: a pair is non-empty with probability ``1 - (1 - p / groups) ** 64``
    (``p``: the share kept); never more pairs than kept rows.
    """
    rows = max(rows, 1.0)
    share = min(1.0, kept / rows)
    hit = min(share / max(groups, 1.0), 1.0 - 1e-12)  # a (group, row) pair's chance
    pairs = rows / 64 * groups * -math.expm1(64 * math.log1p(-hit))
    return min(kept, pairs)


def ashe_runs(rows: float, kept: float, groups: float) -> float:
    """Runs of consecutive summed ids over all (group, block) pairs, as in ``ashe_pairs``:
    what removing an ASHE sum's pads costs (two pads a run, whatever its length).

    A block's 64 ids are each summed with chance ``q = p / groups``: a run
    starts at its first id with chance ``q`` and at each of the 63 others with
    ``q (1 - q)``. Q1's sums keep 98% of lineitem's clustered rows: 2.2 runs a
    block, where ids kept half at random make 16.
    """
    rows = max(rows, 1.0)
    share = min(1.0, kept / rows)
    hit = min(share / max(groups, 1.0), 1.0)
    runs = rows / 64 * groups * (hit + 63 * hit * (1.0 - hit))
    return min(kept, runs)


def quantile_rank(points: list[int], value: int, inclusive: bool) -> float:
    """The quantile rank of ``value`` among evenly spaced quantile ``points``."""
    steps = len(points) - 1
    if value < points[0] or (value == points[0] and not inclusive):
        return 0.0
    if value > points[-1] or (value == points[-1] and inclusive):
        return 1.0
    at = (bisect_right if inclusive else bisect_left)(points, value)
    low, high = points[at - 1], points[min(at, steps)]
    within = (value - low) / (high - low) if high > low else 0.0
    return (at - 1 + within) / steps


def _equality(est: _Estimator, node: exp.Expr) -> float:
    column = node.this if isinstance(node.this, exp.Column) else node.expression
    enc = est.encryption(column, DET)
    distinct = enc.params.get("distinct") if enc is not None else None
    equal = 1.0 / distinct if isinstance(distinct, int) and distinct > 0 else _EQUAL
    return 1.0 - equal if isinstance(node, exp.NEQ) else equal


def _in_list(est: _Estimator, node: exp.Expr) -> float:
    if node.args.get("query") is not None:
        return SUBQUERY_KEYS
    if not node.expressions:
        return UNKNOWN
    return min(1.0, len(node.expressions) * _equality(est, exp.EQ(this=node.this)))


def _range(est: _Estimator, node: exp.Expr) -> float:
    bound = est.bound(node)
    return UNKNOWN if bound is None else max(0.0, bound[2] - bound[1])


_HANDLERS: dict[type, Callable[[_Estimator, exp.Expr], float]] = {
    exp.EQ: _equality,
    exp.NEQ: _equality,
    exp.In: _in_list,
    exp.GT: _range,
    exp.GTE: _range,
    exp.LT: _range,
    exp.LTE: _range,
    exp.Between: _range,
    exp.Is: lambda _est, _node: _NULL,
}
