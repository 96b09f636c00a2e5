"""A statement's literals as plan parameters, read off its tokens (issue 41).

``SELECT abalance FROM pgbench_accounts WHERE aid = 31337`` (pgbench ``-M
simple``, psql, an ORM that writes values in) names one key in its text, so a
plan cached under the text answers that key only. ``normalized`` rewrites
the text's literals where a value may stand as ``?`` markers and returns
their values, so the statement meets the plan of its parameterised shape
(``veil.session.templates``) without being parsed: the scan is one regular
expression over the text.

    SELECT a FROM t WHERE k = 31337 AND s = 'x''y' LIMIT 10
 -> SELECT a FROM t WHERE k = ? AND s = ? LIMIT 10      values (31337, "x'y")

Only integer and plain string literals are taken, and only in a filter's or
a write's clause (WHERE, HAVING, ON, QUALIFY, SET, VALUES) right after an
operator, a comma, an opening parenthesis or a keyword of a comparison. Left
in the key: LIMIT and OFFSET counts, ORDER BY and GROUP BY positions,
select-list constants, a type's arguments (``DECIMAL(10, 2)``), typed
literals (``DATE '...'``, ``INTERVAL '1' DAY``), prefixed strings (``E'..'``),
numbers with a point or an exponent, and anything after ``::``. An
``INSERT INTO t (...) VALUES ...`` has its VALUES read as a query's VALUES
clause would be (``INSERT INTO h (a, d) VALUES (7, 'x')`` -> ``VALUES (?, ?)``):
a one-row INSERT then meets its kept shape (``veil.session.point_inserts``)
instead of the catalogue DuckDB making its row each time (~5 ms of pgbench's
INSERT written out).

A value binds as the very node the parser made of the literal
(``TextInt`` binds as the number as written, a string as a string), and the
session plans a normalised statement only after checking that its bound tree
equals the text's own; a literal whose value steers the plan never becomes a
template's slot (``Recorder.complete``), so such statements keep planning per
value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_MAX_LITERALS = 64  # more (a long IN list, a bulk VALUES): left as written

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|--[^\n]*|/\*.*?\*/)
  | (?P<string>'(?:[^']|'')*')
  | (?P<quoted>"(?:[^"]|"")*")
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?(?![\w.]))
  | (?P<word>[A-Za-z_][\w$]*)
  | (?P<marker>\?|\$\d)
  | (?P<dollar>\$(?:[A-Za-z_]\w*)?\$)
  | (?P<op><>|!=|<=|>=|::|\|\||->>|->|[-+*/%=<>(),;\[\]{}:.&|^~!@#])
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_INTEGER = re.compile(r"\d+")
# the statements whose literals are taken: queries, UPDATE and DELETE, and INSERT ...
# VALUES (below); bulk VALUES past ``_MAX_LITERALS`` values are planned as written
_STATEMENTS = re.compile(r"\s*(?:\(\s*)*(?:SELECT|WITH|FROM|UPDATE|DELETE)\b", re.IGNORECASE)
# an INSERT's head up to its VALUES: a table and a column list, no value in it
_INSERT = re.compile(r"\s*INSERT\s+INTO\s+[^()';]+(?:\([^()';]*\))?\s*(?=VALUES\b)", re.IGNORECASE)
_AS_QUERY = "SELECT 0 "  # what an INSERT's VALUES are scanned after (the scan follows queries)

# clauses whose literals may be values: a filter's or a written row's
_VALUE_CLAUSES = frozenset({"WHERE", "HAVING", "ON", "QUALIFY", "SET", "VALUES"})
_CLAUSES = _VALUE_CLAUSES | frozenset(
    {"SELECT", "FROM", "GROUP", "ORDER", "LIMIT", "OFFSET", "WINDOW", "PARTITION", "USING",
     "RETURNING", "UNION", "INTERSECT", "EXCEPT", "FETCH"}
)  # fmt: skip
# what may come right before a value
_BEFORE_OPS = frozenset({"=", "<>", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "(", ","})
_BEFORE_WORDS = frozenset(
    {"AND", "OR", "NOT", "BETWEEN", "IN", "LIKE", "ILIKE", "THEN", "ELSE", "WHEN"}
)
# a parenthesis after these holds a type's arguments, never values
_TYPES = frozenset(
    {"DECIMAL", "NUMERIC", "DEC", "VARCHAR", "CHAR", "CHARACTER", "VARYING", "BIT",
     "TIMESTAMP", "TIME", "FLOAT", "DOUBLE", "INTERVAL", "STRUCT", "MAP", "UNION", "ENUM"}
)  # fmt: skip


class TextInt(int):
    """An integer literal taken out of a statement's text: it binds as the number as
    written (``veil.sql.parse.literal``), as the parser read it, not as a typed parameter."""

    text: str

    def __new__(cls, text: str) -> TextInt:
        number = super().__new__(cls, text)
        number.text = text
        return number


@dataclass(frozen=True)
class Normalized:
    text: str  # the statement with each value a ``?`` marker
    values: tuple[object, ...]  # TextInt or str, in the markers' order
    places: tuple[int, ...] = ()  # where each marker stands in ``text``


def normalized(sql: str) -> Normalized | None:
    """``sql`` with its value literals as ``?`` markers; None if it has none to take (or
    markers of its own, or text this scan does not follow)."""
    if len(sql) <= _CACHED_TEXT:
        return _normalized_cached(sql)
    return _normalized(sql)


# An application sends the same texts again and again: the scan below is Python over
# every token (~2-3 ms for a TPC-DS query), a cache hit a dict lookup. Long texts (bulk
# INSERTs) are scanned each time rather than kept.
_CACHED_TEXT = 16_384


@lru_cache(maxsize=512)
def _normalized_cached(sql: str) -> Normalized | None:
    return _normalized(sql)


def _normalized(sql: str) -> Normalized | None:
    head = _INSERT.match(sql)
    if head is not None:  # its VALUES' literals, read as those of a query's VALUES clause
        found = _scanned(_AS_QUERY + sql[head.end() :])
        if found is None:
            return None
        shift = head.end() - len(_AS_QUERY)
        return Normalized(
            head.group() + found.text[len(_AS_QUERY) :],
            found.values,
            tuple(place + shift for place in found.places),
        )
    if not _STATEMENTS.match(sql):
        return None
    return _scanned(sql)


def _scanned(sql: str) -> Normalized | None:
    pieces: list[str] = []
    values: list[object] = []
    places: list[int] = []
    length = 0  # of the pieces so far
    clauses: list[str] = [""]  # the clause each open parenthesis is in
    typed: list[bool] = [False]  # whether it holds a type's arguments
    before = ""  # the last token that was not space, upper-cased
    start = 0
    for found in _TOKEN.finditer(sql):
        kind, token = found.lastgroup, found.group()
        if kind == "space":
            continue
        if kind in ("marker", "dollar", "other"):
            return None  # parameters of its own, or quoting this scan does not follow
        upper = token.upper() if kind == "word" else token
        if kind in ("string", "number") and _is_value(token, kind, before, clauses, typed):
            if found.start() > 0 and sql[found.start() - 1] in "'\"":
                return None  # glued to a quote: not a literal this scan understands
            pieces.append(sql[start : found.start()] + "?")
            length += found.start() - start + 1
            places.append(length - 1)
            start = found.end()
            values.append(TextInt(token) if kind == "number" else token[1:-1].replace("''", "'"))
            if len(values) > _MAX_LITERALS:
                return None
        elif kind == "string" and before and before[-1].isalnum() and _glued(sql, found.start()):
            return None  # E'...', X'...': a prefixed string
        if token == "(":
            clauses.append(clauses[-1])
            typed.append(before in _TYPES)
        elif token == ")" and len(clauses) > 1:
            clauses.pop()
            typed.pop()
        elif kind == "word" and upper in _CLAUSES:
            clauses[-1] = upper
        before = upper
    if not values:
        return None
    pieces.append(sql[start:])
    return Normalized("".join(pieces), tuple(values), tuple(places))


def _is_value(token: str, kind: str, before: str, clauses: list[str], typed: list[bool]) -> bool:
    if clauses[-1] not in _VALUE_CLAUSES or typed[-1]:
        return False
    if kind == "number" and not _INTEGER.fullmatch(token):
        return False
    return before in _BEFORE_OPS or before in _BEFORE_WORDS


def _glued(sql: str, at: int) -> bool:
    """Does the string at ``at`` follow a word with no space (a prefix: ``E'...'``)?"""
    return at > 0 and (sql[at - 1].isalnum() or sql[at - 1] == "_")
