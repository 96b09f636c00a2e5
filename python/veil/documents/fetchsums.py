"""Grouped ASHE sums from fetched documents, column by column.

The fetched path of a grouped ``$sum``/``$avg`` (``sums="fetch"``, the default
on FerretDB) returns every summed document's group key and flat ASHE form
(``f…`` low half, ``f…h`` high half, ``f…i`` id, ``f…j`` the ids of blind
``$inc``). Walking 100,000 of them in Python, a dict per document, cost about
as much as FerretDB's whole ``$group``; here each field is read into a numpy
column once, the groups are numbered, and the halves are added per group with
numpy. The client's pads then come off once per group in one native call over
that group's ids (``Ashe.decrypt_sum``).

Only the common shape is taken: one group key (or none) of scalar values and
``$sum``/``$avg`` of flat ASHE fields (and ``$sum`` of constants).
:func:`fetched_groups` returns None for anything else (array keys, nested or
list-id forms written by earlier versions): the caller's general walk handles
it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from bson.int64 import Int64

from veil.documents.match import MISSING, get_path

#: The kind of a scalar group key, by class: integers of either BSON width group
#: together, as MongoDB groups them; a bool is not one (True == 1 in a dict), and floats
#: (NaN is not equal to itself) take the general walk.
_KINDS: dict[type, str] = {bytes: "b", str: "s", int: "n", Int64: "n", type(None): "z"}


def fetched_groups(
    documents: Sequence[dict[str, Any]],
    key_path: str | None,
    constants: dict[str, int],
    additive: dict[str, str],
) -> tuple[dict[Any, dict[str, Any]], dict[Any, dict[str, Any]]] | None:
    """``(rows, ids)`` in the shapes ``Pipeline._fetched_rows`` gives, keyed by a group
    token: a row holds ``_id`` (the stored key), each constant output's sum and, per
    additive output (``{output: stored name}``), the group's exact sum of the stored
    halves as ``output_l`` (``output_h`` 0); ``ids[token][name]`` are the group's ASHE
    ids of that field (a numpy column) and ``name + "#"`` its value count. None when a
    document is not of the common shape (the caller walks them one by one)."""
    if key_path is None:
        keys = [None] * len(documents)
    elif "." in key_path:  # an absent key groups as null
        keys = [None if (k := get_path(d, key_path)) is MISSING else k for d in documents]
    else:
        keys = [d.get(key_path) for d in documents]
    tokens: dict[Any, int] = {}
    try:
        codes = np.fromiter(
            (tokens.setdefault((_KINDS[k.__class__], k), len(tokens)) for k in keys),
            dtype=np.int64, count=len(keys),
        )  # fmt: skip
    except KeyError:  # an array, a subdocument or a date: the general walk
        return None
    groups = len(tokens)
    members = np.bincount(codes, minlength=groups)
    order = list(tokens)
    rows: dict[Any, dict[str, Any]] = {
        token: {"_id": token[1]} | {o: c * int(members[g]) for o, c in constants.items()}
        for g, token in enumerate(order)
    }
    ids: dict[Any, dict[str, Any]] = {token: {} for token in order}
    for name in dict.fromkeys(additive.values()):
        summed = _field(documents, name, codes, groups)
        if summed is None:
            return None
        totals, counts, per_group = summed
        for g, token in enumerate(order):
            ids[token][name], ids[token][name + "#"] = per_group[g], counts[g]
            for output, field in additive.items():
                if field == name:
                    rows[token][f"{output}_l"], rows[token][f"{output}_h"] = totals[g], 0
    return rows, ids


def _field(
    documents: Sequence[dict[str, Any]], name: str, codes: np.ndarray, groups: int
) -> tuple[list[int], list[int], list[np.ndarray]] | None:
    """Per group: the exact sum of the stored halves ``(high << 32) + low``, the number
    of values, and the ASHE ids to remove; None for a form this path does not read."""
    lows = [d.get(name) for d in documents]
    firsts = [d.get(name + "i") for d in documents]
    extras = [d.get(name + "j") for d in documents]
    rows = [
        r for r, (i, j) in enumerate(zip(firsts, extras, strict=True))
        if i is not None or j is not None
    ]  # fmt: skip
    if any(isinstance(low, dict) for low in lows) or any(
        not isinstance(lows[r], int) or isinstance(firsts[r], list) for r in rows
    ):
        return None  # a nested or list-id form of an earlier version, or a damaged one
    try:
        low = np.fromiter((lows[r] for r in rows), dtype=np.int64, count=len(rows))
        highs = (documents[r][name + "h"] for r in rows)
        high = np.fromiter(highs, dtype=np.int64, count=len(rows))
    except (KeyError, TypeError, ValueError, OverflowError):
        return None  # a damaged form: the general walk reports it
    group_of = codes[rows]
    # exact: halves < 2**32 each, so 2**31 values of a group sum below 2**63
    low_sums = np.zeros(groups, dtype=np.int64)
    high_sums = np.zeros(groups, dtype=np.int64)
    np.add.at(low_sums, group_of, low)
    np.add.at(high_sums, group_of, high)
    counts = np.bincount(group_of, minlength=groups)
    with_first = [r for r in rows if firsts[r] is not None]
    id_column = np.fromiter((firsts[r] for r in with_first), dtype=np.int64, count=len(with_first))
    id_groups = codes[with_first]
    incremented = [(int(codes[r]), int(i)) for r in rows if extras[r] for i in extras[r] or ()]
    if incremented:  # the ids of blind $inc (few)
        more = np.array(incremented, dtype=np.int64)
        id_groups = np.concatenate([id_groups, more[:, 0]])
        id_column = np.concatenate([id_column, more[:, 1]])
    order = np.argsort(id_groups, kind="stable")
    bounds = np.searchsorted(id_groups[order], np.arange(groups + 1))
    sorted_ids = id_column[order]
    per_group = [sorted_ids[bounds[g] : bounds[g + 1]] for g in range(groups)]
    totals = [(int(h) << 32) + int(lo) for h, lo in zip(high_sums, low_sums, strict=True)]
    return totals, [int(c) for c in counts], per_group
