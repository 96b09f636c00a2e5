"""Prepared point queries answered by the wire server without Python (issue 41).

Once a prepared query's shape has a plan the session can hand over
(``veil.session.native_plans``), the connection's ``NativePoints``
(``rust/veil-py/src/point``) gets it and runs it on every later Execute:
parameters encrypted, the statement run on the session's own PostgreSQL
connection, rows decrypted and written, with no call into Python. The plan
is kept only if a run of it answers what the session just answered for the
same values.

Only where nothing per statement happens in Python that a native run would
skip: a PostgreSQL server, no metrics or debug timings (``Engine.observer``),
no listener on the server statements. The audit log (on by default) is kept
natively too: each plan carries its statement's line, pre-rendered here
around what changes from run to run (``audit_parts``), and a native run
appends it as ``veil.audit.log`` does. The session tells the plans when they
may run (``set_open``): not inside a failed transaction; a SET moves their
epoch.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Sequence
from functools import cache
from typing import Any, cast

from veil import _native
from veil.audit.observe import decrypted_tables
from veil.backends.postgres import PostgresBackend
from veil.session.native_plans import (
    LATER,
    TEXT,
    PointInsert,
    PointPlan,
    PointUpdate,
    point_insert,
    point_plan,
    point_update,
)
from veil.sql.literals import Normalized, TextInt

log = logging.getLogger(__name__)

# tries of one statement (once its shape's plan is verified, ``veil.session.templates``)
# before its connection stops trying: a check run may meet a concurrent write
_TRIES = 3


def points_for(session: Any, engine: Any) -> Any | None:
    """A connection's ``NativePoints``, or None where a native run would skip something."""
    if not isinstance(session.backend, PostgresBackend) or _libpq() is None:
        return None
    audit = engine.audit
    return _native.NativePoints(
        session.backend.server_statements, None if audit is None else str(audit.path)
    )


@cache
def _libpq() -> str | None:
    """The path of the libpq psycopg loaded (its wheel's own or the system's)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if "/libpq" in path and ".so" in path:
                    return path
    except OSError:
        pass
    return None


def _eligible(wire: Any, key: tuple[str, tuple[int, ...]]) -> PostgresBackend | None:
    """The session's backend if statement ``key`` may still be handed over: native plans,
    tries left, a PostgreSQL server, nothing recording each statement in Python."""
    backend = wire.veil.backend
    if wire.native_points is None:
        return None
    version = wire.veil.design_version
    if wire.native_version != version:  # plans kept on another design no longer run
        wire.native_tries.clear()
        wire.native_version = version
    if wire.native_tries.get(key, 0) >= _TRIES:
        return None
    if not isinstance(backend, PostgresBackend) or backend.statement_listeners():
        return None
    engine = wire.engine
    if engine is None or not _audited_only(engine):
        return None
    return backend


def _audited_only(engine: Any) -> bool:
    """Whether each statement's observation is an audit line at most (which a native run
    writes itself), not metrics or debug timings."""
    observer = engine.observer
    return observer is None or observer.sinks == [engine.audit]


def audit_parts(wire: Any, sql: str, kind: str) -> tuple[bytes, bytes] | None:
    """Statement ``sql``'s audit line around its time, rows and duration, as its watch
    would record it (``veil.audit.observe``), for its native runs; None without an audit
    log. The tables and columns are the ones the session's run of it just decrypted."""
    engine = wire.engine
    if engine is None or engine.audit is None or engine.observer is None:
        return None
    shape, _ = engine.observer.shapes.of(sql)
    head = {
        "user": wire.user,
        "via": "serve",
        "kind": kind,
        "statement": shape,
        "tables": decrypted_tables(wire.veil),
    }
    tail = {"peels": [], "plan_cache": True, "outcome": "ok", "sqlstate": "00000"}
    return _fragment(head), _fragment(tail)


def _fragment(values: dict[str, object]) -> bytes:
    """``values`` as the middle of an audit line's JSON object, from its first comma."""
    text = json.dumps(values, separators=(",", ":"), ensure_ascii=False)
    return ("," + text[1:-1]).encode()


