"""Fallbacks: a query the split plan could not answer, run by fetching whole tables.

The always-correct plan (``veil.sql.planner.plan_fetch_all``: every column of
every table the query names, all of the query on the client) answers when

- planning gives up (``stage = "plan"``): sqlglot cannot qualify the query, it
  calls a function the planner cannot classify, or a pass raised;
- the split plan fails when it runs (``stage = "run"``): a server statement or
  the local plan raised (e.g. DuckDB's binder found a column the plan did not
  fetch).

Answers stay right, but the query fetches every table, so each fallback is a
failure of the planner unless its shape is one Veil cannot split (``DOCUMENTED``,
the list of docs/sql.md "Fallbacks"). Each is named in the plan
(``SplitPlan.fallback``: ``veil explain`` and ``Result.plan`` show it) and
counted here, per process, by stage and shape: ``veil serve --metrics`` exports
the counts as ``veil_fallbacks_total``, and the SQL, TPC-DS and fuzz suites fail
on a fallback whose shape is not documented.

A shape is a label of few values (Prometheus keeps a series per label value):
the documented shape, the pass that failed, or the kind of error the split plan
met when it ran; never a query's text.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass

from sqlglot import exp

from veil.sql.functions import UnknownFunctionError

# The shapes Veil cannot split, each with why (docs/sql.md "Fallbacks" explains them).
DOCUMENTED: dict[str, str] = {
    "pivot": "PIVOT's output columns are the values of a column; UNPIVOT's are unresolved",
    "columns expression": "COLUMNS(pattern) picks its columns when DuckDB binds it",
}


@dataclass(frozen=True)
class Fallback:
    """Why a plan fetches whole tables: ``stage`` (plan | run), ``shape`` (a short
    label, ``DOCUMENTED`` or a planner failure's kind) and ``detail`` (the error, in words)."""

    stage: str
    shape: str
    detail: str

    @property
    def documented(self) -> bool:
        return self.shape in DOCUMENTED

    def __str__(self) -> str:
        return self.detail


_lock = threading.Lock()
_counts: Counter[tuple[str, str]] = Counter()
_last: dict[tuple[str, str], str] = {}  # the latest detail per (stage, shape), for reports


def record(fallback: Fallback) -> None:
    """Count one query answered by the fetch-everything plan."""
    key = (fallback.stage, fallback.shape)
    with _lock:
        _counts[key] += 1
        _last[key] = fallback.detail


def counts() -> dict[tuple[str, str], int]:
    """Fallbacks of this process so far, by (stage, shape)."""
    with _lock:
        return dict(_counts)


def since(before: dict[tuple[str, str], int]) -> list[tuple[str, str, int, str]]:
    """(stage, shape, count, latest detail) of each fallback counted after ``before``."""
    with _lock:
        return [
            (stage, shape, n - before.get((stage, shape), 0), _last[(stage, shape)])
            for (stage, shape), n in sorted(_counts.items())
            if n > before.get((stage, shape), 0)
        ]


def unqualified(tree: exp.Expr) -> Fallback:
    """The planner cannot analyse ``tree`` at all: qualify failed, or it is not a query."""
    if not isinstance(tree, exp.Query) or tree.find(exp.Pivot) is not None:
        return _pivot()
    return Fallback("plan", "unqualified query", "sqlglot cannot qualify the query's columns")


def unsplittable(qualified: exp.Expr) -> Fallback | None:
    """A documented shape the passes cannot split (found before they run), or None."""
    if qualified.find(exp.Pivot) is not None:
        return _pivot()
    for node in qualified.find_all(exp.Columns):
        if not isinstance(node.this, exp.Star):
            pattern = node.sql("duckdb")
            detail = f"{pattern}: DuckDB's binder decides which columns it reads"
            return Fallback("plan", "columns expression", detail)
    return None


def _pivot() -> Fallback:
    return Fallback("plan", "pivot", "PIVOT / UNPIVOT: its columns come from the data or its list")


def failed_pass(step: str, exc: Exception) -> Fallback:
    """A planning step (checking functions, or a pass) raised ``exc``."""
    detail = f"{step} failed ({type(exc).__name__}: {exc})"
    if isinstance(exc, UnknownFunctionError):
        return Fallback("plan", "unclassified aggregate", detail)
    return Fallback("plan", step, detail)


_ERROR_KIND = re.compile(r"^([A-Z][A-Za-z ]*? Error):")


def failed_run(exc: Exception) -> Fallback:
    """The split plan raised ``exc`` when it ran."""
    detail = f"the split plan failed ({type(exc).__name__}: {exc})"
    kind = _ERROR_KIND.match(str(exc))
    return Fallback("run", kind.group(1) if kind else type(exc).__name__, detail)
