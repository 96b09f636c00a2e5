"""Finishing a two-level server aggregation with packed HOM sums on the client.

The server returns one row per (group, pack mask, chunk of ``2^summand_bits``
packs): the group's DET keys, the partial COUNT / MIN / MAX over the rows with
that mask in that chunk, the mask and the product of the packs
(``veil.sql.remote._packed_sums``). The client decrypts each product once,
takes each summed expression's slots at the mask's positions (exact Python
integers), and re-aggregates the rows of a group, over masks and chunks
alike (all decomposable)::

    COUNT -> SUM of partial counts     MIN / MAX -> MIN / MAX of partials
    SUM   -> SUM of partial sums, NULL when the expression's count is 0

The result has one row per group, the columns ``scan.fetched()`` names for a
one-level aggregation, so the local plan reads it the same way.
"""

from __future__ import annotations

import decimal
import threading
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from veil.encoding import SqlType
from veil.sql.plan import AggregateItem, Aggregation, Scan

if TYPE_CHECKING:
    from veil.ciphers.cache import CipherCache

_VIEW = "__veil_packed_sums"


def finish_packed_sums(fetched: pa.Table, scan: Scan, ciphers: CipherCache) -> pa.Table:
    from veil.exec.decrypt import decrypt_columns

    aggregation, table = scan.aggregation, scan.table
    assert aggregation is not None and table.hom is not None
    wanted = aggregation.fetched(table)[:-2]  # all but the mask and the product
    plain = decrypt_columns(fetched.select(list(range(len(wanted)))), table, wanted, ciphers)
    masks = fetched.column(len(wanted)).to_pylist()
    products = fetched.column(len(wanted) + 1).combine_chunks()
    sums = ciphers.group(table).masked_sums(products, masks)
    columns = {key: plain.column(key) for key in aggregation.keys}
    for i, item in enumerate(aggregation.items):
        name = f"__veil_agg_{i}"
        if item.kind != "SUM":
            columns[name] = plain.column(name)
            continue
        assert item.hom_index is not None
        sql_type = SqlType(table.hom.types[item.hom_index])
        columns[name] = _decimals(
            [None if s is None else s[item.hom_index] for s in sums], sql_type.scale
        )
    return reaggregate(pa.table(columns), aggregation)


def _decimals(values: list[int | None], scale: int) -> pa.Array:
    """Exact encoded sums as DECIMAL(38, scale) (what SQL's SUM of a decimal gives)."""
    with decimal.localcontext() as context:
        context.prec = 60
        return pa.array(
            [None if v is None else decimal.Decimal(v).scaleb(-scale) for v in values],
            pa.decimal128(38, scale),
        )


def reaggregate(per_mask: pa.Table, aggregation: Aggregation) -> pa.Table:
    """One row per group from partial rows (per pack mask, or per block of row ids)."""
    if _arrow_can(per_mask, aggregation):
        return _reaggregate_arrow(per_mask, aggregation)
    return _reaggregate_sql(per_mask, aggregation)


def _arrow_can(per_mask: pa.Table, aggregation: Aggregation) -> bool:
    """Whether Arrow's hash aggregation gives what DuckDB's would: not for nested
    keys, nor for MIN / MAX of floats (Arrow skips NaN, DuckDB orders it last)."""
    for key in aggregation.keys:
        if pa.types.is_nested(per_mask.schema.field(key).type):
            return False
    for i, item in enumerate(aggregation.items):
        if item.kind in ("MIN", "MAX"):
            kind = per_mask.schema.field(f"__veil_agg_{i}").type
            if pa.types.is_floating(kind) or pa.types.is_nested(kind):
                return False
    return True


def _reaggregate_arrow(per_mask: pa.Table, aggregation: Aggregation) -> pa.Table:
    """``reaggregate`` in Arrow: a local DuckDB query costs ~1-2 ms more (TPC-H Q6's
    14,000 blocks: 2.5 ms against 0.3)."""
    names = [f"__veil_agg_{i}" for i in range(len(aggregation.items))]
    wanted = [
        (n, "min" if i.kind == "MIN" else "max" if i.kind == "MAX" else "sum")
        for n, i in zip(names, aggregation.items, strict=True)
    ]
    grouped = _grouped(per_mask, aggregation.keys, wanted)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        k: grouped.column(k) for k in aggregation.keys
    }
    for (name, how), item in zip(wanted, aggregation.items, strict=True):
        found = grouped.column(f"{name}_{how}")
        if item.kind == "COUNT":
            found = pc.fill_null(found, 0).cast(pa.int64())
        elif item.kind == "SUM":  # NULL where no row had the expression
            assert item.count_key is not None
            count = grouped.column(f"{aggregation.local_name(item.count_key)}_sum")
            found = pc.if_else(pc.fill_null(pc.greater(count, 0), False), found, None)
        columns[name] = (
            found.cast(per_mask.schema.field(name).type) if item.kind != "COUNT" else found
        )
    return pa.table(columns)


def _grouped(table: pa.Table, keys: list[str], wanted: list[tuple[str, str]]) -> pa.Table:
    """``table.group_by(keys, use_threads=False).aggregate(wanted)``, through Acero's own
    module: ``Table.group_by`` imports ``pyarrow.acero``, which imports ``pyarrow.dataset``
    (Parquet, ORC, Substrait, the cloud filesystems): 0.1-0.2 s of a fresh process's first
    re-aggregation (TPC-H Q1, Q6), against ~2 ms for ``pyarrow._acero`` (issue 41)."""
    try:
        from pyarrow._acero import AggregateNodeOptions, Declaration, TableSourceNodeOptions
    except ImportError:  # (a pyarrow that moved it: the public way)
        return table.group_by(keys, use_threads=False).aggregate(wanted)
    hashed = "hash_" if keys else ""  # what group_by names the functions
    aggregates = [([name], hashed + how, None, f"{name}_{how}") for name, how in wanted]
    source = Declaration("table_source", TableSourceNodeOptions(table))
    aggregate = Declaration("aggregate", AggregateNodeOptions(aggregates, keys=keys))
    return Declaration.from_sequence([source, aggregate]).to_table(use_threads=False)


def _reaggregate_sql(per_mask: pa.Table, aggregation: Aggregation) -> pa.Table:
    keys = [f'"{k}"' for k in aggregation.keys]
    values = [
        f"{_final(item, f'__veil_agg_{i}', aggregation)} AS __veil_agg_{i}"
        for i, item in enumerate(aggregation.items)
    ]
    sql = f"SELECT {', '.join(keys + values)} FROM {_VIEW}"
    if keys:
        sql += f" GROUP BY {', '.join(keys)}"
    local = _local()
    local.register(_VIEW, per_mask)
    try:
        return local.sql(sql).to_arrow_table()
    finally:
        local.unregister(_VIEW)


_THREAD = threading.local()


def _local() -> duckdb.DuckDBPyConnection:
    """This thread's DuckDB for re-aggregating: opening one costs ~20 ms, a query ~1 ms."""
    con: duckdb.DuckDBPyConnection | None = getattr(_THREAD, "con", None)
    if con is None:
        con = _THREAD.con = duckdb.connect()
    return con


def _final(item: AggregateItem, name: str, aggregation: Aggregation) -> str:
    if item.kind == "COUNT":
        return f"CAST(COALESCE(SUM({name}), 0) AS BIGINT)"
    if item.kind in ("MIN", "MAX"):
        return f"{item.kind}({name})"
    assert item.count_key is not None
    count = aggregation.local_name(item.count_key)
    return f"CASE WHEN SUM({count}) > 0 THEN SUM({name}) END"
