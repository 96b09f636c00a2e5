"""The cost of a split plan, in seconds: MONOMI's cost model (§6.4) over measured constants.

A plan's cost is the sum over its steps (a scan, or a server join: one
statement each, plus the blocks a BLOCKS column reads) of

- server time: from the backend optimizer's own plan of the statement
  (``Backend.estimate``). Where it lists its operators and the calibration
  priced each kind of work (DuckDB), their work with the planner's rows
  (``veil.cost.server_time``) plus the time planning it takes; else its cost
  units (PostgreSQL's) times the calibrated seconds per unit. Plus one
  statement's round trip;
- transfer: the result's bytes (estimated rows times each fetched column's
  width, ``veil.sql.widths``) at the calibrated fetch speed of this link, plus
  the time on a slower network link if one is given (``--bandwidth``);
- decryption: the rows times each fetched column's calibrated cost per value;

plus the local DuckDB plan: the fetched rows times its calibrated cost per row.
The rows a statement returns are the smaller of the server's estimate and the
planner's from the load's statistics (``estimate_rows``, ``pushdown_joins``). The
constants come from ``veil.cost.calibration``. A step thinned by run-time bind
filters keeps a guessed ``BIND_KEPT`` of its rows (their keys are known only once
their sources are fetched).
"""

from __future__ import annotations

from dataclasses import dataclass

from veil.backends.base import BackendError, Estimate
from veil.cost.calibration import Calibration
from veil.cost.context import CostContext
from veil.cost.local_time import local_work
from veil.cost.server_time import OperatorCosts, Work, plan_work
from veil.design.model import DET, OPE
from veil.sql.plan import ASHE_MASK, JoinedFetch, Scan, SplitPlan
from veil.sql.remote import joined_statement, render, scan_statement
from veil.sql.selectivity import ashe_pairs, ashe_runs, distinct_rows
from veil.sql.widths import encryption_width

# the share of a step's rows its bind filters keep, guessed: their keys exist only once
# their sources are fetched (TPC-H SF 1: Q20's lineitem keeps 1%, Q18's orders 0.004%,
# Q9's joins, before its LIKE was precomputed, 3%); one tenth, as PostgreSQL's default
# guess for an equality (DEFAULT_EQ_SEL is 0.005, DEFAULT_INEQ_SEL 1/3)
BIND_KEPT = 0.1
# named link speeds for ``--bandwidth`` (bits per second); "local" adds nothing to the
# link the calibration measured (a server on this machine)
BANDWIDTHS = {"local": None, "lan": 1e9, "monomi": 10e6}


@dataclass
class StepCost:
    """The estimated cost of one plan step (``key``: id of its scan or server join)."""

    key: int
    label: str
    rows: float
    bytes: float
    server_seconds: float
    transfer_seconds: float
    decrypt_seconds: float
    # the rows the local plan reads, when the client repeats fetched ones (``count_repeats``)
    local_rows: float | None = None
    # the client's own work around the statement: rendering it, binding its parameters,
    # handing its result to the local plan (``Calibration.step_seconds``)
    client_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        return (
            self.server_seconds + self.transfer_seconds + self.decrypt_seconds + self.client_seconds
        )


@dataclass
class PlanCost:
    steps: list[StepCost]
    local_seconds: float

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps) + self.local_seconds


def parse_bandwidth(text: str) -> float | None:
    """``local``, ``lan``, ``monomi`` (10 Mbit/s) or a number of Mbit/s -> bits per second."""
    named = text.strip().lower()
    if named in BANDWIDTHS:
        return BANDWIDTHS[named]
    try:
        mbit = float(named.removesuffix("mbit").removesuffix("mbit/s"))
    except ValueError:
        raise ValueError(
            f"bandwidth {text!r} is neither a number of Mbit/s nor one of {', '.join(BANDWIDTHS)}"
        ) from None
    if mbit <= 0:
        raise ValueError(f"bandwidth {text!r} must be positive")
    return mbit * 1e6


