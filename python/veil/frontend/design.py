"""``veil design``: MONOMI's cost-based designer over a loaded client directory (§6).

It joins the designer's parts to the running system:

1. candidates (``veil.designer.candidates``): the workload's greedy design
   taken apart, under the client directory's server names and statistics;
2. per query, its plan alternatives (``veil.designer.enumerate``): the real
   planner (``plan_query``) under the design restricted to each subset of
   candidates, costed by ``veil.cost.model`` with this directory's
   calibration, plus the fetch-everything plan;
3. the ILP (``veil.designer.ilp``) choosing one plan per query under the
   space budget.

The client directory supplies what estimates need: row counts and the
load's statistics, the server's optimizer (for encryptions it stores; for
others it cannot explain a statement, and the estimate falls back to the
planner's rows), and the calibration (measured on first use). Nothing is
written to the server.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from sqlglot import exp

from veil.backends import Backend
from veil.backends.base import BackendError, Estimate
from veil.ciphers.columns import available_schemes
from veil.cost.calibration import CLASS_PREFIX, Calibration, calibration_of
from veil.cost.model import estimate_plan, plan_steps
from veil.design.fresh import fresh_design
from veil.design.model import RND, Encryption, PhysicalDesign, TableDesign
from veil.design.policy import Policy
from veil.designer.candidates import (
    ASHE,
    CandidateSet,
    candidate_key,
    collect_candidates,
    stored_column_bytes,
)
from veil.designer.enumerate import FETCH_ALL, Alternative, Evaluated, alternatives
from veil.designer.greedy import greedy_design
from veil.designer.ilp import Change, Problem, Solution, solve
from veil.designer.prune import server_columns
from veil.load.redesign import design_changes
from veil.session.session import Session
from veil.sql.parse import parse_statement
from veil.sql.plan import JoinedFetch, SplitPlan
from veil.sql.planner import plan_fetch_all, plan_query


@dataclass
class QueryChoice:
    sql: str
    weight: float
    chosen: Alternative
    fetch_all_seconds: float
    alternatives: int
    # the plan the planner makes under the whole chosen design (which other queries' needs
    # enlarge): one plan per query is MONOMI's approximation, this shows where it slips
    run_time_seconds: float = 0.0


@dataclass
class DesignReport:
    design: PhysicalDesign  # fresh names, ready for ``veil load --design``
    queries: list[QueryChoice]
    solution: Solution
    problem: Problem
    budget: float | None
    seconds: dict[str, float]  # the designer's own time: candidates, plans, ILP
    # sizes and the budget in bytes on the server's disk (DuckDB, plaintext measured at
    # load), not the values' widths (``collect_candidates``)
    on_disk: bool = False

    @property
    def space_factor(self) -> float:
        return self.solution.space_factor(self.problem)

    @property
    def greedy_factor(self) -> float:
        """The greedy design's size in the same units: every candidate but the RND forms."""
        problem = self.problem
        optional = sum(size for key, size in problem.sizes.items() if not key.startswith(RND))
        return (problem.fixed_bytes + optional) / problem.plain_bytes


