"""The split planner's passes, applied in order (as sqlglot's optimizer applies its RULES).

Each pass is one module exporting one function of the same name,
``pass(state) -> state`` over a ``veil.sql.state.PlanState``. A pass commits
a rewrite whole or leaves the state untouched: it decides first (building
new plan objects aside, with parameters carried inside their expressions,
``veil.sql.remote.param``), then changes the scans and the query. If a pass
fails anyway, the planner drops the whole split plan and runs the query on
the client (``veil.sql.planner``), so a broken optimisation costs speed,
never a wrong answer.
"""

from __future__ import annotations

from veil.sql.passes.compare_ciphertexts import compare_ciphertexts
from veil.sql.passes.count_repeats import count_repeats
from veil.sql.passes.decrypt_late import decrypt_late
from veil.sql.passes.decrypt_outputs import decrypt_outputs
from veil.sql.passes.drop_pushed_filters import drop_pushed_filters
from veil.sql.passes.estimate_rows import estimate_rows
from veil.sql.passes.fetch_expressions import fetch_expressions
from veil.sql.passes.find_scans import find_scans
from veil.sql.passes.plan_bind_filters import plan_bind_filters
from veil.sql.passes.plan_key_ranges import plan_key_ranges
from veil.sql.passes.prune_exists_projections import prune_exists_projections
from veil.sql.passes.pushdown_aggregates import pushdown_aggregates
from veil.sql.passes.pushdown_join_aggregates import pushdown_join_aggregates
from veil.sql.passes.pushdown_joined_subqueries import pushdown_joined_subqueries
from veil.sql.passes.pushdown_joins import pushdown_joins
from veil.sql.passes.pushdown_predicates import pushdown_predicates
from veil.sql.passes.pushdown_subqueries import pushdown_subqueries
from veil.sql.passes.reduce_joins import reduce_joins
from veil.sql.passes.reduce_outer_joins import reduce_outer_joins
from veil.sql.passes.rename_scans import rename_scans
from veil.sql.passes.share_aggregates import share_aggregates
from veil.sql.passes.share_fetches import share_fetches
from veil.sql.passes.simplify_outer_joins import simplify_outer_joins
from veil.sql.passes.trim_reductions import trim_reductions
from veil.sql.state import Pass

PASSES: tuple[Pass, ...] = (
    prune_exists_projections,  # EXISTS (SELECT * ...) fetches no columns
    simplify_outer_joins,  # a LEFT JOIN whose WHERE rejects its NULLs is inner
    find_scans,  # scopes, base columns, one Scan per table reference
    pushdown_predicates,  # exact server filters; join edges; IN-subqueries
    pushdown_subqueries,  # [NOT] EXISTS / IN / MIN-MAX subqueries as server filters
    reduce_joins,  # semi-join reductions by joined and outer scans
    reduce_outer_joins,  # a LEFT JOIN's nullable side by the preserved side's rows
    pushdown_aggregates,  # GROUP BY / COUNT / MIN / MAX / HOM SUM on the server
    pushdown_join_aggregates,  # a whole joined block grouped and counted on the server
    pushdown_joins,  # inner DET equi-joins as one server statement
    pushdown_joined_subqueries,  # an uncorrelated IN on a server join's scan, in its statement
    trim_reductions,  # drop reductions a server join does, or too costly for a small table
    estimate_rows,  # each plain scan's rows, from the load's statistics (the cost model's)
    drop_pushed_filters,  # exact server filters leave the local plan
    plan_bind_filters,  # client-computed key filters on large scans
    plan_key_ranges,  # a filtered dimension's key range on the fact ordered by that key
    decrypt_late,  # an IN-subquery or grouped derived table groups its keys' ciphertexts
    compare_ciphertexts,  # keys only compared, grouped or counted stay encrypted
    decrypt_outputs,  # columns only output (and grouped): decrypted in the result's rows
    fetch_expressions,  # the local plan reads the per-row expressions the design stores
    share_fetches,  # two fetches of the same rows: one statement
    share_aggregates,  # aggregates of one table under the same server filter: one statement
    count_repeats,  # a fetch of few distinct rows: each once, with its count
    rename_scans,  # the local plan reads the scans' local tables
)

__all__ = ["PASSES"]
