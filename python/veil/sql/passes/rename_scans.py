"""Pass: point each table reference of the local plan at its scan's local table::

FROM lineitem AS l  ->  FROM __veil_scan_3 AS l
FROM orders         ->  FROM __veil_scan_0 AS orders
"""

from __future__ import annotations

from sqlglot import exp

from veil.sql.state import PlanState


def rename_scans(state: PlanState) -> PlanState:
    for scan in state.scans.values():
        node = scan.node
        assert node is not None
        node.set("this", exp.to_identifier(scan.local_name))
        node.set("db", None)
        node.set("catalog", None)
        if not node.alias:
            node.set("alias", exp.TableAlias(this=exp.to_identifier(scan.alias)))
    return state
