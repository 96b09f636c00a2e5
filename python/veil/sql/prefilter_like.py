"""Conservative pre-filtering of LIKE with SEARCH (MONOMI §5.4).

A SEARCH column lets the server test whether a value holds a whole word. A
``LIKE`` pattern implies such words only where the pattern bounds them
(``veil.crypto.search.like_pattern_words``): every value matching
``'% special requests %'`` holds the words "special" and "requests", so the
server may keep only rows holding both::

    o_comment LIKE '% special requests %'
      ->  veil_search_match(c_41.., $1) AND veil_search_match(c_41.., $2)

The filter is a superset (words are case-folded; word order is ignored), so it
is applied only as a top-level conjunct (never under NOT or OR) and the exact
LIKE always runs again on the client.
"""

from __future__ import annotations

from sqlglot import exp

from veil.design.model import SEARCH
from veil.sql.columns import BaseColumn
from veil.sql.plan import Scan
from veil.sql.rewrite_server import ServerContext


def prefilter_like(
    predicate: exp.Expr, scan: Scan, resolved: dict[int, BaseColumn], ctx: ServerContext
) -> tuple[exp.Expr, list[str]] | None:
    if not isinstance(predicate, exp.Like | exp.ILike) or predicate.args.get("negate"):
        return None
    ref = resolved.get(id(predicate.this)) if isinstance(predicate.this, exp.Column) else None
    pattern = predicate.expression
    if ref is None or not (isinstance(pattern, exp.Literal) and pattern.is_string):
        return None
    enc = scan.table.find(ref.column, SEARCH)
    if enc is None:
        return None
    from veil.crypto.search import like_pattern_words

    words = like_pattern_words(pattern.this)
    if not words:
        return None
    column = exp.column(enc.name)
    matches = [
        ctx.search_match(column.copy(), scan.placeholder(ctx.search_token(w, enc))) for w in words
    ]
    return exp.and_(*matches), [SEARCH]
