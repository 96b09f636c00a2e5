"""Pass: every reference to a base table becomes a ``Scan``.

Scopes are analysed here (sqlglot's ``traverse_scope``; every later pass
works scope by scope) and each column reference is resolved to the base
column it reads (``veil.sql.columns``). A scan fetches the columns its
references read, so two references to one table fetch separately::

    SELECT o.o_orderkey FROM orders o WHERE EXISTS (SELECT 1 FROM orders o2 ...)
      ->  scan 0: orders AS o   {o_orderkey}
          scan 1: orders AS o2  {...}
"""

from __future__ import annotations

from itertools import count

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from veil.sql.columns import base_columns
from veil.sql.plan import Scan
from veil.sql.state import PlanState

LOCAL_PREFIX = "__veil_scan_"


def find_scans(state: PlanState) -> PlanState:
    design = state.design
    state.scopes = traverse_scope(state.query)
    state.resolved = base_columns(state.scopes, set(design.tables))
    numbers = count()
    for scope in state.scopes:
        for alias, source in scope.sources.items():
            if isinstance(source, exp.Table) and source.name.lower() in design.tables:
                table = design.table(source.name)
                scan = Scan(table, alias, f"{LOCAL_PREFIX}{next(numbers)}", node=source)
                scan.with_row_id = scope.is_root and alias == state.row_ids_of
                state.scans[(id(scope), alias)] = scan
    for ref in state.resolved.values():
        state.scans[(ref.scope_id, ref.alias)].columns.add(ref.column)
    return state
