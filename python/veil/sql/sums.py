"""What a sum pushed to the server needs besides its words: the count of its rows, a price.

Shared by the passes that push sums (``pushdown_aggregates`` for one table,
``veil.sql.join_sums`` over a server join).
"""

from __future__ import annotations

from sqlglot import exp

from veil.design.model import BLOCKS, AsheSums, TableDesign
from veil.sql.columns import columns_read

ASHE_ROW_COST = 4  # a (group, block) row of ASHE sums against a fetched row


def built_sums(table: TableDesign) -> AsheSums | None:
    """The table's ASHE sums if the server holds their words: an onion load's are NULL
    until the first SUM/AVG that needs them builds them (``AsheSums.lazy``), and a sum
    over them meanwhile (inside a transaction, which builds nothing) runs on the client."""
    sums = table.sums
    return sums if sums is not None and not sums.lazy else None


def count_present(table: TableDesign, source: str) -> tuple[exp.Expr | None, int | None]:
    """COUNT of the rows where every column of ``source`` (hence ``source``) is not NULL.

    Under ASHE the flags word counts ``source``'s NULLs (``AsheSums.null_fields``):
    COUNT(*), less that field once unpadded. Else the server tests the
    columns; (None, None) when one has no per-row server column (blocks).
    """
    sums = built_sums(table)
    index = sums.index(source) if sums is not None else None
    field = sums.null_field(index) if sums is not None and index is not None else None
    if field is not None:  # field 0: a NULL there is an overflow flag, none to take off
        return exp.Count(this=exp.Star()), field or None
    found = [table.fetchable(c) for c in columns_read(source)]
    if any(enc.scheme == BLOCKS for enc in found):
        return None, None
    columns = [exp.column(enc.name) for enc in found]
    if not columns:
        return exp.Count(this=exp.Star()), None
    present = exp.and_(*[exp.Not(this=exp.Is(this=c, expression=exp.Null())) for c in columns])
    case = exp.Case(ifs=[exp.If(this=present, true=exp.Literal.number(1))])
    return exp.Count(this=case), None
