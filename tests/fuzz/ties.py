"""Nearly equal floats at the edge of an ORDER BY ... LIMIT window.

Veil's local plan and plaintext DuckDB may compute a float aggregate one bit
apart (another summation order: kurtosis -4.339100346020761 against
-4.3391003460207624). Equal to 1e-9, the two groups still sort apart, and a
LIMIT then keeps one or the other: a multiset comparison of the windows
reports a wrong answer where every value is right. :func:`tied`
settles such a difference: the query is run again on plaintext without its
LIMIT and OFFSET, and the difference is a tie when every row Veil returned is
a row of that whole result, and each row Veil has in place of an expected one
equals it on the ORDER BY keys up to a floating-point key, which they share
to 1e-9. Only the generator's positional ORDER BY (``ORDER BY 3 DESC, 1``)
is read; anything else is left a difference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

Row = tuple[object, ...]
Equal = Callable[[object, object], bool]


@dataclass
class Window:
    """A query's ORDER BY keys (0-based output positions) and the query without its
    LIMIT and OFFSET, with the parameters that remain."""

    keys: list[int]
    whole_sql: str
    whole_params: list[object]


def window(sql: str, params: Sequence[object]) -> Window | None:
    """The window of a query with a positional ORDER BY and a LIMIT, else None."""
    try:
        tree = sqlglot.parse_one(sql, dialect="duckdb")
    except sqlglot.errors.ParseError:
        return None
    order, limit = tree.args.get("order"), tree.args.get("limit")
    if order is None or limit is None:
        return None
    keys = [_position(item) for item in order.expressions]
    if any(k is None for k in keys):
        return None
    cut = [limit, tree.args.get("offset")]
    bound = sum(len(list(node.find_all(exp.Placeholder))) for node in cut if node is not None)
    whole = tree.copy()
    whole.set("limit", None)
    whole.set("offset", None)  # the LIMIT's and OFFSET's markers come last in the text
    return Window(
        [k for k in keys if k is not None],
        whole.sql(dialect="duckdb"),
        list(params)[: len(params) - bound],
    )


def tied(
    got: list[Row], expected: list[Row], whole: list[Row], keys: list[int], floats: set[int],
    equal: Equal,
) -> bool:  # fmt: skip
    """Whether ``got`` differs from the ``expected`` window only by float ties: every row
    of it is a row of the ``whole`` result, and each one in place of an expected row
    equals it on the sort keys up to a float key (``floats``), equal to 1e-9."""
    if not whole or any(k >= len(whole[0]) for k in keys):
        return False
    missing = list(expected)
    extra = []
    for row in got:
        hit = next((i for i, e in enumerate(missing) if _same(row, e, equal)), None)
        if hit is None:
            extra.append(row)
        else:
            missing.pop(hit)
    if len(extra) != len(missing):
        return False
    for row in extra:
        if not any(_same(row, e, equal) for e in whole):
            return False
        hit = next(
            (i for i, e in enumerate(missing) if _keys_tie(row, e, keys, floats, equal)), None
        )
        if hit is None:
            return False
        missing.pop(hit)
    return True


def _position(item: exp.Expr) -> int | None:
    ordered = item.this if isinstance(item, exp.Ordered) else item
    if isinstance(ordered, exp.Literal) and ordered.is_int:
        return int(ordered.this) - 1
    return None


def _same(a: Row, b: Row, equal: Equal) -> bool:
    return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))


def _keys_tie(a: Row, b: Row, keys: list[int], floats: set[int], equal: Equal) -> bool:
    """Equal on the sort keys before the first float key, and on it to 1e-9."""
    for key in keys:
        if not equal(a[key], b[key]):
            return False
        if key in floats:
            return True
    return False
