"""Grouped ASHE sums added by the server (``sums="server"``): the client removes the pads.

The server's ``$group`` adds the low and the high halves of each group's ASHE
ciphertexts (flat int64 fields); the client then needs the ids of the values summed,
whose pads it removes in one native call per group. Where the server's ``$group``
computes several accumulators and ``$push`` (MongoDB), one aggregation returns the
sums and the ids together. FerretDB 1.24 computes the first accumulator of a
``$group`` alone and has no ``$push``: there each accumulator takes an aggregation of
its own, and one find reads every summed document's ids.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np

from veil.documents.errors import ServerRefusedError
from veil.documents.fields import additive_ids
from veil.documents.groupplan import GroupPlan, Rows
from veil.documents.reads import Reads
from veil.documents.server import DatabaseContext


def server_sums(plan: GroupPlan, reads: Reads, database: DatabaseContext) -> tuple[Rows, Rows]:
    """(each group's server accumulators, each group's summed ids and value counts)."""
    ciphers = [cipher for _, _, cipher in plan.outputs if cipher is not None]
    if ciphers and database.groups_push(reads.server):
        pushed = _pushed_rows(plan, reads)
        if pushed is not None:
            return pushed
    return server_rows(plan, reads, database), _summed_ids(plan, reads, ciphers) if ciphers else {}


def server_rows(
    plan: GroupPlan, reads: Reads, database: DatabaseContext, by_sub: dict[str, str] | None = None
) -> Rows:
    """Each group's server accumulators: one aggregation per accumulator, as FerretDB
    1.24 computes only the first accumulator of a $group (later ones come back 0),
    or one per grouping where the server computes several. An output named in
    ``by_sub`` is grouped by the key and that sub-chain field too: its row holds
    ``{sub-chain: total}`` (an absent sub-chain field is 0)."""
    rows: Rows = {}
    group = plan.stage
    accumulators = [(k, v) for k, v in group.items() if k != "_id"] or [("_n", {"$sum": 1})]
    stages: list[tuple[str | None, dict[str, Any]]] = []
    together = database.groups_push(reads.server)
    for output, accumulator in accumulators:
        sub_field = (by_sub or {}).get(output)
        joined = [s for f, s in stages if f == sub_field] if together else []
        if joined:
            joined[0][output] = accumulator
            continue
        key = {"k": group["_id"], "s": sub_field} if sub_field else group["_id"]
        stages.append((sub_field, {"_id": key, output: accumulator}))
    for sub_field, stage in stages:
        outputs = [output for output in stage if output != "_id"]
        for row in reads.aggregate(plan.pipeline(stage)):
            raw_key, sub = row.get("_id"), None
            if sub_field:  # {k, s}; a missing key and a null one are apart here
                parts = raw_key if isinstance(raw_key, dict) else {}
                raw_key, sub = parts.get("k"), int(parts.get("s") or 0)
            entry = rows.setdefault(plan.keys.row_identity(raw_key), {"_id": raw_key})
            for output in outputs:
                if sub is None:
                    entry[output] = row[output]
                else:  # both halves of the null group add up (a double stays a double)
                    totals = entry.setdefault(output, {})
                    totals[sub] = totals.get(sub, 0) + row[output]
    return rows


def one_group(plan: GroupPlan, reads: Reads, stage: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The rows of one ``$group`` after the server filter; None if the server refuses
    it (an accumulator it lacks, a row past its 16 MB document limit)."""
    try:
        return reads.aggregate(plan.pipeline(stage))
    except ServerRefusedError:
        return None


def fresh_name(names: dict[str, Any], base: str) -> str:
    """``base``, suffixed if need be to differ from every name already in ``names``."""
    name, n = base, 0
    while name in names:
        n += 1
        name = f"{base}{n}"
    return name


def _pushed_rows(plan: GroupPlan, reads: Reads) -> tuple[Rows, Rows] | None:
    """Each group's accumulators and summed ids from one aggregation: the halves'
    sums, the values' ids (``$push`` skips a missing field, so a document without a
    value adds none) and the ids of their ``$inc``, and for ``$avg`` how many values.
    None, and the caller takes the other server path, when the server refuses it (a
    group's ids past its 16 MB document limit, say) or the field holds values of an
    earlier nested form (the server's ``$sum`` skips them; ``_summed_ids`` adds them)."""
    stage = dict(plan.stage)
    pushes: dict[str, tuple[Any, dict[str, str]]] = {}
    averaged = {cipher.name for _, kind, cipher in plan.outputs if kind == "avg"}
    for cipher in {c.name: c for _, _, c in plan.outputs if c is not None}.values():
        name = cipher.name
        if reads.holds_nested_forms(cipher):
            return None
        parts: dict[str, Any] = {"i": {"$push": f"${name}i"}, "j": {"$push": f"${name}j"}}
        if name in averaged:  # a value always has its high half, an absent one not
            parts["count"] = {"$sum": {"$cond": [{"$gt": [f"${name}h", None]}, 1, 0]}}
        names: dict[str, str] = {}
        for part, accumulator in parts.items():
            names[part] = fresh_name(stage, f"_{name}_{part}")
            stage[names[part]] = accumulator
        pushes[name] = cipher, names
    found = one_group(plan, reads, stage)
    if found is None:
        return None
    rows: Rows = {}
    ids: Rows = {}
    for row in found:
        key = plan.keys.row_identity(row.get("_id"))
        entry = ids.setdefault(key, {})
        for name, (_, names) in pushes.items():
            got = {part: row.pop(output, None) for part, output in names.items()}
            if not isinstance(got["i"], list):
                return None
            try:
                first = np.array(got["i"], dtype=np.int64)
                added = np.array(list(chain.from_iterable(got["j"] or ())), dtype=np.int64)
            except (TypeError, ValueError):  # not the flat form's int64 ids
                return None
            entry[name] = np.concatenate([first, added])
            entry[name + "#"] = got.get("count") or 0
        rows[key] = row
    return rows, ids


def _summed_ids(plan: GroupPlan, reads: Reads, ciphers: list[Any]) -> Rows:
    """Per group key: the ASHE ids of each summed field, how many values it has, and
    the ciphertexts of earlier nested forms, which the server's ``$sum`` skipped."""
    ciphers = list({c.name: c for c in ciphers}.values())  # once per field, not output
    ids = [f"{c.name}{part}" for c in ciphers for part in ("i", "j")]
    ids += [f"{c.name}.{part}" for c in ciphers for part in ("l", "h", "i", "j")]
    stored = reads.find_projected(plan.match, plan.keys.projection(ids))
    out: Rows = {}
    for document in stored:
        entry = out.setdefault(plan.keys.identity(plan.keys.of_stored(document)), {})
        for cipher in ciphers:
            nested = document.get(cipher.name)
            form = _flat_ids(document, cipher.name)
            if isinstance(nested, dict) and "l" in nested and "h" in nested:
                added = (int(nested["h"]) << 32) + int(nested["l"])
                entry[cipher.name + "+"] = entry.get(cipher.name + "+", 0) + added
                form = nested
            if "i" in form or "j" in form:
                entry.setdefault(cipher.name, []).extend(additive_ids(form))
                entry[cipher.name + "#"] = entry.get(cipher.name + "#", 0) + 1
    return out


def _flat_ids(document: dict[str, Any], name: str) -> dict[str, Any]:
    """The ids of a flat ASHE form as :func:`additive_ids` reads them."""
    return {part: document[name + part] for part in ("i", "j") if name + part in document}
