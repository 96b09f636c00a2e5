"""MONOMI's ILP (§6.5): one plan per query, the encryptions they need, under a space budget.

Variables: ``x[i][j]`` = 1 if query i runs plan j, ``e[k]`` = 1 if candidate k
is stored. Minimise ``Σ w_i · cost(i, j) · x[i][j]`` subject to

- one plan per query: ``Σ_j x[i][j] = 1``;
- a plan's encryptions are stored: ``x[i][j] ≤ e[k]`` for each k it needs
  (the disaggregated form of MONOMI's ``|P|·x ≤ Σ e``: the same integer
  solutions, a tighter relaxation, so HiGHS branches less);
- every column stays fetchable: ``e[DET c] + e[RND c] ≥ 1``;
- space: ``fixed + Σ_k size(k) · e[k] ≤ S × plaintext`` (none when unbounded).

Policy needs no constraint here: a candidate above its column's allowed layer
is never a candidate (``veil.designer.candidates``). A tiny price per byte
breaks ties between equally fast designs towards the smaller, and the
solution keeps only what the chosen plans read (plus a fetch form per
column), so nothing is stored that no chosen plan reads.

Solved with HiGHS (``highspy``, MIT licence), imported only when a design is
made.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from veil.design.model import DesignError
from veil.designer.enumerate import Alternative

# seconds per stored byte in the objective: a GB costs a millisecond, far below any plan's gain
_TIE_BREAK = 1e-12


class BudgetError(DesignError):
    """No design serving every query fits the space budget."""

    anchor = "design-budget"


@dataclass
class Problem:
    sizes: dict[str, float]  # candidate -> bytes stored
    plans: list[list[Alternative]]  # per query, its alternatives
    weights: list[float]
    fetch_pairs: dict[str, str]  # DET candidate -> its RND: one of the two is stored
    fixed_bytes: float
    plain_bytes: float
    change: Change | None = None  # design evolution: from what is stored now


@dataclass
class Change:
    """What is stored now (``veil design --from``), and what rebuilding a table costs.

    A table whose candidates change is rebuilt whole (``veil redesign``): ``r[t]`` = 1
    when any of its candidates is added or dropped. Each rebuilt byte costs
    ``seconds_per_byte`` of workload time (0: only ties go to the current design).
    """

    kept: frozenset[str]  # candidates the current design stores
    table_of: dict[str, str]  # candidate -> its table
    table_bytes: dict[str, float]  # bytes a rebuild of the table writes
    forced: frozenset[str] = frozenset()  # tables rebuilt whatever is chosen
    seconds_per_byte: float = 0.0


@dataclass
class Solution:
    chosen: list[int]  # per query, the index of its plan in ``Problem.plans[i]``
    enabled: set[str]
    seconds: float  # the weighted estimated cost of the workload
    space_bytes: float
    solve_seconds: float
    variables: int = 0
    constraints: int = 0
    plans: list[Alternative] = field(default_factory=list)
    rebuilt: set[str] = field(default_factory=set)  # tables the change rebuilds (``Change``)

    def space_factor(self, problem: Problem) -> float:
        return self.space_bytes / problem.plain_bytes


def solve(problem: Problem, budget: float | None) -> Solution:
    """The cheapest plans whose encryptions fit ``budget`` × plaintext (None: no bound)."""
    if budget is not None and budget <= 0:
        raise BudgetError(f"the space budget must be positive, not {budget}")
    solution = _solve(problem, budget, minimise_space=False)
    if solution is None:
        smallest = _solve(problem, None, minimise_space=True)
        assert smallest is not None  # fetching every query's tables needs nothing optional
        needed = math.ceil(smallest.space_factor(problem) * 100) / 100
        raise BudgetError(
            f"no design fits a space budget of {budget} x the plaintext "
            f"({problem.plain_bytes / 1e6:,.1f} MB): the smallest design that still runs "
            f"every query takes {smallest.space_factor(problem):.3f} x; give --budget {needed:.2f} "
            "or more"
        )
    return solution


def _solve(problem: Problem, budget: float | None, *, minimise_space: bool) -> Solution | None:
    import highspy

    started = time.perf_counter()
    highs = _quiet_highs()
    keys = sorted(problem.sizes)
    price = 1.0 if minimise_space else _TIE_BREAK
    stored = {k: highs.addBinary(obj=price * problem.sizes[k]) for k in keys}
    runs = [
        [highs.addBinary(obj=0.0 if minimise_space else w * a.seconds) for a in alternatives]
        for w, alternatives in zip(problem.weights, problem.plans, strict=True)
    ]
    constraints = 0
    for alternatives, x in zip(problem.plans, runs, strict=True):
        highs.addConstr(sum(x) == 1)
        constraints += 1
        for alternative, chosen in zip(alternatives, x, strict=True):
            for key in sorted(alternative.needs):
                highs.addConstr(chosen <= stored[key])
                constraints += 1
    for det, rnd in sorted(problem.fetch_pairs.items()):
        highs.addConstr(stored[det] + stored[rnd] >= 1)
        constraints += 1
    if budget is not None:
        room = budget * problem.plain_bytes - problem.fixed_bytes
        highs.addConstr(sum(problem.sizes[k] * stored[k] for k in keys) <= room)
        constraints += 1
    rebuilt: dict[str, Any] = {}
    if problem.change is not None and not minimise_space:
        rebuilt = _add_rebuilds(highs, problem.change, stored)
        constraints += len(stored) + len(problem.change.forced)
    highs.run()
    if highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    values = highs.getSolution().col_value
    solution = _solution(problem, keys, stored, runs, values, started, constraints)
    if rebuilt:
        _keep_unrebuilt(solution, problem, {t for t, r in rebuilt.items() if values[r.index] > 0.5})
    return solution


def _add_rebuilds(highs: Any, change: Change, stored: dict[str, Any]) -> dict[str, Any]:
    """``r[t]`` per table: 1 when a candidate of ``t`` is added or dropped, priced per byte."""
    rebuilt = {
        t: highs.addBinary(obj=(change.seconds_per_byte + _TIE_BREAK) * size)
        for t, size in sorted(change.table_bytes.items())
    }
    for key, enabled in stored.items():
        table = rebuilt[change.table_of[key]]
        if key in change.kept:
            highs.addConstr(enabled + table >= 1)  # dropping it rebuilds the table
        else:
            highs.addConstr(enabled <= table)  # adding it rebuilds the table
    for name in sorted(change.forced):
        highs.addConstr(rebuilt[name] >= 1)
    return rebuilt


def _keep_unrebuilt(solution: Solution, problem: Problem, rebuilt: set[str]) -> None:
    """A table left alone keeps exactly what it stores, read by a chosen plan or not."""
    change = problem.change
    assert change is not None
    solution.rebuilt = rebuilt
    alone = {k for k in problem.sizes if change.table_of[k] not in rebuilt}
    solution.enabled = (solution.enabled - alone) | (change.kept & alone)
    solution.space_bytes = problem.fixed_bytes + sum(problem.sizes[k] for k in solution.enabled)


def _quiet_highs() -> Any:
    """A HiGHS instance that prints nothing (its first one prints a banner from C++ to fd 1)."""
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            highs = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("mip_rel_gap", 1e-6)  # costs differ by milliseconds in seconds
    return highs


def _solution(
    problem: Problem,
    keys: list[str],
    stored: dict[str, Any],
    runs: list[list[Any]],
    values: list[float],
    started: float,
    constraints: int,
) -> Solution:
    chosen = [max(range(len(x)), key=lambda j: values[x[j].index]) for x in runs]
    plans = [problem.plans[i][j] for i, j in enumerate(chosen)]
    # what the chosen plans need, and a fetch form for the columns whose DET they do not:
    # the one the solver stored (a DET that DuckDB bit-packs can take less room than the
    # RND of the same values), the solver's answer within its gap storing more, never less
    enabled: set[str] = set().union(*(p.needs for p in plans))
    enabled |= {
        det if values[stored[det].index] > 0.5 else rnd
        for det, rnd in problem.fetch_pairs.items()
        if det not in enabled
    }
    seconds = sum(w * p.seconds for w, p in zip(problem.weights, plans, strict=True))
    space = problem.fixed_bytes + sum(problem.sizes[k] for k in enabled)
    variables = len(keys) + sum(len(x) for x in runs)
    elapsed = time.perf_counter() - started
    return Solution(chosen, enabled, seconds, space, elapsed, variables, constraints, plans)
