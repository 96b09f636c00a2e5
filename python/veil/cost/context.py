"""What the cost model needs of a session: the cost package's one view of it.

``veil.session`` calls the cost model (plan choice, calibration); the cost
model reaches back only through this Protocol, as the planner's passes reach
the session through ``veil.sql.rewrite_server.ServerContext``. A ``Session``
satisfies it structurally (mypy checks that where one is passed), so the
cost package never imports the session package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pyarrow as pa
from sqlglot import exp

from veil.backends.base import Backend
from veil.ciphers.cache import CipherCache
from veil.crypto.keys import MasterKey
from veil.design.model import PhysicalDesign
from veil.exec.server import FetchStats
from veil.sql.plan import SplitPlan
from veil.sql.rewrite_server import ServerContext


class ClientDirectory(Protocol):
    """Where the client keeps its files (the calibration among them)."""

    @property
    def path(self) -> Path: ...


class CostContext(ServerContext, Protocol):
    """A live session: its server, design and keys, and running plans to time them."""

    @property
    def backend(self) -> Backend: ...

    @property
    def design(self) -> PhysicalDesign: ...

    @property
    def master(self) -> MasterKey: ...

    @property
    def ciphers(self) -> CipherCache: ...

    @property
    def client(self) -> ClientDirectory: ...

    def plan(self, tree: exp.Expr) -> SplitPlan:
        """The split plan the session would run for ``tree`` (peels applied)."""
        ...

    def execute_plan(self, plan: SplitPlan, stats: FetchStats) -> pa.Table:
        """Run ``plan``, counting its statements and time in ``stats``."""
        ...
