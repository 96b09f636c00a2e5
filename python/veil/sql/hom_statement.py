"""The two-level RemoteSQL of a server aggregation with packed HOM sums (MONOMI §5.3).

A packed ciphertext holds ``R`` rows, so the server cannot add one row's
values alone; it multiplies whole packs and says which row positions of them
the product is meant for. The inner level groups the filtered rows by the
GROUP BY keys and pack, the outer level by keys and position mask::

    SELECT g.k0, CAST(SUM(g.a0) AS BIGINT), MIN(g.a1), g.m, hom_sum(h.ct, $1)
    FROM (SELECT c_rf AS k0, CAST(c_slot // 4 AS BIGINT) AS p,
                 BIT_OR(CAST(1 AS BIGINT) << CAST(c_slot % 4 AS INT)) AS m,
                 COUNT(*) AS a0, MIN(c_ope) AS a1
          FROM t_li WHERE c_sd < $2 GROUP BY c_rf, CAST(c_slot // 4 AS BIGINT)) AS g
    JOIN t_side AS h ON g.p = h.pack
    GROUP BY g.k0, g.m

Full packs of a group share the all-ones mask, so a group gets one product
for them and one per distinct partial mask. The client decrypts each product
once and adds, per summed expression, the slots at the mask's positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlglot import exp

from veil.design.model import TableDesign

if TYPE_CHECKING:
    from veil.sql.plan import Aggregation

_INNER, _SIDE = "g", "h"


def pack_level_select(
    key_columns: Sequence[exp.Expr], values: Sequence[exp.Expr], table: TableDesign
) -> exp.Select:
    """Inner level: keys, pack, position mask and partial aggregates per (keys, pack)."""
    group = table.hom
    assert group is not None
    slot, rows = exp.column(group.slot_column), exp.Literal.number(group.rows_per_ciphertext)
    pack = exp.cast(exp.IntDiv(this=slot.copy(), expression=rows.copy()), "BIGINT")
    bit = exp.BitwiseLeftShift(
        this=exp.cast(exp.Literal.number(1), "BIGINT"),
        expression=exp.cast(exp.Mod(this=slot.copy(), expression=rows.copy()), "INT"),
    )
    keys = [exp.alias_(k.copy(), f"k{i}") for i, k in enumerate(key_columns)]
    partials = [exp.alias_(v, f"a{i}") for i, v in enumerate(values)]
    select = exp.select(
        *keys, exp.alias_(pack, "p"), exp.alias_(exp.func("BIT_OR", bit), "m"), *partials
    )
    return select.group_by(*[k.copy() for k in key_columns], pack.copy())


def packed_sums_select(
    inner: exp.Select, aggregation: Aggregation, table: TableDesign
) -> exp.Select:
    """Outer level: re-aggregate the partials per (keys, mask) and multiply the packs."""
    group = table.hom
    assert group is not None and aggregation.hom_product is not None
    keys = [exp.column(f"k{i}", table=_INNER) for i in range(len(aggregation.keys))]
    values: list[exp.Expr] = []
    for j, (_, item) in enumerate(aggregation.server_items()):
        partial = exp.column(f"a{j}", table=_INNER)
        if item.kind == "COUNT":
            values.append(exp.cast(exp.Sum(this=partial), "BIGINT"))
        else:
            values.append(exp.Min(this=partial) if item.kind == "MIN" else exp.Max(this=partial))
    mask = exp.column("m", table=_INNER)
    select = exp.select(*keys, *values, mask, aggregation.hom_product.copy())
    side = exp.alias_(exp.to_table(group.server_name), _SIDE, table=True)
    on = exp.EQ(this=exp.column("p", table=_INNER), expression=exp.column("pack", table=_SIDE))
    select = select.from_(inner.subquery(_INNER)).join(side, on=on)
    return select.group_by(*[k.copy() for k in keys], mask.copy())
