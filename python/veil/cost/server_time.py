"""A statement's server time from its optimizer's operators, each kind priced by calibration.

DuckDB reports no cost, only each operator's estimated rows; one calibrated
cost per row handled (every operator alike) mispriced TPC-H by up to 5x
either way: a hash aggregate that creates a group per input row costs ~40
times a scanned row's expression (Q16's ``COUNT(DISTINCT)``: 25 ms for
118,000 rows), building a hash table ~70 times (Q9's orders, 1.5M rows: 54
ms), while a scan that zone maps let skip most of a table costs little.

So each kind of work has its own calibrated seconds (``OperatorCosts``,
measured by ``veil.cost.calibration`` from profiled statements on the
client directory's own server): a row through one expression (a scan's
filters on every row it reads, its columns on the rows they keep, a
projection's computed items), a row probing a hash
table, a row inserted into one, a row into a hash aggregate, a group it
creates, a row sorted. A join on one key probes only the rows that match:
DuckDB filters the probe side's scan by the keys of the built side (TPC-H
Q17's lineitem returns 6,088 of its 6M rows to the join; that filter is one
more expression on every row the scan reads), not on several (Q9's two keys:
all 6M probe, those that find no partner for a fifth of the cost).

The optimizer's rows are the other error: over ciphertexts it guesses a
filter's share (DuckDB: a fifth for any range) and carries the guess up
its joins. Where the planner knows better from the load's statistics (the
rows each table's own filters keep, the statement's result) its figures
replace the optimizer's, and every operator above a corrected input is
scaled by the same factor (a join's rows move with each input's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

from veil.backends.base import Operator

# a scan of a table the planner has no figure for (a server subquery's): DuckDB's own
# estimate, but no less than a third of the table (PostgreSQL's DEFAULT_INEQ_SEL) —
# DuckDB took TPC-H Q22's ``o_custkey = o_custkey`` (IS NOT NULL) for 11 rows of 1.5M
_UNKNOWN_SHARE = 1 / 3
# a row into a hash aggregate costs this many times what each of its aggregates adds
AGGREGATE_SHARE = 4.0
# a hash aggregate's table of up to this many groups stays in the caches; from the
# second, each group costs the out-of-cache price (``spilled_share``)
_CACHED_GROUPS = 16_384
_SPILLED_GROUPS = 1_048_576
# a scan reads its columns a vector of rows at a time (DuckDB's STANDARD_VECTOR_SIZE)
_VECTOR_ROWS = 2048


@dataclass(frozen=True)
class OperatorCosts:
    """Seconds per unit of each kind of server work (``Calibration.operator_ns`` / 1e9)."""

    expression: float  # a row through one expression (a scanned or computed column)
    filter: float  # a row a scan reads through one of its filters (or the built keys')
    filter_bytes: float  # ... through one comparing bytes (a ciphertext of text)
    probe: float  # a row probing a hash table in the caches
    probe_spill: float  # ... and more for a table out of them (``spilled_share`` of it)
    build: float  # a row inserted into a hash table
    group_input: float  # a row into a hash aggregate (or a sort)
    group: float  # a group a hash aggregate creates, per key column, in a table in cache
    # ... and more per group of a table out of the caches (``spilled_share`` of it)
    group_spill: float

    @classmethod
    def from_ns(cls, ns: Mapping[str, float]) -> OperatorCosts | None:
        """From a calibration's nanoseconds; None when any kind is missing (not measured)."""
        names = [f.name for f in fields(cls)]
        if not all(name in ns for name in names):
            return None
        return cls(**{name: float(ns[name]) * 1e-9 for name in names})


