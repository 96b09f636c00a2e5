"""Plans of statements already run, so a repeated query skips parsing, DESCRIBE and planning.

A split plan is data: ``Session.execute_plan`` never changes it (bind filters
are per-run extras), and every plan is correct whatever the server's rows are
(the rows only steer choices between correct plans). So the plan of a query
can run again as long as the physical design is the one it was made for.

The plans are shared by the sessions of one process over one client
directory (``PlanCache.shared``): a new session (a new ``veil.connect``, a
``veil serve`` connection) runs a statement another already planned without
planning it (TPC-DS: a new session cost twice a warm one). The key is the
statement's text, its parameter values with their types (the planner
encrypts constants, parameters included, into the plan, so other values
need another plan; a plan that answers any value is kept under the
statement's shape instead, its parameters' types: ``veil.session.templates``)
and the planner's settings: ``VEIL_HOM_PUSHDOWN``, whether
sums over server joins are on, and the design file's version, so a plan made
before a peel, a redesign or DDL is never found after it. Sessions that may
read the trusted side's files (``external_access``) keep theirs apart: a
cached plan skips the sandbox's checks. A transaction's plans are shared too
(pgbench's statements, each in a transaction, are planned once), but for a plan
made without the peels it wanted (peels wait outside a transaction): that one
stays the transaction's.

A statement whose value may change between runs (``now()``, ``current_date``,
``random()``, table functions: ``veil.sql.functions.is_repeatable``) is
planned every time: the planner may have evaluated such a call into a
pushed constant. The cache is bounded (least recently used out) and emptied
by DDL and by a design change a session follows. Rows written (INSERT, UPDATE,
DELETE) leave it as it is: a plan's answer depends on the design, never on the
rows, which only steer its choices (the load's statistics, kept in the design).

The shared plans of sandboxed sessions outlive the process too: a session's
close saves those it made in the client directory, sealed, and a later
process reads them before planning (``veil.session.sealed_plans``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from sqlglot import exp

from veil.sql.plan import SplitPlan

if TYPE_CHECKING:
    from veil.session.templates import Template

DEFAULT_SIZE = 256

Key = tuple[str, tuple[tuple[str, str], ...], str]
K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class CachedPlan:
    names: list[str]  # output column names (DESCRIBE on the plaintext schema)
    plan: SplitPlan
    tree: exp.Expr  # the bound statement, for the fetch-everything fallback
    # kept under the statement's shape: the plan answers other parameter values
    # (``veil.session.templates``)
    template: Template | None = None


def plan_key(sql: str, params: Sequence[object] | None, settings: str) -> Key:
    """``sql`` with its parameter values and the planner's ``settings``.

    The type is part of a value (1, 1.0 and True differ). The text's surrounding
    whitespace and final semicolon are not: a statement read from a file (a workload
    planned at the load, ``veil.session.workload_plans``) and sent by itself are one.
    """
    return _bare(sql), tuple((type(p).__qualname__, repr(p)) for p in params or ()), settings


def _bare(sql: str) -> str:
    text = sql.strip()
    return text[:-1].rstrip() if text.endswith(";") else text


def shape_key(sql: str, shape: tuple[tuple[str, str], ...], settings: str) -> Key:
    """The key of ``sql``'s template: its parameters' types, not their values."""
    return sql, tuple((kind, f"?{literal}") for kind, literal in shape), settings


class Recent(Generic[K, V]):
    """The last ``size`` entries used, under a lock: sessions in several threads share
    them (the plans here; ``veil.session.point_writes``' write shapes)."""

    def __init__(self, size: int):
        self.size = size
        self.lock = threading.Lock()
        self.entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> tuple[bool, V | None]:
        """Whether ``key`` is kept, and its value (now the most recently used)."""
        with self.lock:
            if key not in self.entries:
                return False, None
            self.entries.move_to_end(key)
            return True, self.entries[key]

    def peek(self, key: K) -> V | None:
        with self.lock:
            return self.entries.get(key)

    def put(self, key: K, value: V) -> None:
        if self.size <= 0:
            return
        with self.lock:
            self.entries[key] = value
            self.entries.move_to_end(key)
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)

    def discard(self, key: K) -> None:
        with self.lock:
            self.entries.pop(key, None)

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()

    def __len__(self) -> int:
        return len(self.entries)


class PlanStore(Protocol):
    """Plans kept beyond the process (``veil.session.sealed_plans``)."""

    def get(self, key: Key) -> CachedPlan | None: ...

    def add(self, key: Key, cached: CachedPlan) -> None: ...

    def discard(self, key: Key) -> None: ...

    def forget(self) -> None: ...

    def save(self) -> None: ...


_SHARED: dict[tuple[str, bool], Recent[Key, CachedPlan]] = {}
_SHARED_LOCK = threading.Lock()


class PlanCache:
    """A session's view of cached plans: its own hit count over plans it may share, and
    those of earlier processes (``veil.session.sealed_plans``) if ``sealed``."""

    def __init__(
        self,
        size: int = DEFAULT_SIZE,
        plans: Recent[Key, CachedPlan] | None = None,
        sealed: PlanStore | None = None,
    ):
        self._plans = plans if plans is not None else Recent[Key, CachedPlan](size)
        self._sealed = sealed
        self.hits = 0

    @classmethod
    def shared(
        cls, client_dir: Path, external_access: bool, sealed: PlanStore | None = None
    ) -> PlanCache:
        """The plans of ``client_dir`` shared by this process's sessions (of the same access),
        and those ``sealed`` keeps for later processes (a sandboxed session's only)."""
        key = (str(client_dir.resolve()), external_access)
        with _SHARED_LOCK:
            plans = _SHARED.setdefault(key, Recent(DEFAULT_SIZE))
        return cls(plans=plans, sealed=None if external_access else sealed)

    @property
    def size(self) -> int:
        return self._plans.size

    def get(self, key: Key, *, count: bool = True) -> CachedPlan | None:
        """The plan of ``key``; ``count``: a hit (else the caller counts it if it runs it)."""
        _, cached = self._plans.get(key)
        if cached is None and self._sealed is not None:
            cached = self._sealed.get(key)
            if cached is not None:
                self._plans.put(key, cached)
        if cached is not None:
            self.hits += count
        return cached

    def peek(self, key: Key) -> CachedPlan | None:
        """The plan of ``key``, not counted as a hit."""
        return self._plans.peek(key)

    def put(self, key: Key, cached: CachedPlan) -> None:
        self._plans.put(key, cached)
        if self._sealed is not None:
            self._sealed.add(key, cached)

    def save(self) -> None:
        """Keep the plans made since the last save for later processes (if sealed)."""
        if self._sealed is not None:
            self._sealed.save()

    def discard(self, key: Key) -> None:
        self._plans.discard(key)
        if self._sealed is not None:
            self._sealed.discard(key)

    def clear(self) -> None:
        """No plan made before is found again: not in memory, nor among the sealed ones, which
        were made under what the clear says changed (DDL, a design, keys that repeat since
        the load, a test's patched planner) though their keys may not say it."""
        self._plans.clear()
        if self._sealed is not None:
            self._sealed.forget()

    def __len__(self) -> int:
        return len(self._plans)