def plan_steps(plan: SplitPlan) -> list[tuple[int, str, Scan | JoinedFetch]]:
    """The plan's steps in order: ``(key, label, scan or server join)``, one statement each."""
    steps: list[tuple[int, str, Scan | JoinedFetch]] = []
    for scan in plan.scans:
        if scan.same_rows is not None:
            continue  # no statement of its own
        if scan.joined is not None:
            if scan is scan.joined.scans[0]:
                names = ", ".join(f"{s.table.name} as {s.alias}" for s in scan.joined.scans)
                steps.append((id(scan.joined), f"server join of {names}", scan.joined))
            continue
        steps.append((id(scan), f"table {scan.table.name} as {scan.alias}", scan))
    return steps


def estimate_plan(
    session: CostContext, plan: SplitPlan, calibration: Calibration, bandwidth: float | None = None
) -> PlanCost:
    """The estimated cost of running ``plan`` (``bandwidth``: a network link's bits/s)."""
    everywhere = _filtered(plan.scans)  # reduction partners' tables are scanned elsewhere
    steps = [
        _step_cost(session, key, label, step, calibration, bandwidth, everywhere)
        for key, label, step in plan_steps(plan)
    ]
    return PlanCost(steps, _local_seconds(plan, steps, calibration))


def _local_seconds(plan: SplitPlan, steps: list[StepCost], calibration: Calibration) -> float:
    """The local plan's time (``veil.cost.local_time``): its late subqueries over their
    scans' rows, then the plan over every fetched table, plus planning it."""
    costs = OperatorCosts.from_ns(calibration.local_operator_ns)
    if costs is None:  # a calibration without local operator costs: a pass per row
        fetched = sum(s.rows if s.local_rows is None else s.local_rows for s in steps)
        return calibration.local_statement_seconds + fetched * calibration.local_ns_per_row * 1e-9
    by_key = {s.key: s for s in steps}
    rows: dict[str, float] = {}
    for key, _, step in plan_steps(plan):
        cost = by_key[key]
        count = cost.rows if cost.local_rows is None else cost.local_rows
        for scan in step.scans if isinstance(step, JoinedFetch) else [step]:
            rows[scan.local_name] = count
    for scan in plan.scans:
        if scan.same_rows is not None:
            rows[scan.local_name] = rows.get(scan.same_rows.local_name, 0.0)
    owners = {scan.local_name: scan for scan in plan.scans}
    work = Work()
    for scan in plan.scans:
        for late in scan.late:
            late_work, rows[late.local_name] = local_work(late.query, rows)
            work.add(late_work)
    distinct = lambda name, column: _distinct(owners, name, column)  # noqa: E731
    work.add(local_work(plan.local, rows, distinct)[0])
    nodes = sum(1 for _ in plan.local.walk())
    planning = calibration.local_statement_seconds + nodes * calibration.local_ns_per_node * 1e-9
    return planning + work.seconds(costs)


def _distinct(owners: dict[str, Scan], name: str, column: str) -> float | None:
    """The distinct values the load recorded for a fetched table's column, if any."""
    scan = owners.get(name)
    if scan is None:
        return None
    for enc in scan.table.encryptions:
        distinct = enc.params.get("distinct")
        if enc.source == column and isinstance(distinct, int) and distinct > 0:
            return float(distinct)
    return None


