"""The planner's working state, handed from pass to pass (``veil.sql.passes``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from veil.design.model import PhysicalDesign
from veil.sql.columns import BaseColumn
from veil.sql.plan import JoinEdge, LateOutput, Scan, ServerPredicate
from veil.sql.rewrite_server import ServerContext

ScanKey = tuple[int, str]  # (id of the scope, alias of the table reference)


@dataclass
class PushedSubquery:
    """A conjunct the server evaluates: the outer scan it filters and what it absorbed."""

    scan: Scan
    predicate: ServerPredicate
    scopes: list[Scope]  # the subquery scopes whose scans are no longer fetched
    # an uncorrelated IN left to the client's bind filters unless its scan is fetched by a
    # server join (``veil.sql.passes.pushdown_joined_subqueries``)
    joined_only: bool = False


@dataclass
class PlanState:
    """What the passes know and have decided about one query.

    ``query`` starts as the qualified query and ends as the local plan; the
    other fields are filled in by the passes, in order.
    """

    query: exp.Expr
    design: PhysicalDesign
    ctx: ServerContext
    row_ids_of: str | None = None  # DML: the table alias whose row ids are fetched
    scopes: list[Scope] = field(default_factory=list)  # traverse_scope(query), innermost first
    resolved: dict[int, BaseColumn] = field(default_factory=dict)  # id(column) -> base column
    scans: dict[ScanKey, Scan] = field(default_factory=dict)
    # per SELECT scope: the DET equi-joins between its own scans
    edges: list[tuple[Scope, list[JoinEdge]]] = field(default_factory=list)
    # per SELECT scope: its equi-joins with scans of outer scopes (correlated)
    correlated: list[list[JoinEdge]] = field(default_factory=list)
    # per SELECT scope: a derived table's (UNION ALL, CTE) inner scans equi-joined with
    # its scans (``veil.sql.derived_edges``; left inner, right this scope's)
    derived: list[list[JoinEdge]] = field(default_factory=list)
    # ``t.col = derived.col`` conjuncts: (the derived column, its derived table's or CTE's
    # scope, the scan of t, t.col) (``plan_bind_filters``: the derived table's keys filter t)
    derived_joins: list[tuple[exp.Column, Scope, Scan, BaseColumn]] = field(default_factory=list)
    # ``col IN (subquery)`` conjuncts on one scan's column
    in_subqueries: list[tuple[exp.In, Scan]] = field(default_factory=list)
    # uncorrelated ``col IN (subquery)`` conjuncts the server runs only inside a server
    # join of their scan (``pushdown_joined_subqueries``), with the scope holding each
    joined_subqueries: list[tuple[Scope, PushedSubquery]] = field(default_factory=list)
    # result columns decrypted after the local plan (``decrypt_outputs``)
    late_outputs: list[LateOutput] = field(default_factory=list)


Pass = Callable[[PlanState], PlanState]
