"""Statements with integers written in, translated once per shape (issue 41).

``pgbench -M simple`` (and psql, and ORMs that write values in) sends
``UPDATE pgbench_accounts SET abalance = abalance + -2750 WHERE aid = 78201``
with new numbers each time, so the wire's cache of translations, keyed by
the text, never hits, and every statement was parsed, rewritten and written
out by sqlglot (PostgreSQL's dialect into DuckDB's) before the session saw it.

Here the text's integer literals are read off its tokens (``veil.sql.literals``,
no sqlglot); the first statement of a shape is translated as before, and its
translation is kept as the text around its values only if the same integers
come out of it, verbatim and in order, in the same value places. Each later
statement of the shape is that text with its own integers written back in:
exactly what the translation would have made, without it. The session then
reads the literals off the translation itself, as for any statement.

Only integers: a string may be rewritten by the translation according to its
content (a timestamp with a zone, an array's text), an integer is written as
it stands wherever the translation keeps it.

An INSERT's VALUES are read the same way (``veil.sql.literals`` reads them as a
query's VALUES clause). A shape whose translation
binds its values as the text does (``binds_as_written``, asked once when the
shape is kept) sends them to the session as parameters of the translation
with ``?`` markers: what the session would make of the text itself
(``normalized``, the same scan), without the scan and the written-out text;
and a one-row INSERT meets its kept shape (``veil.session.point_inserts``):
pgbench's ``-M simple`` INSERT was parsed, bound and checked by the
catalogue every time (~5 ms).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sqlglot import exp

from veil.session.templates import binds_as_written
from veil.sql.literals import Normalized, TextInt, normalized


@dataclass(frozen=True)
class Translated:
    """A shape's translation: the text around its values, and its first statement."""

    kind: str  # query or dml
    tree: exp.Expr  # the first statement's, translated (its rights are checked on it)
    pieces: tuple[str, ...]  # DuckDB's SQL between the values: one more than the values
    # values that bind as written: sent as parameters of ``marked``
    bound: bool = False

    @property
    def marked(self) -> str:
        """The translation with a ``?`` marker in each value's place."""
        return "?".join(self.pieces)


def integers(text: str) -> Normalized | None:
    """``text``'s shape and its integer values; None if it has another kind of value."""
    found = normalized(text)
    if found is None or not all(isinstance(v, TextInt) for v in found.values):
        return None
    return found


def kept(kind: str, tree: exp.Expr, sql: str, shape: Normalized) -> Translated | None:
    """``sql`` (the translation of the statement of ``shape``) as its shape's translation;
    None if its values do not come out of it as they went in."""
    again = normalized(sql)
    if again is None or len(again.values) != len(shape.values):
        return None
    if [_text(v) for v in again.values] != [_text(v) for v in shape.values]:
        return None
    ends = (-1, *again.places, len(again.text))
    pieces = tuple(again.text[a + 1 : b] for a, b in itertools.pairwise(ends))
    return Translated(kind, tree, pieces, binds_as_written(sql, again))


def written(translated: Translated, shape: Normalized) -> str:
    """The translation of the statement of ``shape``: its values written in."""
    parts = [translated.pieces[0]]
    for value, piece in zip(shape.values, translated.pieces[1:], strict=True):
        parts.append(_text(value))
        parts.append(piece)
    return "".join(parts)


def _text(value: object) -> str:
    return value.text if isinstance(value, TextInt) else repr(value)