def offer(
    wire: Any,  # veil.serve.engine.WireSession (which imports this module)
    sql: str,
    params: Sequence[tuple[str | None, int]],
    marked: str,
    args: list[object],
    order: list[int],
    outcome: tuple[Any, ...],
) -> None:
    """Hand ``sql`` (as the client sent it, with ``params``) to the connection's native
    plans if its plan (``marked`` with ``args``, ``order`` mapping them to ``params``)
    is one and a native run answers ``outcome``."""
    key = (sql, tuple(oid for _, oid in params))
    backend = _eligible(wire, key)
    if backend is None:
        return
    points, veil = wire.native_points, wire.veil
    if outcome[0] != "rows" or not isinstance(outcome[2], list) or len(outcome) > 3:
        return
    made = point_plan(veil, marked, args)
    ready = _ready(wire, key, made, order)
    if ready is None or not isinstance(made, PointPlan):
        return
    ranges, stamps = ready
    why = points.install(
        sql,
        list(key[1]),
        _libpq(),
        backend.connection_pointer(),
        made.server_sql,
        [_placed(p, order) for p in made.server_params],
        ranges,
        made.outputs,
        made.row_id,
        outcome[1],
        *stamps,
        [text for text, _ in params],
        _rows(outcome[2]),
        audit_parts(wire, sql, "query"),
    )
    if why is None:
        wire.native_tries[key] = _TRIES
    else:
        log.debug("statement %r is not answered natively: %s", sql, why)


def offer_change(
    wire: Any,  # veil.serve.engine.WireSession
    sql: str,
    params: Sequence[tuple[str | None, int]],
    marked: str,
    args: list[object],
    order: list[int],
    outcome: tuple[Any, ...],
) -> None:
    """As ``offer``, for a point UPDATE (``veil.session.native_plans.point_update``) or a
    one-row INSERT (``point_insert``): kept at once, as a write cannot run twice to compare."""
    key = (sql, tuple(oid for _, oid in params))
    backend = _eligible(wire, key)
    if backend is None or outcome[0] != "command" or outcome[1] not in ("UPDATE", "INSERT"):
        return
    if outcome[1] == "INSERT":
        _offer_insert(wire, backend, key, marked, args, order)
    else:
        _offer_update(wire, backend, key, marked, args, order)


def _offer_update(
    wire: Any,
    backend: PostgresBackend,
    key: tuple[str, tuple[int, ...]],
    marked: str,
    args: list[object],
    order: list[int],
) -> None:
    points, veil = wire.native_points, wire.veil
    made = point_update(veil, marked, args)
    ready = _ready(wire, key, made, order)
    if ready is None or not isinstance(made, PointUpdate):
        return
    ranges, stamps = ready
    points.install_write(
        key[0],
        list(key[1]),
        _libpq(),
        backend.connection_pointer(),
        made.match_sql,
        [_placed(p, order) for p in made.match_params],
        ranges,
        made.row_id,
        made.update_sql,
        made.update_types,
        [_placed(p, order) for p in made.update_params],
        functools.partial(wire.native_write_begin, made.table, made.server_table),
        wire.native_write_end,
        *stamps,
        audit_parts(wire, key[0], "dml"),
    )
    wire.native_tries[key] = _TRIES


def _offer_insert(
    wire: Any,
    backend: PostgresBackend,
    key: tuple[str, tuple[int, ...]],
    marked: str,
    args: list[object],
    order: list[int],
) -> None:
    points, veil = wire.native_points, wire.veil
    made = point_insert(veil, marked, args)
    ready = _ready(wire, key, made, order)
    if ready is None or not isinstance(made, PointInsert):
        return
    ranges, stamps = ready
    points.install_insert(
        key[0],
        list(key[1]),
        _libpq(),
        backend.connection_pointer(),
        made.insert_sql,
        made.insert_types,
        ranges,
        [_placed(v, order) for v in made.values],
        functools.partial(wire.native_write_begin, made.table, made.server_table),
        wire.native_write_end,
        *stamps,
        audit_parts(wire, key[0], "dml"),
    )
    wire.native_tries[key] = _TRIES


