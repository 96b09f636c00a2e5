"""The split planner: a query -> RemoteSQL scans + a local plan (``SplitPlan``).

The query is qualified against the plaintext schema, then the passes of
``veil.sql.passes.PASSES`` run in order over one ``PlanState``. Two ways
lead to the always-correct split instead (fetch every column of every table
the query names and run the whole query on the client, ``plan_fetch_all``):

- sqlglot cannot qualify the query, or it calls a function the planner
  cannot classify (``veil.sql.functions``);
- a pass fails: the partial plan is dropped, so an optimisation's bug costs
  speed, never a wrong answer or an error.

Either way the plan says why (``SplitPlan.fallback``, a ``veil.sql.fallbacks.Fallback``:
``veil explain`` shows it, and the session counts it when the plan runs).

A pass is known by its name (``pass_name``: its function's, which is also its
module's); ``without`` leaves passes out by name (``veil.cost.choice`` prices
the plans without each of its rules).
"""

from __future__ import annotations

import logging

from sqlglot import exp
from sqlglot.optimizer.eliminate_ctes import eliminate_ctes

from veil.design.model import PhysicalDesign
from veil.sql import fallbacks
from veil.sql.fallbacks import Fallback
from veil.sql.functions import check_functions
from veil.sql.parse import qualify_query
from veil.sql.passes import PASSES
from veil.sql.plan import Scan, SplitPlan
from veil.sql.rewrite_server import ServerContext
from veil.sql.state import Pass, PlanState

log = logging.getLogger(__name__)


def plan_query(
    tree: exp.Expr,
    design: PhysicalDesign,
    ctx: ServerContext,
    *,
    row_ids_of: str | None = None,
    without: frozenset[str] = frozenset(),
) -> SplitPlan:
    """The split plan of ``tree`` (not modified); ``row_ids_of``: DML's target alias.

    ``without``: names of passes left out (``pass_name``)."""
    unknown = without - PASS_NAMES
    if unknown:
        raise ValueError(f"no planner pass is named {', '.join(sorted(unknown))}")
    qualified = (
        qualify_query(_without_unused_ctes(tree), design.plaintext_schema())
        if isinstance(tree, exp.Query)
        else None
    )
    if qualified is None:
        return _fallback(tree, design, row_ids_of, fallbacks.unqualified(tree))
    unsplittable = fallbacks.unsplittable(qualified)
    if unsplittable is not None:
        return _fallback(tree, design, row_ids_of, unsplittable)
    state = PlanState(qualified, design, ctx, row_ids_of)
    step = "checking the query's functions"
    try:
        check_functions(qualified)
        for planner_pass in PASSES:
            if pass_name(planner_pass) not in without:
                step = f"pass {pass_name(planner_pass)}"
                state = planner_pass(state)
    except Exception as exc:  # any failure of an optimisation: do it the safe way
        return _fallback(tree, design, row_ids_of, fallbacks.failed_pass(step, exc))
    return SplitPlan(
        list(state.scans.values()), state.query, pushdown=True, late_outputs=state.late_outputs
    )


def _without_unused_ctes(tree: exp.Expr) -> exp.Expr:
    """``tree`` without the CTEs no part of it reads (a copy; ``tree`` if sqlglot cannot say).

    DuckDB never binds an unused CTE, so one may name what does not exist
    (``WITH c AS (SELECT inf) SELECT 1`` answers): qualifying it would fail and
    the whole query fall back, for a part that is never run.
    """
    try:
        return eliminate_ctes(tree.copy())
    except Exception:  # sqlglot's scopes cannot read it: qualify will say
        return tree


def _fallback(
    tree: exp.Expr, design: PhysicalDesign, row_ids_of: str | None, why: Fallback
) -> SplitPlan:
    log.info("split planning: %s; the client runs the query", why)
    plan = plan_fetch_all(tree, design, row_ids_of=row_ids_of)
    plan.fallback = why
    return plan


def pass_name(planner_pass: Pass) -> str:
    """A pass's name: its function's (and its module's, ``veil.sql.passes``)."""
    return planner_pass.__name__


PASS_NAMES = frozenset(pass_name(p) for p in PASSES)


def plan_fetch_all(
    tree: exp.Expr, design: PhysicalDesign, *, row_ids_of: str | None = None
) -> SplitPlan:
    """Every column of every table the query names; the client runs all of it."""
    local = tree.copy()
    names = {t.name.lower() for t in local.find_all(exp.Table)} & set(design.tables)
    scans = []
    for name in sorted(names):
        table = design.table(name)
        scan = Scan(table, name, name, columns={c.name for c in table.columns})
        scan.with_row_id = row_ids_of is not None and name == row_ids_of.lower()
        scans.append(scan)
    return SplitPlan(scans, local, pushdown=False)
