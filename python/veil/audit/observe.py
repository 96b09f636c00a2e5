"""What one statement did, measured on the session that ran it, for the audit log and metrics.

``ObservedSession`` is a ``Session`` that notes, per statement, the time it
spent parsing (with parameters bound and the sandbox's check), planning (with
any peels), encrypting constants, fetching (the server's statements, their
transfer and decryption) and in the local DuckDB, which plans it fetched
(so which tables and columns it decrypted), the layers it peeled and whether
its plan came from the plan cache. Only sessions with an audit log or
metrics are of this class, so the others pay nothing.

An ``Observer`` hands each finished statement's ``record`` (a dict, the
audit log's line) to its sinks: the ``AuditLog`` and ``veil serve``'s
Prometheus metrics.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sqlglot import exp

from veil.audit.shape import Shapes
from veil.design.model import Encryption
from veil.exec.server import FetchStats
from veil.session.session import Session
from veil.sql.plan import Scan, SplitPlan

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)
Record = dict[str, Any]
PHASES = ("parse", "plan", "encrypt", "server", "fetch", "decrypt", "local")


@dataclass
class Seen:
    """One statement's measurements, filled in by ``ObservedSession`` as it runs."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    fetched: list[tuple[SplitPlan, FetchStats]] = field(default_factory=list)
    peels: list[str] = field(default_factory=list)

    def add(self, phase: str, started: float) -> None:
        self.seconds[phase] += time.perf_counter() - started


class ObservedSession(Session):
    """A session that measures each statement into ``seen`` (``Observer.watch`` resets it)."""

    seen: Seen

    def __init__(self, *args: Any, **kwargs: Any):
        self.seen = Seen()
        super().__init__(*args, **kwargs)

    def admitted(self, sql: str, params: list[object] | tuple[object, ...] | None) -> exp.Expr:
        started = time.perf_counter()
        try:
            return super().admitted(sql, params)
        finally:
            self.seen.add("parse", started)

    def plan(
        self, tree: exp.Expr, *, row_ids_of: str | None = None, peel: bool = True
    ) -> SplitPlan:
        started = time.perf_counter()
        try:
            made = super().plan(tree, row_ids_of=row_ids_of, peel=peel)
        finally:
            self.seen.add("plan", started)
        if peel:
            self.seen.peels += made.peels
        return made

    def encrypt_constant(self, node: exp.Expr, enc: Encryption) -> object | None:
        started = time.perf_counter()
        try:
            return super().encrypt_constant(node, enc)
        finally:
            self.seen.add("encrypt", started)

    def _fetch_scans(self, plan: SplitPlan, stats: FetchStats) -> list[str]:
        self.seen.fetched.append((plan, stats))
        started = time.perf_counter()
        try:
            return super()._fetch_scans(plan, stats)
        finally:
            self.seen.add("fetch", started)

    def _fetch_direct(self, plan: SplitPlan, scan: Scan, stats: FetchStats) -> pa.Table:
        self.seen.fetched.append((plan, stats))
        started = time.perf_counter()
        try:
            return super()._fetch_direct(plan, scan, stats)
        finally:
            self.seen.add("fetch", started)


class Sink(Protocol):
    def record(self, record: Record) -> None: ...


class Observer:
    """Sends each statement's record to its sinks (an audit log, metrics, or both)."""

    def __init__(self, sinks: Sequence[Sink], dialect: str):
        self.sinks = list(sinks)
        self.shapes = Shapes(dialect)

    def watch(self, session: Session, user: str, via: str, sql: str, kind: str | None) -> Watch:
        return Watch(self, session, user, via, sql, kind)

    def send(self, record: Record) -> None:
        for sink in self.sinks:
            try:
                sink.record(record)
            except OSError:  # a full disk must not fail the statement that was answered
                log.exception("could not record a statement in %r", sink)