def offer_simple(
    wire: Any,
    shape: Normalized,
    kind: str,
    marked: str,
    values: list[object],
    outcome: tuple[Any, ...],
) -> None:
    """As ``offer``/``offer_change``, for a simple-protocol statement with its integers
    written in (``veil.serve.shapes``): kept under its shape, each integer an untyped
    parameter, which the wire server reads off the text itself (``point/simple.rs``)."""
    if not all(isinstance(v, TextInt) for v in values):
        return
    params = [(cast(TextInt, v).text, 0) for v in values]
    order = list(range(1, len(values) + 1))
    if kind == "query":
        offer(wire, shape.text, params, marked, values, order, outcome)
    else:
        offer_change(wire, shape.text, params, marked, values, order, outcome)


def _wire_ranges(
    ranges: list[tuple[int, int]], order: list[int], count: int
) -> list[tuple[int, int]] | None:
    """Each client parameter's range: those of the statement's markers it fills."""
    found: list[tuple[int, int] | None] = [None] * count
    for at, number in enumerate(order):
        low, high = ranges[at]
        was = found[number - 1]
        if was is not None and (was == TEXT) != ((low, high) == TEXT):
            return None  # one parameter both text and a number
        if was is None or was == TEXT:
            found[number - 1] = (low, high)
        else:
            found[number - 1] = (max(low, was[0]), min(high, was[1]))
    if any(r is None or (r[0] > r[1] and r != TEXT) for r in found):
        return None
    return cast(list[tuple[int, int]], found)


Stamp = tuple[str, tuple[int, int] | None]  # a file's path and (mtime ns, size)

# where a statement's marker index stands in each kind of native part (``native_plans``)
_MARKER_AT = {"det_int": 1, "assigned": 3, "assigned_text": 1, "int": 1, "text": 1}


def _placed(part: tuple[object, ...], order: list[int]) -> tuple[object, ...]:
    """A native plan's part with its statement marker's index as the client's parameter."""
    at = _MARKER_AT.get(cast(str, part[0]))
    if at is None:
        return part
    return (*part[:at], order[cast(int, part[at])] - 1, *part[at + 1 :])


def _ready(
    wire: Any, key: tuple[str, tuple[int, ...]], made: object, order: list[int]
) -> tuple[list[tuple[int, int]], tuple[Stamp, Stamp | None]] | None:
    """The client parameters' ranges and the files' stamps for plan ``made`` of ``key``;
    None if it is not one to hand over now (counted as a try unless not verified yet)."""
    if made is LATER:
        return None
    wire.native_tries[key] = wire.native_tries.get(key, 0) + 1
    if made is None:
        return None
    ranges = _wire_ranges(cast(Any, made).ranges, order, len(key[1]))
    stamps = _stamps(wire)
    return None if ranges is None or stamps is None else (ranges, stamps)


def _stamps(wire: Any) -> tuple[Stamp, Stamp | None] | None:
    """The design file's and the users file's paths and stamps, as the native plans check
    them; None if the design file is no longer the one the session planned on."""
    veil = wire.veil
    design = veil.client.design_path
    stamp = _file_stamp(design)
    if stamp is None or stamp[0] != veil.design_version:
        return None
    users = wire.users_path
    return (str(design), stamp), None if users is None else (str(users), _file_stamp(users))


def _file_stamp(path: os.PathLike[str]) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _rows(
    batches: list[tuple[int, list[tuple[bool, int, bytes, bytes, bytes | None]]]],
) -> list[list[bytes | None]]:
    """The text of each row's values in the wire server's batches (None: NULL)."""
    rows: list[list[bytes | None]] = []
    for count, columns in batches:
        for row in range(count):
            values: list[bytes | None] = []
            for _raw, offset, offsets, data, validity in columns:
                at = offset + row
                if validity is not None and not validity[at // 8] >> (at % 8) & 1:
                    values.append(None)
                    continue
                start = int.from_bytes(offsets[8 * at : 8 * at + 8], "little", signed=True)
                end = int.from_bytes(offsets[8 * at + 8 : 8 * at + 16], "little", signed=True)
                values.append(bytes(data[start:end]))
            rows.append(values)
    return rows