@dataclass
class Work:
    """How much of each kind of work a plan's operators do (the units of ``OperatorCosts``)."""

    expression: float = 0.0
    filter: float = 0.0
    filter_bytes: float = 0.0
    probe: float = 0.0
    probe_spill: float = 0.0
    build: float = 0.0
    group_input: float = 0.0
    group: float = 0.0
    group_spill: float = 0.0
    # the optimizer's own cost units, each node's scaled as its inputs' rows were
    # corrected (PostgreSQL; priced by ``Calibration.server_seconds_per_cost``)
    cost: float = 0.0
    # rows built into hash tables, each counted for how far its table is out of the caches
    # (``spilled_share``): PostgreSQL's own cost leaves that out (priced by
    # ``Calibration.build_ns``)
    built_spill: float = 0.0
    # a nested loop's runs of its inner side (its outer rows), each an index lookup that
    # PostgreSQL prices as cached pages (priced by ``Calibration.lookup_ns``)
    lookups: float = 0.0

    def add(self, other: Work) -> None:
        for f in fields(Work):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def seconds(self, costs: OperatorCosts) -> float:
        return sum(getattr(self, f.name) * getattr(costs, f.name) for f in fields(OperatorCosts))


def plan_work(
    root: Operator,
    filtered: Mapping[str, float] | None = None,
    read: Mapping[str, float] | None = None,
    joined_rows: float | None = None,
    groups: float | None = None,
    counted: bool = False,
) -> Work:
    """The work of the plan under ``root``.

    ``filtered``: per server table, the rows its own filters keep (the
    planner's figure: it replaces the optimizer's for the operators that
    read that table alone, its scan and the filters and semi-joins over it);
    ``read``: per server table, the share of its rows the server reads (the
    rest skipped by min/max); ``joined_rows``: the planner's rows for the
    statement's join (its topmost); ``groups``: the planner's for its topmost
    aggregate's groups; ``counted``: the operators' rows were counted by
    running the statement (``Backend.profile``), not estimated.
    """
    work = Work()
    known = {} if counted else dict(filtered or {})
    shares = read or {}
    pinned = joined_rows if not counted else None
    top = _topmost(root, "join")
    found = _topmost(root, "group")
    outermost = id(found) if found is not None else None

    def walk(op: Operator) -> tuple[float, float, frozenset[str]]:
        """(the rows ``op`` returns, the factor over the optimizer's, the tables it reads)"""
        if op.kind == "scan":
            table = op.table or ""
            work.cost += op.cost  # reading the table: whatever its filters keep
            if op.per_loop:  # one run's rows of many: as the optimizer has them
                rows = op.rows
            elif counted or table in known:
                rows = known.get(table, op.rows)
            else:  # a table the planner has no figure for
                rows = max(op.rows, op.table_rows * _UNKNOWN_SHARE) if op.table_rows else op.rows
            # every row read through the filters (at least one pass), the kept ones out
            scanned = op.table_rows * shares.get(table, 1.0)
            if op.expressions:
                passes = scanned * _filtered_passes(op.expressions, rows, scanned)
                on_bytes = op.byte_filters / op.expressions
                work.filter += passes * (1.0 - on_bytes)
                work.filter_bytes += passes * on_bytes
            else:  # a pass over the rows it reads
                work.expression += scanned
            work.expression += column_rows(rows, scanned) * op.columns
            return rows, _factor(rows, op.rows), frozenset([table])
        inputs = [walk(child) for child in op.children]
        factor = 1.0
        tables: frozenset[str] = frozenset()
        for _, child_factor, child_tables in inputs:
            factor *= child_factor
            tables |= child_tables
        first = inputs[0][0] if inputs else 0.0
        rows = op.rows * factor
        estimated = sum(child.rows for child in op.children)
        work.cost += op.cost * (_factor(sum(r for r, _, _ in inputs), estimated) if inputs else 1)
        if op.kind == "join":
            if op.bounded:
                rows = min(rows, first)
            if op.composite and not counted:  # a key on several columns: a row per outer row
                rows = max(rows, first)
            # the build's keys filter the probe's scan: only its rows that match probe
            # (counted rows are those the scan returned, after that filter)
            filters = not counted and op.expressions == 1 and not op.marks
            matched = min(first, rows)
            # a probe that finds no partner costs what one that does costs, hashing its keys
            # and one lookup (TPC-H Q21's 3.8M for 14K matches, 13.7 ns of threads a row,
            # Q9's 6M for 319K 10.7 ns; the calibration's, all matching, 7.4)
            probed = matched if filters else first
            built = sum(r for r, _, _ in inputs[1:])
            work.probe += probed  # each a cache miss once the built table outgrows them
            work.probe_spill += probed * spilled_share(built)
            if filters and op.children:  # ... tests the rows its own filters kept against
                # those keys (after them: TPC-H Q3's lineitem tests its 3.2M shipped rows of
                # 6M), and reads its columns in the vectors where some match
                columns, scanned, passed = _probed_scan(op.children[0], shares)
                # filters between the scan and the join (TPC-H Q19's on lineitem's ship
                # instructions) come after the keys' test: the scan keeps more than they pass
                kept = min(first / passed, scanned) if passed > 0 else scanned
                found = min(matched / passed, kept) if passed > 0 else kept
                work.filter += kept
                work.expression -= (
                    column_rows(kept, scanned) - column_rows(found, scanned)
                ) * columns
            work.build += built
            if op.hashed:  # the rows a hash table takes past the caches (PostgreSQL's cost
                work.built_spill += built * spilled_share(built)  # prices none of it)
            elif len(op.children) > 1 and op.children[1].per_loop:
                work.lookups += first  # a nested loop: an inner run per outer row
        elif op.kind == "group":
            # each aggregate adds a fifth of a row's cost (measured with one: a count);
            # Q1's eleven: 15 ns a row, where a count of 16 groups takes 5 (summed threads)
            work.group_input += (
                first * (AGGREGATE_SHARE + max(op.expressions, 1)) / (AGGREGATE_SHARE + 1)
            )
            rows = min(rows, first) if inputs else rows
            if id(op) == outermost and groups is not None and not counted:
                rows = groups
            # a group costs per key column (measured on one: Q16's four ciphertext keys
            # of 118K groups took 240 ns a group, summed over threads)
            work.group += rows * max(1, op.columns)
            work.group_spill += rows * max(1, op.columns) * spilled_share(rows)
        elif op.kind == "sort":
            work.group_input += first
            rows = min(rows, first) if inputs else rows
        else:
            work.expression += first * op.expressions
            rows = min(rows, first) if inputs else rows
        if op.kind != "group" and len(tables) == 1 and next(iter(tables)) in known:
            rows = known[next(iter(tables))]  # filters of one table: the planner's figure
        elif pinned is not None and id(op) in joined:
            rows = pinned  # the join and the filters over it: the planner's joined rows
        return rows, _factor(rows, op.rows), tables

    # the topmost join and the operators above it up to a grouping (a path from the root)
    path = (_path(root, top) or []) if top is not None else []
    while any(node.kind in ("group", "sort") for node in path):
        path = path[1:]
    joined = {id(node) for node in path}

    walk(root)
    return work


