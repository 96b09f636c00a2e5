"""Plans of statements already run, so a repeated query skips parsing, DESCRIBE and planning.

A split plan is data: ``Session.execute_plan`` never changes it (bind filters
are per-run extras), and every plan is correct whatever the server's rows are
(the rows only steer choices between correct plans). So the plan of a query
can run again as long as the physical design is the one it was made for.

A statement whose value may change between runs (``now()``, ``current_date``,
``random()``, table functions: ``veil.sql.functions.is_repeatable``) is
planned every time: the planner may have evaluated such a call into a
pushed constant. The key is the statement's text, its parameter values
with their types (the planner encrypts constants, parameters included, into
the plan, so other values need another plan) and the session's planner
settings (``VEIL_HOM_PUSHDOWN``). The cache is per session, bounded (least recently
used out), and emptied by every INSERT/UPDATE/DELETE the session runs and by
``Session.refresh_catalog``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from veil.sql.plan import SplitPlan

DEFAULT_SIZE = 256

Key = tuple[str, tuple[tuple[str, str], ...], str]


@dataclass(frozen=True)
class CachedPlan:
    names: list[str]  # output column names (DESCRIBE on the plaintext schema)
    plan: SplitPlan
    tree: exp.Expr  # the bound statement, for the fetch-everything fallback


def plan_key(sql: str, params: Sequence[object] | None, settings: str) -> Key:
    """``sql`` with its parameter values and the planner's ``settings``.

    The type is part of a value (1, 1.0 and True differ).
    """
    return sql, tuple((type(p).__qualname__, repr(p)) for p in params or ()), settings


class PlanCache:
    def __init__(self, size: int = DEFAULT_SIZE):
        self.size = size
        self.hits = 0
        self._plans: OrderedDict[Key, CachedPlan] = OrderedDict()

    def get(self, key: Key) -> CachedPlan | None:
        cached = self._plans.get(key)
        if cached is not None:
            self._plans.move_to_end(key)
            self.hits += 1
        return cached

    def put(self, key: Key, cached: CachedPlan) -> None:
        if self.size <= 0:
            return
        self._plans[key] = cached
        self._plans.move_to_end(key)
        while len(self._plans) > self.size:
            self._plans.popitem(last=False)

    def clear(self) -> None:
        self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)
