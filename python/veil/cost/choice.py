"""Choosing a query's split plan by cost (MONOMI §6.4): the planner's rules, checked.

The passes (``veil.sql.passes``) each apply a rule that usually pays: join on
the server, sum on the server (also over a whole joined block), run subqueries
there, reduce a scan by its join partners, filter by client-computed keys,
decrypt an IN-subquery's keys only once grouped, keep keys that are only
compared as ciphertexts. When the design has been calibrated (``veil calibrate``,
or a first ``veil explain --analyze``), the planner also builds the plans in
which one of those rules is left out, and the always-correct fetch-everything
plan, prices each with the cost model (``veil.cost.model``) and keeps the
cheapest. The rules' plan stays unless another is estimated at most
``_MARGIN`` of its cost: the model's errors (bind filters it cannot see, the
server's guesses over ciphertexts) must not trade a good plan for a slightly
cheaper-looking one. By construction the plan kept is never estimated dearer
than fetching everything.

Off with ``VEIL_PLANNER=rules``; without a calibration the rules' plan is
used as it is (a first query must not wait for a calibration). Choosing costs
one server ``EXPLAIN`` per statement of each candidate, once per query text
(plans are cached, ``veil.session.plan_cache``), so a rules' plan estimated
under ``_WORTH_CHOOSING`` (half a second) is kept without pricing the others.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from sqlglot import exp

from veil.cost.calibration import CALIBRATION_FILE, Calibration
from veil.cost.context import CostContext
from veil.cost.model import estimate_plan, plan_steps
from veil.design.model import PhysicalDesign
from veil.errors import ParameterError
from veil.sql.plan import JoinedFetch, SplitPlan
from veil.sql.planner import plan_fetch_all, plan_query
from veil.sql.remote import joined_statement, scan_statement

log = logging.getLogger(__name__)

PLANNER_CHOICES = ("cost", "rules")
# the rules' plan gives way only to a plan estimated at most this share of its cost
_MARGIN = 0.6
# a rules' plan estimated under this many seconds is kept: pricing the others (planning
# and an EXPLAIN per statement of each: 20-900 ms at TPC-H SF 1, paid again for every new
# parameter value of a query) would cost more than it could save
_WORTH_CHOOSING = 0.5
# the rules each candidate leaves out, in words for explain
# (pass names: ``veil.sql.planner.pass_name``)
_WITHOUT = {
    "no server joins": "pushdown_joins",
    "no server aggregates": "pushdown_aggregates",
    "no grouped server joins": "pushdown_join_aggregates",
    "no server subqueries": "pushdown_subqueries",
    "no semi-join reductions": "reduce_joins",
    "no bind filters": "plan_bind_filters",
    "no late decryption": "decrypt_late",
    "keys decrypted": "compare_ciphertexts",
}


@dataclass
class Candidate:
    name: str  # "rules", "fetch everything", or the rule left out
    plan: SplitPlan
    seconds: float | None  # estimated; None: the model could not price it


def planner_policy() -> str:
    """``VEIL_PLANNER``: ``cost`` (the default) or ``rules``."""
    policy = os.environ.get("VEIL_PLANNER", "cost").lower()
    if policy not in PLANNER_CHOICES:
        raise ParameterError(f"VEIL_PLANNER={policy!r} is not one of {', '.join(PLANNER_CHOICES)}")
    return policy


def choose_plan(session: CostContext, tree: exp.Expr, design: PhysicalDesign) -> SplitPlan:
    """The cheapest of the candidate plans of ``tree`` (a query), by the cost model."""
    policy = planner_policy()
    rules = plan_query(tree, design, session)
    calibration = _calibration(session)
    if not rules.pushdown or calibration is None or policy == "rules":
        return rules
    try:
        first = estimate_plan(session, rules, calibration).seconds
    except Exception:  # the model cannot price the rules' plan: nothing to compare with
        log.debug("no estimate for the rules' plan", exc_info=True)
        return rules
    if first < _WORTH_CHOOSING:
        return rules
    candidates = _candidates(session, tree, design, rules, calibration, first)
    chosen = _cheapest(candidates)
    rules.choice = [_described(c, c is chosen) for c in candidates]
    if chosen.plan is not rules:
        chosen.plan.choice = rules.choice
        log.info("plan chosen by cost: %s", chosen.name)
    return chosen.plan


def _calibration(session: CostContext) -> Calibration | None:
    found = Calibration.load(str(Path(session.client.path) / CALIBRATION_FILE))
    return found if found is not None and found.server == session.backend.dialect else None


def _candidates(
    session: CostContext,
    tree: exp.Expr,
    design: PhysicalDesign,
    rules: SplitPlan,
    calibration: Calibration,
    rules_seconds: float,
) -> list[Candidate]:
    plans: list[tuple[str, SplitPlan]] = []
    for name, left_out in _WITHOUT.items():
        plan = plan_query(tree, design, session, without=frozenset({left_out}))
        if plan.pushdown and _differs(plan, rules):
            plans.append((name, plan))
    plans.append(("fetch everything", plan_fetch_all(tree, design)))
    found = [Candidate("rules", rules, rules_seconds)]
    for name, plan in plans:
        try:
            seconds: float | None = estimate_plan(session, plan, calibration).seconds
        except Exception:  # a plan the model cannot price is not chosen
            log.debug("no estimate for the %s plan", name, exc_info=True)
            seconds = None
        found.append(Candidate(name, plan, seconds))
    return found


def _differs(plan: SplitPlan, other: SplitPlan) -> bool:
    """Whether leaving a rule out changed anything (its rule did not apply otherwise)."""
    return _signature(plan) != _signature(other)


def _signature(plan: SplitPlan) -> list[str]:
    found = [plan.local.sql()]
    for _, _, step in plan_steps(plan):
        if isinstance(step, JoinedFetch):
            found.append(joined_statement(step).sql())
            found.append(str([(len(s.binds), sorted(s.ciphertext)) for s in step.scans]))
        else:
            found.append(scan_statement(step).sql())
            # the columns kept encrypted: the only trace ``compare_ciphertexts`` leaves
            found.append(str((len(step.binds), sorted(step.ciphertext))))
    return found


def _cheapest(candidates: list[Candidate]) -> Candidate:
    rules = candidates[0]
    priced = [c for c in candidates if c.seconds is not None]
    if rules.seconds is None or not priced:
        return rules
    best = min(priced, key=lambda c: c.seconds or 0.0)
    if best is rules or (best.seconds or 0.0) > rules.seconds * _MARGIN:
        return rules
    return best


def _described(candidate: Candidate, chosen: bool) -> str:
    cost = "not priced" if candidate.seconds is None else f"{candidate.seconds * 1000:,.1f} ms"
    return f"{'* ' if chosen else '  '}{candidate.name}: {cost}"
