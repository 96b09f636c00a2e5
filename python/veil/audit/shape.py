"""A statement's shape: its SQL with every literal and parameter replaced by ``?``.

The audit log records what a statement asked, never a value it carried::

    SELECT name FROM people WHERE card = '4111 1111' AND age > $1 -- note
    ->  SELECT name FROM people WHERE card = ? AND age > ?

Comments go too (they are free text). A statement sqlglot cannot parse, or
reads only as an opaque command (``SHOW``, ``DECLARE``, ``VACUUM``...), is
recorded by its first keyword only (``VACUUM ...``): fail closed, since where
its values are is then unknown.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import OrderedDict

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

# literals of every spelling, parameters and placeholders: all become ``?``
_VALUES = (
    exp.Literal,
    exp.Boolean,
    exp.HexString,
    exp.ByteString,
    exp.BitString,
    exp.National,
    exp.RawString,
    exp.UnicodeString,
    exp.Parameter,
    exp.Placeholder,
)
_HEAD = re.compile(r"^\s*(?:(?:--[^\n]*(?:\n|$)|/\*.*?\*/)\s*)*([A-Za-z]+)", re.DOTALL)
_MARK = exp.Var(this="?")  # written as ``?`` in every dialect (a Placeholder is %s in some)
# statements sqlglot reads only as an opaque command (and warns about): shown by their verb
_COMMANDS = frozenset(
    {
        "SHOW", "DECLARE", "FETCH", "MOVE", "CLOSE", "DISCARD", "LISTEN", "UNLISTEN", "NOTIFY",
        "PREPARE", "EXECUTE", "DEALLOCATE", "LOCK", "VACUUM", "ANALYZE", "CHECKPOINT",
        "REINDEX", "CLUSTER", "REFRESH", "GRANT", "REVOKE", "DO", "CALL", "LOAD", "SAVEPOINT",
        "RELEASE", "RESET", "EXPLAIN",
    }
)  # fmt: skip
_TIME_ZONE = re.compile(r"^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?TIME\s+ZONE\b", re.IGNORECASE)
_CACHED = 512  # shapes kept per process: drivers repeat their statements


class Shapes:
    """Shapes of statement texts, remembered (least recently used out)."""

    def __init__(self, dialect: str):
        self.dialect = dialect
        self._known: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._lock = threading.Lock()  # one per server: its connections' threads share it

    def of(self, sql: str) -> tuple[str, str]:
        """``sql``'s shape and kind (query, dml, ddl, other)."""
        with self._lock:
            found = self._known.get(sql)
            if found is not None:
                self._known.move_to_end(sql)
                return found
        found = statement_shape(sql, self.dialect)
        with self._lock:
            self._known[sql] = found
            if len(self._known) > _CACHED:
                self._known.popitem(last=False)
        return found


def statement_shape(sql: str, dialect: str = "duckdb") -> tuple[str, str]:
    """``sql`` with literals and parameters as ``?``, and its kind; see the module doc."""
    head = _HEAD.match(sql)
    verb = head[1].upper() if head else ""
    trees = []
    if verb not in _COMMANDS and not _TIME_ZONE.match(sql):
        with contextlib.suppress(SqlglotError):  # unparsed: shown by its verb, below
            trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None]
    if len(trees) != 1 or isinstance(trees[0], exp.Command):
        return f"{verb} ...".strip(), "other"
    tree = trees[0].transform(_redacted, copy=True)
    return tree.sql(dialect=dialect, comments=False), _kind(tree)


def _redacted(node: exp.Expr) -> exp.Expr:
    if isinstance(node, _VALUES) and not isinstance(node.parent, exp.DataTypeParam):
        return _MARK.copy()
    if isinstance(node, exp.Var) and isinstance(node.parent, exp.Set | exp.SetItem | exp.EQ):
        return _MARK.copy()  # SET x = value: a bare word is still a value
    return node


def _kind(tree: exp.Expr) -> str:
    if isinstance(tree, exp.Query):
        return "query"
    if isinstance(tree, exp.Insert | exp.Update | exp.Delete | exp.Merge):
        return "dml"
    if isinstance(tree, exp.Create | exp.Drop | exp.Alter | exp.TruncateTable):
        return "ddl"
    return "other"
