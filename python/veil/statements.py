"""Any SQL statement on a session: DDL to ``veil.load.ddl``, everything else to the session.

The query engine (``veil.exec.session``) runs queries and DML; creating,
changing and dropping tables loads data, which is ``veil.load``'s work, a
layer above it. Every front end (the DB-API, ``veil query``, ``veil shell``,
``veil serve``) runs statements through here. Only a statement that starts
with CREATE, DROP, ALTER or TRUNCATE is parsed here first, so queries pay
nothing for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlglot import exp

from veil.exec.session import Result, Session
from veil.load.ddl import DDL, run_ddl
from veil.sql.parse import bind_parameters, parse_statement

_DDL_HEAD = re.compile(
    r"^\s*(?:(?:--[^\n]*(?:\n|$)|/\*.*?\*/)\s*)*(?:CREATE|DROP|ALTER|TRUNCATE)\b",
    re.IGNORECASE | re.DOTALL,
)


def run(session: Session, sql: str, params: Sequence[object] | None = None) -> Result:
    """Run one statement; every failure reaches the caller as a ``VeilError``."""
    if _DDL_HEAD.match(sql):
        tree = session.guarded(sql, lambda: bind_parameters(parse_statement(sql), params))
        if isinstance(tree, DDL):
            return run_tree(session, tree, sql)
    return session.run(sql, list(params) if params is not None else None)


def run_tree(session: Session, tree: exp.Expr, sql: str) -> Result:
    """A parsed DDL statement (``veil serve`` parses PostgreSQL's dialect itself)."""

    def ddl() -> Result:
        session.admit(tree)  # CREATE TABLE ... AS SELECT reads what any query may
        return run_ddl(session, tree)

    return session.guarded(sql, ddl)