def _step_cost(
    session: CostContext,
    key: int,
    label: str,
    step: Scan | JoinedFetch,
    calibration: Calibration,
    bandwidth: float | None,
    everywhere: dict[str, float],
) -> StepCost:
    scans = step.scans if isinstance(step, JoinedFetch) else [step]
    if isinstance(step, JoinedFetch):
        statement = joined_statement(step)
        encs = decrypted = [enc for _, _, enc in step.fetched()]
    else:
        statement = scan_statement(step)
        encs = [enc for _, enc in step.fetched()]
        # columns left encrypted on the client are fetched, not decrypted
        decrypted = [enc for column, enc in step.fetched() if column not in step.ciphertext]
    backend = session.backend
    sql, params = render(statement, backend)
    operators = OperatorCosts.from_ns(calibration.operator_ns)
    try:
        estimate = backend.estimate(sql, params or None)
        rows = estimate.rows
        if estimate.operators is not None and (operators is not None or estimate.costed_operators):
            filtered = everywhere | _filtered(scans)
            joined = step.joined_rows if isinstance(step, JoinedFetch) else None
            if operators is not None:  # each kind of work at its calibrated cost
                shares = _read_shares(estimate, scans)
                work = plan_work(estimate.operators, filtered, shares, joined, _groups(step))
                # and planning it again: the EXPLAIN's own time, less a statement's round trip
                planning = max(0.0, estimate.planning - calibration.statement_seconds)
                server = work.seconds(operators) + planning
            else:  # the optimizer's own cost of each node, scaled by the planner's rows
                work = plan_work(estimate.operators, filtered, {}, joined, _groups(step))
                server = work.cost * calibration.server_seconds_per_cost
                server += work.built_spill * calibration.build_ns * 1e-9
                server += work.lookups * calibration.lookup_ns * 1e-9
            # compiling it first, where the server's JIT does (PostgreSQL past a cost)
            server += calibration.compile_seconds(estimate.jit_functions, estimate.jit_optimized)
        else:
            cost = (estimate.cost or estimate.rows) - _skipped(estimate, scans)
            server = cost * calibration.server_seconds_per_cost
    except BackendError:  # a statement the optimizer cannot explain: count its tables' rows
        rows = float(max(s.table.row_count for s in scans))
        server = rows * calibration.server_seconds_per_cost
    if step.estimated_rows is not None:
        # the planner's, from the plaintext's statistics. A lone scan's is whole (its
        # filters' quantiles and counts), where the server guesses over ciphertexts
        # (DuckDB: 20% of lineitem for Q1's shipdate range, which keeps 98%), and so is
        # its semi-join's share; with bind filters, which the planner leaves out, or a
        # server join, the smaller is nearer
        # (a server join's groups: the planner's, DuckDB's guess was 462 for Q16's 18,314)
        joined = isinstance(step, JoinedFetch) and step.groups is None
        thinned = joined or any(_keyed(s) for s in scans)
        rows = min(rows, step.estimated_rows) if thinned else step.estimated_rows
    if any(_keyed(s) for s in scans):
        rows *= BIND_KEPT  # keys known only at run time: a guess
    local_rows = None
    if step.counted:  # each distinct row once: at most the columns' distinct counts multiplied
        local_rows = rows
        rows = min(rows, distinct_rows(encs) or rows)
    width = sum(encryption_width(enc) for enc in encs)
    size = rows * width
    aggregation = step.aggregation if isinstance(step, Scan) else None
    groups = step.groups if isinstance(step, JoinedFetch) else None
    words, runs = 0, 0.0
    if isinstance(step, Scan) and aggregation is not None and aggregation.id_bit is not None:
        # ASHE: a row per group and block of 64 row ids (DuckDB estimates a row per group)
        rows, runs = _ashe_rows(step, aggregation.keys)
        layout = [name for name, _ in aggregation.fetched(step.table)]
        words = len(layout) - layout.index(ASHE_MASK) - 1
    elif groups is not None and groups.summed is not None:  # the same over a server join
        rows = groups.estimated_rows if groups.estimated_rows is not None else rows
        runs = groups.estimated_runs if groups.estimated_runs is not None else rows
        words = len(groups.ashe_words())
    ashe = 0.0
    if words:  # each word's sums lose two pads per run of summed ids
        size = rows * width
        ashe = runs * words * calibration.ashe_ns_per_run * 1e-9
        ashe += calibration.local_statement_seconds  # the groups re-aggregated locally
    link = size * 8 / bandwidth if bandwidth else 0.0
    decrypt = ashe + sum(calibration.decrypt_seconds(enc, rows) for enc in decrypted)
    return StepCost(
        key=key,
        label=label,
        rows=rows,
        bytes=size,
        server_seconds=calibration.statement_seconds + server,
        transfer_seconds=(
            size * calibration.fetch_ns_per_byte + rows * calibration.fetch_ns_per_row
        )
        * 1e-9
        + link,
        decrypt_seconds=decrypt,
        local_rows=local_rows,
        client_seconds=calibration.step_seconds,
    )


def _groups(step: Scan | JoinedFetch) -> float | None:
    """The planner's rows for a grouped statement's groups: ASHE's (group, block) pairs, or
    a grouped server join's groups; None for any other statement."""
    if isinstance(step, JoinedFetch):
        return step.estimated_rows if step.groups is not None else None
    if step.aggregation is not None and step.aggregation.id_bit is not None:
        return _ashe_rows(step, step.aggregation.keys)[0]
    return None