def design_workload(
    session: Session,
    queries: list[str],
    budget: float | None,
    *,
    bandwidth: float | None = None,
    weights: list[float] | None = None,
    policy: Policy | None = None,
    progress: Callable[[str], None] | None = None,
    current: PhysicalDesign | None = None,
    rebuild_seconds_per_byte: float = 0.0,
) -> DesignReport:
    """The cheapest design for ``queries`` within ``budget`` × plaintext (None: unbounded).

    ``current``: the design the data is stored under now (``veil design --from``); each
    table the new design changes is rebuilt, at ``rebuild_seconds_per_byte`` of workload
    time per byte it writes (0: among equally fast designs, the one rebuilding less).
    """
    weights = weights or [1.0] * len(queries)
    if len(weights) != len(queries):
        raise ValueError(f"{len(weights)} weights for {len(queries)} queries")
    say = progress or (lambda _: None)
    times: dict[str, float] = {}
    started = time.perf_counter()
    policy = policy or session.client.policy()
    candidates = _candidates(session, queries, policy)
    times["candidates"] = time.perf_counter() - started
    calibration = _by_kind(calibration_of(session, progress=say))
    times["calibration"] = time.perf_counter() - started - times["candidates"]
    planner = _Planner(session, candidates, calibration, bandwidth)
    plans = []
    for number, sql in enumerate(queries, 1):
        say(f"planning query {number} of {len(queries)}")
        plans.append(alternatives(parse_statement(sql), candidates, planner.evaluate))
    times["plans"] = planner.seconds
    problem = Problem(
        sizes={k: c.bytes for k, c in candidates.candidates.items()},
        plans=plans,
        weights=weights,
        fetch_pairs=candidates.fetch_pairs,
        fixed_bytes=candidates.fixed_bytes,
        plain_bytes=candidates.plain_bytes,
        change=_change(current, candidates, rebuild_seconds_per_byte) if current else None,
    )
    solution = solve(problem, budget)
    times["ilp"] = solution.solve_seconds
    times["total"] = time.perf_counter() - started
    chosen = [
        QueryChoice(sql, w, plan, _fetch_all(options), len(options))
        for sql, w, plan, options in zip(queries, weights, solution.plans, plans, strict=True)
    ]
    for choice in chosen:
        tree = parse_statement(choice.sql)
        choice.run_time_seconds = planner.evaluate(solution.enabled, tree).seconds
    design = fresh_design(candidates.restrict(solution.enabled), session.design.key_fingerprint)
    return DesignReport(design, chosen, solution, problem, budget, times, candidates.on_disk)


def _candidates(session: Session, queries: list[str], policy: Policy) -> CandidateSet:
    schema = {
        n: [dataclasses.replace(c) for c in t.columns] for n, t in session.design.tables.items()
    }
    # ℰ whole (MONOMI §6.2): a plan under a subset may read what none under all of it does
    greedy = greedy_design(
        schema,
        queries,
        available_schemes(),
        session.design.key_fingerprint,
        policy=policy,
        prune=False,
    )
    stored = stored_column_bytes(session.design, session.backend)
    return collect_candidates(greedy, session.design, policy, stored)


def _change(current: PhysicalDesign, candidates: CandidateSet, seconds_per_byte: float) -> Change:
    """``current`` in the ILP's terms; tables whose fixed part changes are rebuilt anyway."""
    kept = stored_candidates(current) & set(candidates.candidates)
    forced = {c.table for c in design_changes(current, candidates.restrict(set(kept)))}
    return Change(
        kept=kept,
        table_of={k: c.table for k, c in candidates.candidates.items()},
        table_bytes=candidates.table_bytes,
        forced=frozenset(forced),
        seconds_per_byte=seconds_per_byte,
    )


def stored_candidates(design: PhysicalDesign) -> frozenset[str]:
    """The candidate keys of what ``design`` stores (``veil.designer.candidates``)."""
    keys = {
        candidate_key(t.name, e.source, e.scheme)
        for t in design.tables.values()
        for e in t.encryptions
    }
    keys |= {candidate_key(t.name, s, ASHE) for t in design.tables.values() for s in _sums_of(t)}
    return frozenset(keys)


def _sums_of(table: TableDesign) -> list[str]:
    return list(table.sums.sources) if table.sums is not None else []


def _by_kind(calibration: Calibration) -> Calibration:
    """The calibration's costs per kind of column only: a candidate's server name may be
    that of another scheme's column (``CandidateSet.restrict``), so per-name figures would lie."""
    kinds = {k: v for k, v in calibration.decrypt_ns.items() if k.startswith(CLASS_PREFIX)}
    return dataclasses.replace(calibration, decrypt_ns=kinds)


def _fetch_all(options: list[Alternative]) -> float:
    return next(a.seconds for a in options if a.summary == FETCH_ALL)


class _Planner:
    """Plans a query under a subset of the candidates and prices the plan (``Evaluate``)."""

    def __init__(
        self,
        session: Session,
        candidates: CandidateSet,
        calibration: Calibration,
        bandwidth: float | None,
    ):
        self.session, self.candidates = session, candidates
        self.calibration, self.bandwidth = calibration, bandwidth
        self.context = DesignContext(session, candidates.design)
        self.estimating = cast(Session, _Estimating(session.backend))
        self.seconds = 0.0

    def evaluate(self, subset: set[str] | None, tree: exp.Expr) -> Evaluated:
        started = time.perf_counter()
        design = self.candidates.restrict(subset or set())
        if subset is None:
            plan = plan_fetch_all(tree, design)
        else:
            plan = plan_query(tree, design, self.context)
        cost = estimate_plan(self.estimating, plan, self.calibration, self.bandwidth)
        evaluated = Evaluated(cost.seconds, frozenset(server_columns(plan)), plan_summary(plan))
        self.seconds += time.perf_counter() - started
        return evaluated


