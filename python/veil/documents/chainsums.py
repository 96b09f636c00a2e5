"""Grouped sums of chained ``h_add`` fields: one server ``$group``, no ids fetched.

A chained field numbers each group's values 1..n in the group's own chain
(veil.documents.chains), so a group's pads telescope and the server's ``$sum`` of
its words opens with ``F(n) - F(0)``, once the count in the words' low bits proves
which positions were summed. Two ways to prove it:

* whole groups (a filter on the group key alone keeps or drops each group whole):
  the count must equal the chain's length, read after the aggregation;
* runs, where the server's ``$group`` computes several accumulators: the same
  aggregation returns the least and greatest position summed, and a count equal to
  ``max - min + 1`` proves the positions min..max, whatever the filter.

Whatever cannot be proved returns None, and the caller fetches: never a wrong sum.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from veil.documents.groupplan import GroupPlan
from veil.documents.positions import Positions
from veil.documents.reads import Reads
from veil.documents.server import DatabaseContext
from veil.documents.serversums import fresh_name, one_group, server_rows


def chained_sums(
    plan: GroupPlan, query: Mapping[str, Any], reads: Reads, positions: Positions,
    database: DatabaseContext,
) -> list[dict[str, Any]] | None:  # fmt: skip
    """The groups, when every sum is of a field chained by the plan's one group key and
    the sums prove exact (``query``: the pipeline's plaintext filter); else None."""
    if not _all_chained(plan):
        return None
    if database.groups_push(reads.server):
        return _chained_runs(plan, reads, positions)
    if _filter_paths(query) <= set(plan.keys.paths):
        return _chained_documents(plan, reads, positions, database)
    return None


def opened_total(kind: str, opened: list[int] | None) -> Any:
    """A chained field's ``$sum`` (0 without values) or ``$avg`` (None without values)
    from ``[sum, count]``."""
    total, count = opened or (0, 0)
    if kind == "chain_sum":
        return total
    return total / count if count else None


def _all_chained(plan: GroupPlan) -> bool:
    """Whether every sum is of a field chained by the plan's one group key. Over whole
    groups they are summed by :func:`_chained_documents`; where the server computes
    several accumulators in one ``$group``, by :func:`_chained_runs`, filtered on any
    field, without reading the chains' lengths."""
    if not plan.keys.single:
        return False
    (key_path,) = plan.keys.paths
    kinds = [(kind, cipher) for _, kind, cipher in plan.outputs if kind != "count"]
    return bool(kinds) and all(
        kind.startswith("chain_") and cipher.spec.chain == key_path for kind, cipher in kinds
    )


def _chained_documents(
    plan: GroupPlan, reads: Reads, positions: Positions, database: DatabaseContext,
    split: bool = False,
) -> list[dict[str, Any]] | None:  # fmt: skip
    """The groups from one ``$group`` per chained field (and per count), or None when
    a chain has holes, moved values or more values than it sums exactly: the caller
    then fetches. The chain lengths are read after the aggregation (see chains.py).
    Fields whose chains are known to be past their capacity are grouped by sub-chain
    too; a chain found past it afterwards makes one more aggregation of that kind."""
    outputs = plan.outputs
    chained = {c.name: c for _, kind, c in outputs if kind != "count"}.values()
    by_sub = {
        output: f"${cipher.name}s"
        for output, kind, cipher in outputs
        if kind != "count" and (split or positions.known_longer(cipher))
    }
    rows = server_rows(plan, reads, database, by_sub)
    plain = [plan.keys.plain(row.get("_id")) for row in rows.values()]
    lengths, drifts = {}, {}
    for cipher in chained:
        lengths[cipher.name], drifts[cipher.name] = positions.lengths(cipher, plain)
    unsplit = [c for o, kind, c in outputs if kind != "count" and o not in by_sub]
    if any(
        length > cipher.chained.layout.capacity and positions.split(cipher)
        for cipher in unsplit
        for _, length in lengths[cipher.name]
    ):  # a field's chain found past its capacity: its sums again, by sub-chain
        return _chained_documents(plan, reads, positions, database, split=True)
    results = []
    for j, (key, row) in enumerate(zip(plain, rows.values(), strict=True)):
        document: dict[str, Any] = {"_id": key}
        for output, kind, cipher in outputs:
            if output not in row:  # a group that came into being between aggregations
                return None
            if cipher is None:
                document[output] = row[output]
                continue
            chain, length = lengths[cipher.name][j]
            total = cipher.chained.chain_sum(row[output], chain, length, drifts[cipher.name])
            if total is None:
                return None
            document[output] = opened_total(kind, [total, length])
        results.append(document)
    return results


def _chained_runs(
    plan: GroupPlan, reads: Reads, positions: Positions, split: bool = False
) -> list[dict[str, Any]] | None:
    """Chained sums over a filtered set, on a server whose ``$group`` computes several
    accumulators: one aggregation of each group's words and least and greatest
    position summed. A chain's positions are distinct, so a count (the words' low
    bits) equal to ``max - min + 1`` proves the documents summed hold exactly
    positions min..max, whose pads telescope. A filter that follows the order the
    values were written in (a range of dates written in date order, say) leaves
    such runs; any other leaves holes, and None sends the query to the fetched
    path. A field whose chains need sub-chains is grouped by them too (one chained
    field only: one sub-chain field in the key)."""
    outputs = plan.outputs
    chained = {c.name: c for _, kind, c in outputs if kind != "count"}
    sub_field = None
    if len(chained) == 1:
        (only,) = chained.values()
        if split or positions.known_longer(only):
            sub_field = f"${only.name}s"
    stage = dict(plan.stage)
    if sub_field:
        stage["_id"] = {"k": plan.stage["_id"], "s": sub_field}
    bounds: dict[str, tuple[str, str]] = {}
    for name in chained:
        low, high = fresh_name(stage, f"_{name}_first"), fresh_name(stage, f"_{name}_last")
        stage[low], stage[high] = {"$min": f"${name}p"}, {"$max": f"${name}p"}
        bounds[name] = low, high
    found = one_group(plan, reads, stage)
    if found is None:
        return None
    groups: dict[bytes, tuple[Any, dict[int, dict[str, Any]]]] = {}
    for row in found:  # with sub-chains: {k, s}; a missing key joins the null one
        raw_key, sub = row.pop("_id", None), 0
        if sub_field:
            pair = raw_key if isinstance(raw_key, dict) else {}
            raw_key, sub = pair.get("k"), int(pair.get("s") or 0)
        subs = groups.setdefault(plan.keys.row_identity(raw_key), (raw_key, {}))[1]
        if sub in subs:  # the null group's other half: positions of the same chain
            subs[sub] = _joined(subs[sub], row, bounds.values())
        else:
            subs[sub] = row
    plain = [plan.keys.plain(raw_key) for raw_key, _ in groups.values()]
    numbers, drifts = {}, {}  # runs need no chain length: the drift counter alone
    for name, cipher in chained.items():
        numbers[name], drifts[name] = positions.numbers(cipher, plain)
    results = []
    for j, (key, (_, subs)) in enumerate(zip(plain, groups.values(), strict=True)):
        parts = list(subs.values())
        document: dict[str, Any] = {"_id": key}
        for output, kind, cipher in outputs:
            if cipher is None:
                document[output] = sum(part[output] for part in parts)
                continue
            layout, (low, high) = cipher.chained.layout, bounds[cipher.name]
            total = count = 0
            for part in parts:
                first, last = part.get(low), part.get(high)
                if first is None and last is None and part[output] == 0:
                    continue  # no value summed here
                if not isinstance(first, int) or not isinstance(last, int):
                    return None
                longer = last - first + 1 > layout.capacity and not sub_field
                if longer and len(chained) == 1 and positions.split(cipher):
                    positions.summed_longer(cipher)
                    return _chained_runs(plan, reads, positions, split=True)
                opened = cipher.chained.group_sum(
                    part[output], numbers[cipher.name][j], first, last, drifts[cipher.name]
                )
                if opened is None:
                    return None
                total, count = total + opened, count + last - first + 1
            document[output] = opened_total(kind, [total, count])
        results.append(document)
    return results


def _filter_paths(query: Mapping[str, Any]) -> set[str]:
    """The field paths a filter reads (its logical operators' parts included)."""
    paths: set[str] = set()
    for key, condition in query.items():
        if key in ("$and", "$or", "$nor"):
            for part in condition:
                paths |= _filter_paths(part)
        else:  # translate_filter refused any other operator at the top
            paths.add(key)
    return paths


def _joined(
    one: dict[str, Any], other: dict[str, Any], bounds: Iterable[tuple[str, str]]
) -> dict[str, Any]:
    """Two rows of one group's positions as one: sums added, the least and the greatest
    position of both (a missing bound, no value there, left out)."""
    out = {name: value + other[name] for name, value in one.items()}
    for low, high in bounds:
        lows = [row[low] for row in (one, other) if row.get(low) is not None]
        highs = [row[high] for row in (one, other) if row.get(high) is not None]
        out[low], out[high] = min(lows, default=None), max(highs, default=None)
    return out
