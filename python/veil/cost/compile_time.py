"""What the server's JIT takes to compile a statement before running it (PostgreSQL).

Past ``jit_above_cost`` PostgreSQL compiles a statement's expressions and
tuple deforming with LLVM first, and past ``jit_optimize_above_cost`` it
optimizes and inlines them too: TPC-H Q7 compiled 144 functions in 92 ms of
its 640 (about 1 ms each), Q1 30 functions in 872 ms over its three
processes. No node's cost holds that time. ``EXPLAIN`` names the functions
the leader compiles and whether it optimizes them (``Estimate.jit_functions``);
the seconds per function are measured here.
"""

from __future__ import annotations

import json
from typing import Any

from veil.backends.base import quote
from veil.cost.context import CostContext

_RUNS = 5
# the settings that make a small statement compile as a large one would (``jit_seconds``)
_JIT_SETTINGS = {
    "plain": {"jit_above_cost": "0"},
    "optimized": {
        "jit_above_cost": "0",
        "jit_optimize_above_cost": "0",
        "jit_inline_above_cost": "0",
    },
}


def jit_seconds(session: CostContext) -> dict[str, float]:
    """Seconds per function the server's JIT compiles, ``plain`` and ``optimized``: a small
    aggregate run under ``EXPLAIN ANALYZE`` with the thresholds set to compile it, its
    compile time over its functions (the least of a few runs). Empty where the server
    compiles nothing (JIT off, or no LLVM), or has no session settings to lower its
    thresholds by (a server other than PostgreSQL)."""
    backend = session.backend
    settings = getattr(backend, "settings", None)  # PostgreSQL's (``PostgresBackend``)
    tables = [t for t in session.design.tables.values() if t.row_count > 0]
    if settings is None or not tables:
        return {}
    table = min(tables, key=lambda t: t.row_count)
    row_id = quote(table.row_id)
    sql = (
        f"EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*), sum({row_id}), max({row_id}) "
        f"FROM {quote(table.server_name)} WHERE {row_id} % 7 <> 3"
    )
    found: dict[str, float] = {}
    for level, values in _JIT_SETTINGS.items():
        with settings(values):
            times = [_compiled(backend.execute(sql).column(0)[0].as_py()) for _ in range(_RUNS)]
        if None in times:
            return {}
        found[level] = min(t for t in times if t is not None)
    return found


def _compiled(plan: Any) -> float | None:
    """An ``EXPLAIN (ANALYZE, FORMAT JSON)``'s seconds of JIT per function compiled."""
    top = (json.loads(plan) if isinstance(plan, str) else plan)[0]
    jit = top.get("JIT") if isinstance(top, dict) else None
    if not isinstance(jit, dict) or not jit.get("Functions"):
        return None
    total = float((jit.get("Timing") or {}).get("Total") or 0.0) / 1e3
    return total / float(jit["Functions"])
