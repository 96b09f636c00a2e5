"""Pass: a LEFT JOIN whose WHERE rejects its NULL-extended rows is an inner join.

In TPC-DS q49,

    FROM web_sales ws LEFT OUTER JOIN web_returns wr
      ON ws.ws_order_number = wr.wr_order_number AND ws.ws_item_sk = wr.wr_item_sk,
      date_dim
    WHERE wr.wr_return_amt > 10000 AND ...

a sale without a return gets NULLs for ``wr``'s columns, which the WHERE
conjunct ``wr.wr_return_amt > 10000`` turns into NULL: the row is dropped.
So only matched rows survive, and the outer join answers what the inner join
does. As an outer join the server could not join the two (``pushdown_joins``
joins inner equi-joins only): it scanned the sales twice, once for the
returns' semi-join and once for the sales; as an inner join the whole block
is one server statement, which PostgreSQL drives from the returns through
the sales' key index, as it does for the plaintext query. PostgreSQL and
DuckDB make the same rewrite in their own optimisers ("outer join
simplification").

Sound for a conjunct of the WHERE (ANDed at its top, not under OR, NOT or a
function) that compares a column of the nullable side directly: a NULL
operand makes a comparison, BETWEEN, IN, LIKE and IS NOT NULL not true. Only
LEFT joins with ON, in a SELECT whose joins are inner, comma or LEFT joins
(``inner_then_left_joins``: no RIGHT or FULL join re-extends with NULLs), and
only a nullable side that is a table or a subquery (not LATERAL): a NULL
rejected in the WHERE is rejected whatever joins come after the LEFT one.
"""

from __future__ import annotations

from sqlglot import exp

from veil.sql.conjuncts import conjunct_list, inner_then_left_joins
from veil.sql.state import PlanState

# predicates that are not true when the operand named is NULL
_STRICT = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike)


def simplify_outer_joins(state: PlanState) -> PlanState:
    for select in state.query.find_all(exp.Select):
        simplify(select)
    return state


def simplify(select: exp.Select) -> None:
    """Make ``select``'s LEFT joins inner where its WHERE rejects their NULLs, in place."""
    where = select.args.get("where")
    if where is None or not inner_then_left_joins(select):
        return
    rejected = {t for c in conjunct_list(where.this) for t in _rejects_nulls_of(c)}
    for join in select.args.get("joins") or []:
        nullable = join.this
        if join.args.get("side") != "LEFT" or not isinstance(nullable, exp.Table | exp.Subquery):
            continue
        if nullable.alias_or_name in rejected:
            join.set("side", None)
            join.set("kind", None)


def _rejects_nulls_of(conjunct: exp.Expr) -> set[str]:
    """The tables a NULL of whose columns makes ``conjunct`` not true."""
    if isinstance(conjunct, exp.Not) and isinstance(conjunct.this, exp.Is):
        is_null = conjunct.this  # x IS NOT NULL
        return _table(is_null.this) if isinstance(is_null.expression, exp.Null) else set()
    if isinstance(conjunct, _STRICT):
        return _table(conjunct.this) | _table(conjunct.expression)
    if isinstance(conjunct, exp.Between | exp.In):
        return _table(conjunct.this)
    return set()


def _table(operand: exp.Expr | None) -> set[str]:
    while isinstance(operand, exp.Cast | exp.Paren):  # CAST(NULL AS t) is NULL
        operand = operand.this
    if isinstance(operand, exp.Column) and operand.table:
        return {operand.table}
    return set()
