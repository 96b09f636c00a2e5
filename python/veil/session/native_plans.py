"""A point query's plan in the terms the wire server runs without Python (issue 41).

``veil serve`` answers a prepared point query natively (``veil.serve.native``,
``rust/veil-py/src/point``) once the session has planned its shape as a
verified template whose answer is its fetched rows (``veil.session.templates``,
``veil.exec.direct``). This module reads such a plan into plain parts: the
server statement, each of its parameters (a constant, or the DET ciphertext of
one of the statement's integer parameters, under which key form), the range
each parameter must keep for the plan to hold, and for each output column the
fetched column it decrypts, under which cipher form, written how.

Only the forms written out below are taken; anything else (another scheme or
type, a slot made of an expression, a plan of several statements, an
aggregate) gives None and the session answers as before. The wire server
checks each plan against the session's own answer before it keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from veil.ciphers.columns import Int32Form, _Int64Cipher
from veil.ciphers.fitted_rnd import FittedRowBound
from veil.ciphers.row_bound import RowBoundCipher
from veil.crypto.det import DetBytes, DetInt
from veil.crypto.det_narrow import NarrowDet
from veil.crypto.rowrnd import RowRnd
from veil.design.model import DET, Encryption
from veil.encoding import DATE_KIND, DECIMAL_KIND, INT_KIND, STRING_KIND
from veil.exec.direct import projection
from veil.session.templates import shape
from veil.sql.plan import RND_ROW_ID, ROW_ID
from veil.sql.slots import PARAM, Pending

if TYPE_CHECKING:
    from veil.session.session import Session

INT8, BYTEA = 20, 17  # the type OIDs psycopg sends Python ints and bytes as
_INT_BITS = {"TINYINT": 8, "SMALLINT": 16, "INTEGER": 32, "BIGINT": 64}


@dataclass(frozen=True)
class PointPlan:
    server_sql: str
    # ("fixed", bytes, oid) or ("det_int", argument index, DET form)
    server_params: list[tuple[object, ...]]
    # per argument of the statement: the [low, high] its integer must lie in
    ranges: list[tuple[int, int]]
    # (fetched column, opener, format) per output column
    outputs: list[tuple[int, tuple[object, ...], tuple[object, ...]]]
    row_id: int | None  # the fetched column of the row ids, if an opener needs them


def point_plan(session: Session, sql: str, args: Sequence[object]) -> PointPlan | None:
    """The native parts of ``sql``'s plan for arguments like ``args``; None if not one."""
    kinds = shape(args)
    if kinds is None or any(type(a) is not int for a in args):
        return None
    found = session.plan_of_shape(sql, kinds)
    if found is None or found.template is None or not found.template.verified:
        return None
    plan, template = found.plan, found.template
    seen = projection(plan)
    if seen is None or seen[0].aggregation is not None or len(template.rendered) != 1:
        return None
    scan, pairs = seen
    ((server_sql, rendered),) = template.rendered.values()
    fetched = scan.fetched()
    names = [scan.table.row_id if enc is None else enc.name for _, enc in fetched]
    if not server_sql.startswith(f"SELECT {', '.join(names)} FROM "):
        return None  # the statement's columns are not the scan's, in its order
    ranges = [_range(value) for value in args]
    server_params: list[tuple[object, ...]] = []
    for param in rendered:
        if isinstance(param, Pending):
            use = template.uses[param.number]
            if PARAM not in use.node.meta or use.enc.scheme != DET:
                return None
            if use.enc.sql_type.kind != INT_KIND:
                return None
            form = _det_int(session.ciphers.get(session.owner_of(use.enc), use.enc))
            bits = _INT_BITS.get(use.enc.sql_type.name)
            if form is None or bits is None:
                return None
            index = use.node.meta[PARAM][1]
            low, high = ranges[index]
            ranges[index] = (max(low, -(1 << (bits - 1))), min(high, (1 << (bits - 1)) - 1))
            server_params.append(("det_int", index, form))
        elif type(param) is int:
            server_params.append(("fixed", param.to_bytes(8, "big", signed=True), INT8))
        elif type(param) is bytes:
            server_params.append(("fixed", param, BYTEA))
        else:
            return None
    at = {column: i for i, (column, _) in enumerate(fetched)}
    row_id = at.get(RND_ROW_ID, at.get(ROW_ID))
    outputs = []
    for column, _ in pairs:
        index = at.get(column)
        enc = fetched[index][1] if index is not None else None
        if index is None or enc is None:
            return None
        made = _output(session, scan.table, enc)
        if made is None:
            return None
        outputs.append((index, *made))
    return PointPlan(server_sql, server_params, ranges, outputs, row_id)


def _range(value: object) -> tuple[int, int]:
    """The integers of ``value``'s literal type and sign (``templates.shape``'s key)."""
    assert type(value) is int
    if -(1 << 31) <= value < (1 << 31):
        return -(1 << 31), (1 << 31) - 1
    if value >= 0:
        return 1 << 31, (1 << 63) - 1
    return -(1 << 63), -(1 << 31) - 1


def _det_int(cipher: object) -> tuple[object, ...] | None:
    """The DET integer form of ``cipher``, in the native plan's terms."""
    if type(cipher) is Int32Form:
        cipher = cipher._inner
    if type(cipher) is not _Int64Cipher:
        return None
    inner = cipher._inner
    if type(inner) is NarrowDet and inner._wide.bits == 64:
        return ("narrow", inner._narrow._cipher, inner._wide._cipher, inner.bits)
    if type(inner) is DetInt and inner.bits == 64:
        return ("wide", inner._cipher)
    return None


def _output(
    session: Session, table: object, enc: Encryption
) -> tuple[tuple[object, ...], tuple[object, ...]] | None:
    """How a fetched column opens and is written; None if not natively."""
    kind, name = enc.sql_type.kind, enc.sql_type.name
    if kind == INT_KIND and name in _INT_BITS:
        how: tuple[object, ...] = ("int", _INT_BITS[name])
    elif kind == DECIMAL_KIND and enc.sql_type.precision <= 18:
        how = ("decimal", enc.sql_type.scale)
    elif kind == DATE_KIND:
        how = ("date",)
    elif kind == STRING_KIND and name == "VARCHAR":
        how = ("text",)
    else:
        return None
    cipher = session.ciphers.get(table, enc)  # type: ignore[arg-type]
    text = how[0] == "text"
    if type(cipher) is FittedRowBound and not text and isinstance(cipher._layer, RowRnd):
        opener: tuple[object, ...] = (
            "rnd_fitted", cipher._layer._cipher, cipher._width, cipher._low, cipher._fit,
        )  # fmt: skip
    elif type(cipher) is RowBoundCipher and cipher._inner is None:
        if not isinstance(cipher._layer, RowRnd):
            return None
        if text:
            opener = ("rnd_bytes", cipher._layer._cipher)
        else:
            opener = ("rnd_word", cipher._layer._cipher, cipher._bits or 0)
    elif type(cipher) is DetBytes and text:
        opener = ("det_bytes", cipher._cipher)
    elif not text and (form := _det_int(cipher)) is not None:
        opener = ("det_int", form)
    else:
        return None
    return opener, how
