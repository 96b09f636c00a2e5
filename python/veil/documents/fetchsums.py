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

from veil._native import fetched_columns
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
    columns = {}
    for name in dict.fromkeys(additive.values()):
        read = _columns(documents, name)
        if read is None:
            return None
        columns[name] = read
    return _grouped(codes, [token[1] for token in tokens], constants, additive, columns)


def fetched_groups_raw(
    batches: Sequence[bytes],
    key_path: str | None,
    constants: dict[str, int],
    additive: dict[str, str],
) -> tuple[dict[Any, dict[str, Any]], dict[Any, dict[str, Any]]] | None:
    """:func:`fetched_groups` over the server's raw BSON batches, read by one native
    call (``veil._native.fetched_columns``) instead of decoded into dicts. None when a
    document is not of the common shape, or the key is a dotted path: the caller
    decodes the batches and takes :func:`fetched_groups` or its walk."""
    if key_path is not None and "." in key_path:
        return None
    names = list(dict.fromkeys(additive.values()))
    key = key_path.encode() if key_path is not None else None
    read = fetched_columns(list(batches), key, [name.encode() for name in names])
    if read is None:
        return None
    codes, tokens, fields = read  # the groups numbered natively: no loop over documents
    stored = [_stored_key(token) for token in tokens]
    return _grouped(codes, stored, constants, additive, dict(zip(names, fields, strict=True)))


def _stored_key(token: bytes) -> Any:
    """The stored group key a native token stands for (see ``fetched_columns``)."""
    kind, body = token[:1], token[1:]
    if kind == b"n":
        return int.from_bytes(body, "big", signed=True)
    if kind == b"b":
        return body
    if kind == b"s":
        return body.decode()
    return None


#: One summed field's columns, one entry per document: low and high halves, whether
#: a value is there, its first id and whether it has one, then the (document, id)
#: pairs of its blind ``$inc``.
Columns = tuple[np.ndarray, ...]


def _grouped(
    codes: np.ndarray,
    stored: list[Any],
    constants: dict[str, int],
    additive: dict[str, str],
    columns: dict[str, Columns],
) -> tuple[dict[Any, dict[str, Any]], dict[Any, dict[str, Any]]]:
    """The rows and ids of :func:`fetched_groups` from each document's group number
    (``codes``), each group's stored key and each field's columns."""
    groups = len(stored)
    members = np.bincount(codes, minlength=groups)
    rows: dict[Any, dict[str, Any]] = {
        g: {"_id": key} | {o: c * int(members[g]) for o, c in constants.items()}
        for g, key in enumerate(stored)
    }
    ids: dict[Any, dict[str, Any]] = {g: {} for g in range(groups)}
    for name, field in columns.items():
        totals, counts, per_group = _summed(field, codes, groups)
        for g in range(groups):
            ids[g][name], ids[g][name + "#"] = per_group[g], counts[g]
            for output, summed in additive.items():
                if summed == name:
                    rows[g][f"{output}_l"], rows[g][f"{output}_h"] = totals[g], 0
    return rows, ids


def _columns(documents: Sequence[dict[str, Any]], name: str) -> Columns | None:
    """A field's :data:`Columns` from decoded documents; None for a form this path
    does not read (a nested or list-id form of an earlier version, a damaged one)."""
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
        return None
    count = len(documents)
    low, high = np.zeros(count, dtype=np.int64), np.zeros(count, dtype=np.int64)
    valued = np.zeros(count, dtype=bool)
    try:
        low[rows] = np.fromiter((lows[r] for r in rows), dtype=np.int64, count=len(rows))
        highs = (documents[r][name + "h"] for r in rows)
        high[rows] = np.fromiter(highs, dtype=np.int64, count=len(rows))
    except (KeyError, TypeError, ValueError, OverflowError):
        return None  # a damaged form: the general walk reports it
    valued[rows] = True
    has_first = np.array([i is not None for i in firsts], dtype=bool)
    first = np.zeros(count, dtype=np.int64)
    first[has_first] = np.fromiter(
        (i for i in firsts if i is not None), dtype=np.int64, count=int(has_first.sum())
    )
    incremented = [(r, int(i)) for r in rows if extras[r] for i in extras[r] or ()]
    pairs = np.array(incremented, dtype=np.int64).reshape(-1, 2)
    return low, high, valued, first, has_first, pairs[:, 0], pairs[:, 1]


def _summed(
    field: Columns, codes: np.ndarray, groups: int
) -> tuple[list[int], list[int], list[np.ndarray]]:
    """Per group: the exact sum of the stored halves ``(high << 32) + low``, the number
    of values, and the ASHE ids to remove."""
    low, high, valued, first, has_first, inc_docs, inc_ids = field
    group_of = codes[valued]
    # exact: halves < 2**32 each, so 2**31 values of a group sum below 2**63
    low_sums = np.zeros(groups, dtype=np.int64)
    high_sums = np.zeros(groups, dtype=np.int64)
    np.add.at(low_sums, group_of, low[valued])
    np.add.at(high_sums, group_of, high[valued])
    counts = np.bincount(group_of, minlength=groups)
    id_column = np.concatenate([first[has_first], inc_ids])
    id_groups = np.concatenate([codes[has_first], codes[inc_docs]])
    order = np.argsort(id_groups, kind="stable")
    bounds = np.searchsorted(id_groups[order], np.arange(groups + 1))
    sorted_ids = id_column[order]
    per_group = [sorted_ids[bounds[g] : bounds[g + 1]] for g in range(groups)]
    totals = [(int(h) << 32) + int(lo) for h, lo in zip(high_sums, low_sums, strict=True)]
    return totals, [int(c) for c in counts], per_group