def _filtered(scans: list[Scan]) -> dict[str, float]:
    """Per server table, the rows its scans' own filters keep (the most, for a table scanned
    under several names); a scan with bind filters keeps ``BIND_KEPT`` of them."""
    rows: dict[str, float] = {}
    for scan in scans:
        if scan.filtered_rows is not None:
            kept = scan.filtered_rows * (BIND_KEPT if _keyed(scan) else 1.0)
            name = scan.table.server_name
            rows[name] = max(rows.get(name, 0.0), kept)
    return rows


def _skipped(estimate: Estimate, scans: list[Scan]) -> float:
    """The cost of the blocks of rows the server skips by their min/max but priced."""
    if not estimate.block_rows or not estimate.cost:
        return 0.0
    return sum(
        estimate.scanned.get(table, 0.0) * (1.0 - share)
        for table, share in _read_shares(estimate, scans).items()
    )


def _read_shares(estimate: Estimate, scans: list[Scan]) -> dict[str, float]:
    """Per server table, the share of its rows the server reads, where it skips the rest.

    A table ordered by a column (``TableDesign.sort_by``) within each of its
    clusters keeps a range of it in one stretch of blocks per cluster: the
    server reads the range's share of the blocks, plus part of a block at each
    end of each stretch (TPC-H Q6 reads about a seventh of lineitem).
    """
    if not estimate.block_rows:
        return {}
    tables = [s.table.server_name for s in scans]
    shares: dict[str, float] = {}
    for scan in scans:
        if tables.count(scan.table.server_name) > 1:
            continue
        if scan.zone_share is not None and _zone_rows(scan) == estimate.block_rows:
            shares[scan.table.server_name] = scan.zone_share  # the blocks as loaded
        elif scan.read_share is not None:
            rows = max(scan.table.row_count, 1)
            stretches = _clusters(scan) * estimate.block_rows / rows  # half a block each end
            shares[scan.table.server_name] = min(1.0, scan.read_share + stretches)
    return shares


def _zone_rows(scan: Scan) -> int | None:
    """The rows of each zone the load recorded for ``scan``'s table (``veil.load.zones``)."""
    for enc in scan.table.encryptions:
        rows = enc.params.get("zone_rows")
        if isinstance(rows, int):
            return rows
    return None


def _clusters(scan: Scan) -> float:
    """How many clusters the table's rows form (``veil.load.clusters``): its keys' distinct
    counts multiplied, or one."""
    return distinct_rows([scan.table.find(key, DET) for key in scan.table.cluster_by]) or 1.0


def _ashe_rows(scan: Scan, keys: list[str]) -> tuple[float, float]:
    """(group, block) rows, the pairs of a block of 64 row ids and a group with a kept row,
    and their runs of summed ids (``ashe_runs``).

    The groups are the keys' distinct counts multiplied, as recorded at load;
    kept rows fall in blocks at random, so a pair is non-empty with probability
    ``1 - (1 - p / groups) ** 64`` (``p``: the share of rows kept). A table
    clustered by the keys (``TableDesign.cluster_by``) has each block in one
    group; a table ordered by a filtered column (``TableDesign.sort_by``) has
    the kept rows within the filter's stretch of ids. The server's own
    estimate of a GROUP BY over ciphertexts is no guide: DuckDB gave Q6 ten
    times its 42K block rows (before ordered loads)."""
    groups = 1.0
    clustered = bool(scan.table.cluster_by) and set(scan.table.cluster_by) <= set(keys)
    for key in [] if clustered else keys:
        enc = scan.table.find(key, DET)
        distinct = enc.params.get("distinct") if enc is not None else None
        groups *= float(distinct) if isinstance(distinct, int) else 100.0
    rows = float(max(scan.table.row_count, 1))
    kept = scan.kept_rows if scan.kept_rows is not None else rows
    if scan.read_share is not None:  # rows ordered by a filtered column: kept ones lie in
        rows = max(rows * scan.read_share, 1.0)  # its range's stretch of ids (per cluster)
    return ashe_pairs(rows, kept, groups), ashe_runs(rows, kept, groups)


def _keyed(scan: Scan) -> bool:
    """Whether key lists filter ``scan``: a key range (OPE, ``plan_key_ranges``) only
    skips blocks of rows its semi-join would drop anyway, and keeps the rows it keeps."""
    return any(b.target_enc.scheme != OPE for b in scan.binds)
