"""Prepared point queries answered by the wire server without Python (issue 41).

Once a prepared query's shape has a plan the session can hand over
(``veil.session.native_plans``), the connection's ``NativePoints``
(``rust/veil-py/src/point``) gets it and runs it on every later Execute:
parameters encrypted, the statement run on the session's own PostgreSQL
connection, rows decrypted and written, with no call into Python. The plan
is kept only if a run of it answers what the session just answered for the
same values.

Only where nothing per statement happens in Python that a native run would
skip: a PostgreSQL server, no audit log, metrics or debug timings
(``Engine.observer``), no listener on the server statements. The session
tells the plans when they may run (``set_open``): not inside a failed
transaction; a SET moves their epoch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from functools import cache
from typing import Any, cast

from veil import _native
from veil.backends.postgres import PostgresBackend
from veil.session.native_plans import point_plan

log = logging.getLogger(__name__)

_TRIES = 3  # checks of one statement that may fail before its connection stops trying


def points_for(session: Any) -> Any | None:
    """A connection's ``NativePoints``, or None where a native run would skip something."""
    if not isinstance(session.backend, PostgresBackend) or _libpq() is None:
        return None
    return _native.NativePoints()


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
    points = wire.native_points
    key = (sql, tuple(oid for _, oid in params))
    if points is None or wire.native_tries.get(key, 0) >= _TRIES:
        return
    engine, veil = wire.engine, wire.veil
    backend = veil.backend
    if not isinstance(backend, PostgresBackend):
        return
    if engine is None or engine.observer is not None or backend.statement_listeners():
        return
    if outcome[0] != "rows" or not isinstance(outcome[2], list) or len(outcome) > 3:
        return
    wire.native_tries[key] = wire.native_tries.get(key, 0) + 1
    made = point_plan(veil, marked, args)
    if made is None:
        wire.native_tries[key] = _TRIES
        return
    ranges: list[tuple[int, int] | None] = [None] * len(params)
    for at, number in enumerate(order):
        low, high = made.ranges[at]
        found = ranges[number - 1]
        ranges[number - 1] = (
            (low, high) if found is None else (max(low, found[0]), min(high, found[1]))
        )
    if any(r is None or r[0] > r[1] for r in ranges):
        wire.native_tries[key] = _TRIES
        return
    # a DET parameter's place, among the statement's markers, as the client's parameter
    server_params = [
        ("det_int", order[cast(int, p[1])] - 1, p[2]) if p[0] == "det_int" else p
        for p in made.server_params
    ]
    design = veil.client.design_path
    stat = os.stat(design)
    if stat.st_mtime_ns != veil.design_version:
        return  # planned on a design the file no longer holds
    users = wire.users_path
    why = points.install(
        sql,
        list(key[1]),
        _libpq(),
        backend.connection_pointer(),
        made.server_sql,
        server_params,
        ranges,
        made.outputs,
        made.row_id,
        outcome[1],
        (str(design), (stat.st_mtime_ns, stat.st_size)),
        None if users is None else (str(users), _file_stamp(users)),
        [text for text, _ in params],
        _rows(outcome[2]),
    )
    if why is None:
        wire.native_tries[key] = _TRIES
    else:
        log.debug("statement %r is not answered natively: %s", sql, why)


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
