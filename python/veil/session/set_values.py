"""A point write's SET values of the commonest shapes, computed without DuckDB (issue 41).

``UPDATE pgbench_accounts SET abalance = abalance + ? WHERE aid = ?`` sets an
integer column to itself plus a value; computing that in the local DuckDB
costs a statement (~1.5 ms) for one addition. Here each assignment of a kept
shape (``veil.session.point_writes``) that is one of

    col = ?            col = other ± [-]?     col = [-]? + other    (integers)
    col = ?                                                        (text)

is computed in Python, exactly as DuckDB does: the sum of two integer
operands has the wider operand's type, and both that and the cast to the
column's type raise on overflow. A value that would overflow either, a
parameter of another Python type, or any other expression returns None:
then the statement's values come from DuckDB as before (which raises its
own error, or converts as it does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from veil.design.model import TableDesign
from veil.sql.slots import PARAM

# integer types by width: the range a value of the type holds
_BITS = {"TINYINT": 8, "SMALLINT": 16, "INTEGER": 32, "BIGINT": 64}
_ARROW = {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}
_TEXT = "VARCHAR"


@dataclass(frozen=True)
class Assignment:
    """``column = [source ±] parameter``: how one SET value is made."""

    column: str
    bits: int  # the column's integer width; 0: text
    param: int  # the parameter's index
    source: str | None = None  # the column added to, if any
    source_bits: int = 0
    sign: int = 1  # -1: ``source - parameter``


Assignments = tuple[Assignment, ...]


def assignments(table: TableDesign, tree: exp.Update) -> Assignments | None:
    """How ``tree``'s SET values are made in Python; None if one of them is not a shape
    this module computes (``tree``: its parameters bound, assignments plain)."""
    made = []
    for item in tree.expressions:
        column = table.column(item.this.name.lower())
        if column is None:
            return None
        found = _assignment(table, column.name, column.type.upper(), item.expression)
        if found is None:
            return None
        made.append(found)
    return tuple(made)


def _assignment(table: TableDesign, name: str, kind: str, value: exp.Expr) -> Assignment | None:
    bits = _BITS.get(kind)
    if PARAM in value.meta:
        if bits is None and kind != _TEXT:
            return None
        return Assignment(name, bits or 0, value.meta[PARAM][1])
    if bits is None or not isinstance(value, exp.Add | exp.Sub):
        return None
    left, right = value.this, value.expression
    if isinstance(value, exp.Add) and PARAM in _unsigned(left).meta:
        left, right = right, left
    sign = -1 if isinstance(value, exp.Sub) else 1
    if isinstance(right, exp.Neg):  # ``abalance + -2750`` (pgbench -M simple)
        right, sign = right.this, -sign
    if not isinstance(left, exp.Column) or PARAM not in right.meta:
        return None
    source = table.column(left.name.lower())
    if source is None or (left.table and left.table.lower() not in (table.name, "")):
        return None
    source_bits = _BITS.get(source.type.upper())
    if source_bits is None:
        return None
    return Assignment(name, bits, right.meta[PARAM][1], source.name, source_bits, sign)


def _unsigned(node: exp.Expr) -> exp.Expr:
    return node.this if isinstance(node, exp.Neg) else node


def computed(made: Assignments, rows: pa.Table, params: Sequence[object]) -> pa.Table | None:
    """``rows`` with the SET values in place; None if DuckDB must compute them."""
    old_rows = rows  # every value reads the row as it was, not as earlier SETs left it
    for item in made:
        value = params[item.param]
        if item.bits == 0:
            if type(value) is not str:
                return None
            column = pa.array([value] * rows.num_rows, pa.string())
        else:
            if not isinstance(value, int) or isinstance(value, bool):
                return None
            # DuckDB types an integer parameter INTEGER, or BIGINT past its range
            value_bits = 32 if -(2**31) <= value < 2**31 else 64
            if not -(2**63) <= value < 2**63 or abs(value) == 2**31:
                return None  # (2^31 negated: DuckDB may type it either way)
            if item.source is None:
                if not _fits(value, item.bits):
                    return None
                column = pa.array([value] * rows.num_rows, _ARROW[item.bits])
            else:
                # the sum's type is the wider operand's; then cast to the column's
                limit = min(max(item.source_bits, value_bits), item.bits)
                news = []
                for old in old_rows.column(item.source).to_pylist():
                    new = None if old is None else old + item.sign * value
                    if new is not None and not _fits(new, limit):
                        return None
                    news.append(new)
                column = pa.array(news, _ARROW[item.bits])
        at = rows.schema.get_field_index(item.column)
        rows = rows.set_column(at, item.column, column.cast(rows.schema.field(at).type))
    return rows


def _fits(value: int, bits: int) -> bool:
    return -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)
