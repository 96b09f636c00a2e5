"""Pass: ``EXISTS (SELECT * FROM t WHERE ...)`` -> ``EXISTS (SELECT 1 FROM t WHERE ...)``.

EXISTS ignores what its subquery selects, so fetching the columns that ``*``
expands to would only move bytes. Left alone when the projection decides how
many rows there are (aggregates, windows, GROUP BY, DISTINCT)::

    EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey)
      ->  EXISTS (SELECT 1 AS one FROM lineitem WHERE l_orderkey = o_orderkey)
"""

from __future__ import annotations

from sqlglot import exp

from veil.sql.state import PlanState


def prune_exists_projections(state: PlanState) -> PlanState:
    prune_exists(state.query)
    return state


def prune_exists(query: exp.Expr) -> None:
    """Replace the projections of ``query``'s EXISTS subqueries by ``1``, in place."""
    for exists in query.find_all(exp.Exists):
        select = exists.this.this if isinstance(exists.this, exp.Subquery) else exists.this
        if not isinstance(select, exp.Select) or any(
            select.args.get(k) for k in ("group", "having", "distinct", "qualify")
        ):
            continue
        if any(p.find(exp.AggFunc, exp.Window) for p in select.expressions):
            continue
        select.set("expressions", [exp.alias_(exp.Literal.number(1), "one")])