def _filtered_passes(filters: int, kept: float, scanned: float) -> float:
    """The filters a read row goes through, on average: DuckDB tests each filter on the rows
    the ones before it kept, so with each keeping an equal share of what ``filters``
    keep together, the k-th sees that share to the power k - 1 (TPC-H Q19's ten filters
    over lineitem: about two a row)."""
    share = min(1.0, kept / scanned) if scanned > 0 else 1.0
    if filters <= 1 or share >= 1.0:
        return float(max(filters, 1))
    each = share ** (1.0 / filters)
    return (1.0 - each**filters) / (1.0 - each)


def column_rows(kept: float, scanned: float) -> float:
    """The rows whose columns a scan reads when its filters keep ``kept`` of the ``scanned``:
    every row of each vector that keeps one, the kept rows taken as scattered (a filter on
    ciphertexts follows no order the table is stored in). TPC-H Q8's lineitem keeps 43,693
    of 6M rows and reads its six columns for nearly all of them: 2.1 ms a column, where
    priced on the kept rows the whole statement came to 14 ms for 24 measured."""
    if scanned <= 0 or kept >= scanned:
        return kept
    missed = (1.0 - kept / scanned) ** _VECTOR_ROWS  # a vector's chance to keep none
    return max(kept, scanned * (1.0 - missed))


