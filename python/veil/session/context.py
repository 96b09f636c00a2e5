"""What a statement's helpers (DML, constraints, row locks, peels) need of their session.

``Session`` runs a statement and hands itself to these helpers; they reach
back only through this Protocol, so ``veil.session.session`` imports them and
none of them imports it (no import circle). A ``Session`` satisfies it
structurally; mypy checks that wherever one is passed.
"""

from __future__ import annotations

from typing import Protocol

import duckdb
from sqlglot import exp

from veil.cost.context import CostContext
from veil.session.clientdir import ClientDir
from veil.session.result import Result
from veil.session.table_locks import SharedLocks
from veil.sql.plan import SplitPlan


class SessionContext(CostContext, Protocol):
    """A live session, as the helpers of its statements see it."""

    # writes running now, nested: a foreign key's action runs inside its statement's write
    writes_running: int

    @property
    def client(self) -> ClientDir: ...

    @property
    def local(self) -> duckdb.DuckDBPyConnection:
        """The client's DuckDB, where fetched rows are finished."""
        ...

    @property
    def catalog(self) -> duckdb.DuckDBPyConnection:
        """The empty plaintext schema statements are checked against."""
        ...

    @property
    def table_locks(self) -> SharedLocks: ...

    @property
    def in_transaction(self) -> bool: ...

    def design_file_stamp(self) -> int: ...

    def reload_design(self) -> None: ...

    def follow_design(self) -> None: ...

    def write(self, tree: exp.Insert | exp.Update | exp.Delete) -> Result: ...

    def query(self, tree: exp.Expr) -> Result: ...

    def describe(self, tree: exp.Expr) -> list[str]: ...

    def plan(
        self, tree: exp.Expr, *, row_ids_of: str | None = None, peel: bool = True
    ) -> SplitPlan: ...
