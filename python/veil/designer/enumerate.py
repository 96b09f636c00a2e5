"""Plan alternatives of one query: EncSet, its query units, and the subsets worth costing.

MONOMI (§6.2-6.3) plans each query under every subset of EncSet (the
encryptions that would let a part of it run on the server) and keeps the
costs. Enumerating every subset is exponential, so, as in §6.3, candidates
are grouped into *query units* that are useful only together, and a subset
holds a unit whole or not at all:

- the DET (or OPE) encryptions sharing one key scope: the two sides of an
  equi-join (or of an order comparison between columns) work only as a pair;
- one table's ASHE sums: the server aggregates a table only when every
  summed expression of the query is there;
- every other candidate is a unit of its own (a WHERE conjunct, a GROUP BY
  key, a precomputed expression).

Up to ``EXHAUSTIVE_UNITS`` units, every subset of units is planned; beyond,
the full set, the empty set, the full set less one unit, and each unit
alone (``2 + 2u`` plans). The plan under the empty set and the
fetch-everything plan (which needs no candidate) are always among the
alternatives, so every query stays feasible under any budget.

Planning and costing are the caller's (``evaluate``: the real planner and
``veil.cost.model``); a plan's needs are the candidates it actually read, so
subsets the planner could not use collapse into one alternative. Subsets go
from large to small, and a subset lying between a planned one and what that
plan read is not planned again: the planner, seeing every encryption that
plan used and nothing it did not need, makes the same plan (the planner's
choices depend on what it can use, not on what else is stored).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import combinations

from sqlglot import exp

from veil.design.model import DET, OPE, SEARCH
from veil.designer.candidates import ASHE, CandidateSet, candidate_key
from veil.sql.workload import analyse_tree

EXHAUSTIVE_UNITS = 5
FETCH_ALL = "fetch all"


@dataclass(frozen=True)
class Evaluated:
    """A plan's estimated seconds, the server columns it reads, and a one-line summary."""

    seconds: float
    server_columns: frozenset[str]
    summary: str


@dataclass(frozen=True)
class Alternative:
    """One plan for one query: what it needs stored, what it costs."""

    needs: frozenset[str]
    seconds: float
    summary: str


# (design restricted to a subset or None for fetch-everything, query) -> its plan's figures
Evaluate = Callable[[set[str] | None, exp.Expr], Evaluated]


def enc_set(tree: exp.Expr, candidates: CandidateSet) -> set[str]:
    """EncSet: the candidates the query's operations could use on the server."""
    needs = analyse_tree(tree, candidates.design.plaintext_schema())
    wanted = [(DET, t, c) for t, c in needs.det] + [(OPE, t, c) for t, c in needs.ope]
    wanted += [(SEARCH, t, c) for t, c in needs.search]
    wanted += [(DET, t, s) for t, s in needs.det_rows] + [(OPE, t, s) for t, s in needs.ope_rows]
    wanted += [(ASHE, t, s) for t, s in needs.sums]
    keys = {candidate_key(t, s, scheme) for scheme, t, s in wanted}
    return keys & set(candidates.candidates)


def query_units(keys: set[str], candidates: CandidateSet) -> list[frozenset[str]]:
    """``keys`` grouped into query units (see the module's docstring), in a stable order."""
    scopes = _scopes(candidates)
    units: dict[str, set[str]] = {}
    for key in sorted(keys):
        found = candidates.candidates[key]
        unit = f"ashe {found.table}" if found.scheme == ASHE else scopes.get(key, key)
        units.setdefault(unit, set()).add(key)
    return [frozenset(units[u]) for u in sorted(units)]


def _scopes(candidates: CandidateSet) -> dict[str, str]:
    return {
        candidate_key(t.name, e.source, e.scheme): e.key_scope
        for t in candidates.design.tables.values()
        for e in t.encryptions
    }


def unit_subsets(units: list[frozenset[str]]) -> Iterator[set[str]]:
    """The subsets of candidates to plan under, whole units each."""
    if len(units) <= EXHAUSTIVE_UNITS:
        for size in range(len(units), -1, -1):
            for chosen in combinations(units, size):
                yield set().union(*chosen)
        return
    everything = set().union(*units)
    yield everything
    yield set()
    for unit in units:
        yield everything - unit
        yield set(unit)


def alternatives(tree: exp.Expr, candidates: CandidateSet, evaluate: Evaluate) -> list[Alternative]:
    """The query's distinct plans (by what they need), cheapest first; fetch-everything included."""
    # by what a plan needs; the fetch-everything plan is kept apart, as the yardstick
    found: dict[tuple[frozenset[str], bool], Alternative] = {}

    def keep(alternative: Alternative) -> None:
        key = (alternative.needs, alternative.summary == FETCH_ALL)
        known = found.get(key)
        if known is None or alternative.seconds < known.seconds:
            found[key] = alternative

    fetch_all = evaluate(None, tree)
    keep(Alternative(frozenset(), fetch_all.seconds, FETCH_ALL))
    planned: list[tuple[frozenset[str], frozenset[str]]] = []  # (subset, what its plan read)
    for subset in unit_subsets(query_units(enc_set(tree, candidates), candidates)):
        if any(needs <= subset < larger for larger, needs in planned):
            continue  # a larger subset's plan read only what this one has: the same plan
        plan = evaluate(subset, tree)
        needs = candidates.required(set(plan.server_columns), subset)
        planned.append((frozenset(subset), needs))
        keep(Alternative(needs, plan.seconds, plan.summary))
    return sorted(found.values(), key=lambda a: (a.seconds, len(a.needs)))