class Watch:
    """One statement, from its start to ``done`` (or ``failed``)."""

    def __init__(
        self, observer: Observer, session: Session, user: str, via: str, sql: str, kind: str | None
    ):
        self.observer, self.session, self.user, self.via = observer, session, user, via
        self.sql, self.kind = sql, kind
        self.wall = dt.datetime.now(dt.UTC)
        self.hits = session.plans.hits
        if isinstance(session, ObservedSession):
            session.seen = Seen()
        self.started = time.perf_counter()
        self.streamed = 0.0  # time producing a streamed answer's batches (its local plan)

    def done(self, rows: int | None) -> None:
        self.send(rows, "ok", "00000")

    def failed(self, sqlstate: str) -> None:
        self.send(None, "error", sqlstate)

    def counted(self, batches: Any, rows_of: Callable[[Any], int]) -> Counted:
        """``batches`` (a streamed answer) counted as they leave; done when they end."""
        return Counted(self, batches, rows_of)

    def send(self, rows: int | None, outcome: str, sqlstate: str) -> None:
        self.observer.send(self.record(rows, outcome, sqlstate))

    def record(self, rows: int | None, outcome: str, sqlstate: str) -> Record:
        seconds = time.perf_counter() - self.started
        shape, kind = self.observer.shapes.of(self.sql)
        seen = self.session.seen if isinstance(self.session, ObservedSession) else Seen()
        phases = dict(seen.seconds)
        for _, stats in seen.fetched:
            phases["server"] += stats.server_seconds
            phases["decrypt"] += stats.decrypt_seconds
            phases["local"] += stats.local_seconds
        phases["local"] += self.streamed
        return {
            "time": self.wall.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "user": self.user,
            "via": self.via,
            "kind": self.kind or kind,
            "statement": shape,
            "tables": _tables(seen.fetched),
            "rows": rows,
            "peels": list(seen.peels),
            "plan_cache": self.session.plans.hits > self.hits,
            "outcome": outcome,
            "sqlstate": sqlstate,
            "seconds": round(seconds, 6),
            "phases": {p: round(s, 6) for p, s in phases.items() if s > 0},
        }


def decrypted_tables(session: Session) -> dict[str, list[str]]:
    """The tables and columns the statement running on ``session`` decrypted so far, as
    its record's ``tables`` (``veil.serve.native`` pre-renders native runs' lines)."""
    return _tables(session.seen.fetched) if isinstance(session, ObservedSession) else {}


def _tables(fetched: list[tuple[SplitPlan, FetchStats]]) -> dict[str, list[str]]:
    """Each table's columns the statement's plans decrypted (kept encrypted ones left out)."""
    columns: dict[str, set[str]] = {}
    for plan, _ in fetched:
        for scan in plan.scans:
            decrypted = columns.setdefault(scan.table.name, set())
            decrypted |= scan.columns - scan.ciphertext
        for late in plan.late_outputs:  # kept encrypted by the local plan, decrypted in the result
            columns.setdefault(late.scan.table.name, set()).add(late.column)
    return {table: sorted(names) for table, names in sorted(columns.items())}


class Counted:
    """A streamed answer's batches, counted; the statement is done when they end or close."""

    def __init__(self, watch: Watch, batches: Any, rows_of: Callable[[Any], int]):
        self.watch, self.batches, self.rows_of = watch, iter(batches), rows_of
        self.rows, self.finished = 0, False

    def __iter__(self) -> Counted:
        return self

    def __next__(self) -> Any:
        started = time.perf_counter()
        try:
            batch = next(self.batches)
        except StopIteration:
            self.finish(None)
            raise
        except BaseException as exc:
            self.finish(getattr(exc, "sqlstate", "XX000"))
            raise
        finally:
            self.watch.streamed += time.perf_counter() - started
        self.rows += self.rows_of(batch)
        return batch

    def close(self) -> None:
        self.finish(None)

    def finish(self, sqlstate: str | None) -> None:
        if self.finished:
            return
        self.finished = True
        if sqlstate is None:
            self.watch.done(self.rows)
        else:
            self.watch.failed(sqlstate)

    def __del__(self) -> None:  # the client stopped reading: the rows sent so far
        self.finish(None)
