"""Any SQL statement on a session: DDL to ``veil.load.ddl``, everything else to the session.

The query engine (``veil.session.session``) runs queries and DML; creating,
changing and dropping tables loads data, which is ``veil.load``'s work, a
layer above it. Every front end (the DB-API, ``veil query``, ``veil shell``,
``veil serve``) runs statements through here. Only a statement that starts
with CREATE, DROP, ALTER or TRUNCATE is parsed here first, so queries pay
nothing for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyarrow as pa
from sqlglot import exp

from veil.session.result import Result
from veil.session.session import Session
from veil.sql.errors import InFailedTransactionError, UnsupportedStatementError
from veil.sql.parse import bind_parameters, parse_statement

_CONTROL = re.compile(
    r"^\s*(BEGIN|START|COMMIT|END|ROLLBACK|ABORT)\b(?:\s+(?:TRANSACTION|WORK))?\s*;?\s*",
    re.IGNORECASE,
)
_DDL_HEAD = re.compile(
    r"^\s*(?:(?:--[^\n]*(?:\n|$)|/\*.*?\*/)\s*)*(?:CREATE|DROP|ALTER|TRUNCATE)\b",
    re.IGNORECASE | re.DOTALL,
)


def run(
    session: Session, sql: str, params: Sequence[object] | None = None, *, begin: bool = False
) -> Result:
    """Run one statement; every failure reaches the caller as a ``VeilError``.

    ``begin``: outside a transaction, a statement other than DDL opens one first
    (the DB-API's ``autocommit = False``).
    """
    control = _CONTROL.match(sql)
    if control is not None:
        return _control(session, control[1].upper(), sql)
    if _DDL_HEAD.match(sql):
        # here, not at the top: the loader behind DDL is 25-60 ms of a first query's imports
        from veil.load.ddl import DDL

        tree = session.guarded(sql, lambda: bind_parameters(parse_statement(sql), params))
        if isinstance(tree, DDL):
            return run_tree(session, tree, sql)
    if begin and not session.in_transaction:
        session.begin()
    return session.run(sql, list(params) if params is not None else None)


def _control(session: Session, verb: str, sql: str) -> Result:
    """BEGIN / START TRANSACTION, COMMIT / END, ROLLBACK / ABORT."""
    if verb in ("BEGIN", "START"):
        session.begin()
    elif verb in ("COMMIT", "END"):
        if not session.commit():
            raise InFailedTransactionError(
                "the transaction had failed, so COMMIT rolled it back: none of its writes were kept"
            )
    elif " TO " in f" {sql.upper()} ":
        raise UnsupportedStatementError(
            "ROLLBACK TO SAVEPOINT runs through `veil serve` (PostgreSQL servers); here, "
            "roll the whole transaction back"
        )
    else:
        session.rollback()
    return Result(pa.table({}), -1)


def run_tree(session: Session, tree: exp.Expr, sql: str) -> Result:
    """A parsed DDL statement (``veil serve`` parses PostgreSQL's dialect itself)."""

    from veil.load.ddl import run_ddl

    def ddl() -> Result:
        session.admit(tree)  # CREATE TABLE ... AS SELECT reads what any query may
        return run_ddl(session, tree)

    if not session.in_transaction:
        return session.guarded(sql, ddl)
    # A table's design lives in the client directory, which a ROLLBACK could not undo:
    # as MySQL does, DDL commits the open transaction, runs on its own, and a new
    # transaction goes on (ORMs and pandas create tables inside their transactions).
    session.check_transaction()
    session.commit()
    try:
        return session.guarded(sql, ddl)
    finally:
        session.begin()