class _Estimating:
    """What ``estimate_plan`` reads of a session (its backend), with each statement's
    estimate asked once: the subsets of one query repeat most statements."""

    def __init__(self, backend: Backend):
        self.backend = _MemoBackend(backend)


class _MemoBackend:
    def __init__(self, backend: Backend):
        self._backend = backend
        self._estimates: dict[str, Estimate | BackendError] = {}

    def estimate(self, sql: str, params: list[object] | None = None) -> Estimate:
        key = f"{sql}\x00{params!r}"
        if key not in self._estimates:
            try:
                self._estimates[key] = self._backend.estimate(sql, params)
            except BackendError as exc:
                self._estimates[key] = exc
        found = self._estimates[key]
        if isinstance(found, BackendError):
            raise found
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


def plan_summary(plan: SplitPlan) -> str:
    """One line: how much of the query the server runs."""
    if not plan.pushdown:
        return FETCH_ALL
    steps = plan_steps(plan)
    filters = sum(len(s.predicates) for s in plan.scans)
    joins = sum(1 for _, _, step in steps if isinstance(step, JoinedFetch))
    grouped = sum(1 for s in plan.scans if s.aggregation is not None)
    parts = [f"{len(steps)} statement(s)", f"{filters} server filter(s)"]
    parts += [f"{joins} server join(s)"] if joins else []
    parts += [f"{grouped} server aggregate(s)"] if grouped else []
    return ", ".join(parts)


class DesignContext:
    """The session's server context for designs it does not store (``ServerContext``).

    Constants are encrypted under the candidate design's keys: a candidate's
    owner table comes from that design, not from the session's.
    """

    def __init__(self, session: Session, design: PhysicalDesign):
        self.session = session
        self.hom_pushdown = session.hom_pushdown
        self.join_sums = session.join_sums
        self.owners: dict[str, TableDesign] = {
            e.name: t for t in design.tables.values() for e in t.encryptions
        }

    def encrypt_constant(self, node: exp.Expr, enc: Encryption) -> object | None:
        encoded = self.session.encoded_constant(node, enc)
        if encoded is None:
            return None
        return self.session.ciphers.get(self.owners[enc.name], enc).encrypt_one(encoded)

    def encoded_constant(self, node: exp.Expr, enc: Encryption) -> int | bytes | None:
        return self.session.encoded_constant(node, enc)

    def search_token(self, word: str, enc: Encryption) -> bytes:
        cipher = self.session.ciphers.get(self.owners[enc.name], enc)
        return cipher.token(word)  # type: ignore[attr-defined]

    def expression_type(self, node: exp.Expr, table: str, alias: str) -> str | None:
        return self.session.expression_type(node, table, alias)

    def search_match(self, ciphertexts: exp.Expr, token: exp.Expr) -> exp.Expr:
        return self.session.search_match(ciphertexts, token)

    def hom_product(self, ciphertexts: exp.Expr, table: TableDesign) -> exp.Expr:
        return self.session.hom_product(ciphertexts, table)

    def id_bit(self, position: exp.Expr) -> exp.Expr:
        return self.session.id_bit(position)

    def hashes_not_in(self) -> bool:
        return self.session.hashes_not_in()

    def correlates_deeply(self) -> bool:
        return self.session.correlates_deeply()

    def semi_joins_by_exists(self) -> bool:
        return self.session.semi_joins_by_exists()

    def scanned_rows_per_byte(self) -> float:
        return self.session.scanned_rows_per_byte()

    def wrapping_sum(self, value: exp.Expr) -> exp.Expr:
        return self.session.wrapping_sum(value)

    def extreme(self, kind: str, value: exp.Expr, enc: Encryption) -> exp.Expr:
        return self.session.extreme(kind, value, enc)
