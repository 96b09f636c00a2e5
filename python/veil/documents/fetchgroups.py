"""Grouped accumulators from one find of the group keys and ciphertexts.

The fetched path (``sums="fetch"``, the default on FerretDB, and always for products,
Paillier sums and chained sums that the server's words cannot prove): one scan where
FerretDB needs one per accumulator and one for the ids. The common shape (one key or
none, ``$sum``/``$avg`` of flat ASHE fields) is read column by column from the
server's raw batches (veil.documents.fetchsums); any other is walked document by
document, each field's form gathered into its group.
"""

from __future__ import annotations

from typing import Any

from veil.documents.elgamal import Product
from veil.documents.fetchsums import fetched_groups, fetched_groups_raw
from veil.documents.fields import additive_ids
from veil.documents.groupplan import GroupPlan, Rows
from veil.documents.match import MISSING
from veil.documents.reads import Reads


def fetched_rows(plan: GroupPlan, reads: Reads) -> tuple[Rows, Rows]:
    """(each group's constant sums and ASHE halves, each group's ids, ciphertexts and
    opened chained values), from one find."""
    additive = {cipher.name: cipher for _, _, cipher in plan.outputs if cipher is not None}
    names = [n for cipher in additive.values() for n in cipher.stored_names]
    projection = plan.keys.projection(names)
    shape = _column_shape(plan)
    if shape is None:
        stored = reads.find_projected(plan.match, projection)
    else:  # raw batches read by one native call; decoded only for another shape
        batches = reads.find_raw(plan.match, projection)
        columns = fetched_groups_raw(batches, *shape)
        if columns is not None:
            return columns
        stored = reads.decode_raw(batches)
        columns = fetched_groups(stored, *shape)
        if columns is not None:
            return columns
    rows: Rows = {}
    ids: Rows = {}
    for document in stored:
        present = plan.keys.of_stored(document)
        key = plan.keys.identity(present)
        if key not in rows:
            server_key = present.get("k") if plan.keys.single else present
            rows[key] = {"_id": server_key, **{k: 0 for k in plan.stage if k != "_id"}}
        _gather(plan, document, rows[key], ids.setdefault(key, {}))
    return rows, ids


def _gather(
    plan: GroupPlan, document: dict[str, Any], row: dict[str, Any], entry: dict[str, Any]
) -> None:
    """Add one fetched document to its group: constants and ASHE halves to ``row``; ids,
    ciphertexts and opened chained values to ``entry``."""
    counted: set[str] = set()  # a field's ids once, however many outputs read it
    for output, kind, cipher in plan.outputs:
        if cipher is None:
            row[output] += plan.stage[output]["$sum"]
            continue
        form = cipher.gathered(document)
        if kind == "product":
            if isinstance(form, dict):
                entry.setdefault(f"{output}*", Product()).add(cipher.elgamal.parse(form))
            continue
        if kind.startswith("paillier_"):
            if form is not None and form is not MISSING:
                entry.setdefault(output, []).append(form)
            continue
        if kind.startswith("chain_"):
            if cipher.name not in counted and isinstance(form, dict):
                counted.add(cipher.name)
                opened = entry.setdefault(cipher.name, [0, 0])
                opened[0] += cipher.chained.value(form)
                opened[1] += 1
            continue
        if isinstance(form, dict) and ("i" in form or "j" in form):
            row[f"{output}_l"] += int(form["l"])
            row[f"{output}_h"] += int(form["h"])
            if cipher.name not in counted:
                counted.add(cipher.name)
                entry.setdefault(cipher.name, []).extend(additive_ids(form))
                entry[cipher.name + "#"] = entry.get(cipher.name + "#", 0) + 1


def _column_shape(plan: GroupPlan) -> tuple[str | None, dict[str, int], dict[str, str]] | None:
    """``(key path, constants, additive)`` for reading the fetched groups column by
    column (veil.documents.fetchsums) when the pipeline has the common shape: one
    key or none, sums of constants and ``$sum``/``$avg`` of flat ASHE fields; None
    otherwise."""
    parts = plan.keys.parts
    if len(parts) > 1 or (parts and not plan.keys.single):
        return None
    additive: dict[str, str] = {}
    for output, kind, cipher in plan.outputs:
        if cipher is None:
            continue
        if kind not in ("sum", "avg") or cipher.chained is not None:
            return None
        additive[output] = cipher.name
    constants = {o: plan.stage[o]["$sum"] for o, _, c in plan.outputs if c is None}
    key_path = next(iter(parts.values()))[0][1:] if parts else None
    return key_path, constants, additive
