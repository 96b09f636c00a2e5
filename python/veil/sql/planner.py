"""The split planner: a query -> RemoteSQL scans + a local plan (``SplitPlan``).

The query is qualified against the plaintext schema, then the passes of
``veil.sql.passes.PASSES`` run in order over one ``PlanState``. Two ways
lead to the always-correct split instead (fetch every column of every table
the query names and run the whole query on the client, ``plan_fetch_all``):

- sqlglot cannot qualify the query, or it calls a function the planner
  cannot classify (``veil.sql.functions``);
- a pass fails: the failure is logged and the partial plan dropped, so an
  optimisation's bug costs speed, never a wrong answer or an error.
"""

from __future__ import annotations

import logging

from sqlglot import exp

from veil.design.model import PhysicalDesign
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
    passes: tuple[Pass, ...] | None = None,
) -> SplitPlan:
    """The split plan of ``tree`` (not modified); ``row_ids_of``: DML's target alias.

    ``passes``: the planner's passes, ``PASSES`` when None (``veil.exec.plan_choice``
    leaves one out to price the plan without its rule)."""
    qualified = (
        qualify_query(tree, design.plaintext_schema()) if isinstance(tree, exp.Query) else None
    )
    if qualified is None:
        return plan_fetch_all(tree, design, row_ids_of=row_ids_of)
    state = PlanState(qualified, design, ctx, row_ids_of)
    try:
        check_functions(qualified)
        for planner_pass in PASSES if passes is None else passes:
            state = planner_pass(state)
    except Exception as exc:  # any failure of an optimisation: do it the safe way
        log.info("split planning failed (%s: %s); the client runs the query", type(exc), exc)
        return plan_fetch_all(tree, design, row_ids_of=row_ids_of)
    return SplitPlan(
        list(state.scans.values()), state.query, pushdown=True, late_outputs=state.late_outputs
    )


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
