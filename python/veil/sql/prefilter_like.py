"""Conservative pre-filtering of LIKE with SEARCH (MONOMI §5.4).

A SEARCH column lets the server test whether a value holds a whole word. A
``LIKE`` pattern implies such words only where the pattern bounds them
(``like_pattern_words``): every value matching
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

from veil.crypto.search import tokenize
from veil.design.model import SEARCH
from veil.sql.columns import BaseColumn
from veil.sql.plan import Scan
from veil.sql.remote import param
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
    words = like_pattern_words(pattern.this)
    if not words:
        return None
    column = exp.column(enc.name)
    matches = [ctx.search_match(column.copy(), param(ctx.search_token(w, enc))) for w in words]
    return exp.and_(*matches), [SEARCH]


_WILDCARDS = "%_"


def like_pattern_words(pattern: str, *, escape: str | None = None) -> list[str]:
    """Words that every value matching SQL ``LIKE pattern`` holds as whole words.

    A word of the pattern counts only when nothing in the pattern lets it
    extend: it is bounded on each side by a literal non-word character or by
    an end of the pattern without a wildcard. ``'%big cat%'`` gives ``[]``
    ("big" may end a longer word, "cat" may start one); ``'% big cat %'``
    gives ``['big', 'cat']``; ``'%the big cat%'`` gives ``['big']``;
    ``'cat%'`` gives ``[]``; ``'The cat'`` gives ``['the', 'cat']``. The
    words are lowercased, so they also serve ``ILIKE``.
    """
    words: list[str] = []
    for literal, open_left, open_right in _literal_runs(pattern, escape):
        found = tokenize(literal)
        if found and open_left and tokenize(literal[0]):
            found = found[1:]
        if found and open_right and tokenize(literal[-1]):
            found = found[:-1]
        words.extend(found)
    return list(dict.fromkeys(words))


def _literal_runs(pattern: str, escape: str | None) -> list[tuple[str, bool, bool]]:
    """Split a LIKE pattern at wildcards: (literal text, wildcard before, wildcard after)."""
    runs: list[tuple[str, bool, bool]] = []
    literal: list[str] = []
    open_left = False
    chars = iter(pattern)
    for ch in chars:
        if escape is not None and ch == escape:
            literal.append(next(chars, ""))
        elif ch in _WILDCARDS:
            runs.append(("".join(literal), open_left, True))
            literal, open_left = [], True
        else:
            literal.append(ch)
    runs.append(("".join(literal), open_left, False))
    return runs