def spilled_share(groups: float) -> float:
    """How far a hash table of ``groups`` entries (an aggregate's groups, a join's built
    rows) is out of the caches: 0 up to 16,384, 1 from a million, on a log scale between.
    TPC-H Q9's 319K rows probing orders' 287K took 40 ms of threads, 6M probing 43K
    rows 65 ms."""
    if groups <= _CACHED_GROUPS:
        return 0.0
    return min(1.0, math.log(groups / _CACHED_GROUPS) / math.log(_SPILLED_GROUPS / _CACHED_GROUPS))


def spent_by_kind(root: Operator) -> dict[str, tuple[float, float]]:
    """A profiled plan's (units of work, seconds spent) per kind: ``expression`` (scans,
    projections, filters), ``join`` (probes and builds) and ``group`` (its rows in; its
    groups apart, in ``groups``), each operator's own share (``Operator.seconds``)."""
    found: dict[str, list[float]] = {k: [0.0, 0.0] for k in ("expression", "join", "group")}
    found["groups"] = [0.0, 0.0]
    # units only: their seconds are in ``expression``'s and ``join``'s
    for part in ("filter", "filter_bytes", "probe", "probe_spill", "build"):
        found[part] = [0.0, 0.0]

    def visit(op: Operator) -> None:
        own = _own_work(op)
        if op.kind == "join":  # its probes and builds apart too (calibration fits them)
            found["join"][0] += own.probe + own.build
            found["join"][1] += op.seconds
            found["probe"][0] += own.probe
            found["probe_spill"][0] += own.probe_spill
            found["build"][0] += own.build
        elif op.kind in ("group", "sort"):
            found["group"][0] += own.group_input
            found["group"][1] += op.seconds
            found["groups"][0] += own.group  # groups times their keys
        else:  # a scan's time is its filters' and its columns' (calibration splits it)
            found["expression"][0] += own.expression
            found["expression"][1] += op.seconds
            found["filter"][0] += own.filter
            found["filter_bytes"][0] += own.filter_bytes
        for child in op.children:
            visit(child)

    visit(root)
    return {kind: (units, seconds) for kind, (units, seconds) in found.items()}


def _own_work(op: Operator) -> Work:
    """The work ``op`` itself does (its subtree's, less its children's), counted rows."""
    whole = plan_work(op, counted=True)
    for child in op.children:
        below = plan_work(child, counted=True)
        for f in fields(Work):
            setattr(whole, f.name, getattr(whole, f.name) - getattr(below, f.name))
    return whole


def _probed_scan(op: Operator, shares: Mapping[str, float]) -> tuple[int, float, float]:
    """The columns a scan returns, the rows it reads, and the share of the rows it keeps that
    the projections and filters over it pass on (the optimizer's); (0, 0, 1) when the probe
    side is no plain scan."""
    if op.kind == "scan":
        return op.columns, op.table_rows * shares.get(op.table or "", 1.0), 1.0
    if op.kind == "other" and len(op.children) == 1:
        columns, scanned, passed = _probed_scan(op.children[0], shares)
        below = op.children[0].rows
        return columns, scanned, passed * (min(op.rows / below, 1.0) if below > 0 else 1.0)
    return 0, 0.0, 1.0


def _topmost(root: Operator, kind: str) -> Operator | None:
    """The operator of ``kind`` nearest ``root`` (the first met breadth first), if any."""
    level = [root]
    while level:
        for node in level:
            if node.kind == kind:
                return node
        level = [child for node in level for child in node.children]
    return None


def _path(node: Operator, target: Operator) -> list[Operator] | None:
    """The operators from ``node`` down to ``target``, both included; None if not below."""
    if node is target:
        return [node]
    for child in node.children:
        below = _path(child, target)
        if below is not None:
            return [node, *below]
    return None


def _factor(rows: float, estimated: float) -> float:
    return rows / estimated if estimated > 0 else 1.0
