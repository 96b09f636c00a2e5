"""What a statement's helpers (DML, constraints, row locks, peels) need of their session.

``Session`` runs a statement and hands itself to these helpers; they reach
back only through this Protocol, so ``veil.session.session`` imports them and
none of them imports it (no import circle). A ``Session`` satisfies it
structurally; mypy checks that wherever one is passed.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.cost.context import CostContext
from veil.exec.server import FetchStats
from veil.session.clientdir import ClientDir
from veil.session.result import Result
from veil.session.table_locks import SharedLocks
from veil.sql.plan import SplitPlan

if TYPE_CHECKING:
    from veil.session.templates import Recorder, Template


class SessionContext(CostContext, Protocol):
    """A live session, as the helpers of its statements see it."""

    # writes running now, nested: a foreign key's action runs inside its statement's write
    writes_running: int
    # tables whose peel this session is making (``veil.session.peel_marks``)
    peeling: set[str]

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

    def admitted(self, sql: str, params: list[object] | tuple[object, ...] | None) -> exp.Expr:
        """``sql`` parsed with its parameters bound, if the session may run it."""
        ...

    def recording(self, recorder: Recorder | None) -> AbstractContextManager[None]:
        """Plan under ``recorder`` (``veil.session.templates``)."""
        ...

    def run_template(
        self,
        template: Template,
        plan: SplitPlan,
        params: list[object] | tuple[object, ...],
        stats: FetchStats,
    ) -> tuple[SplitPlan, pa.Table] | None:
        """``plan`` run with ``params`` in its slots (None: a value does not fit one)."""
        ...

    def plan(
        self, tree: exp.Expr, *, row_ids_of: str | None = None, peel: bool = True
    ) -> SplitPlan: ...
