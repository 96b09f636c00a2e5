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
from veil.design.model import DET, OPE, RND, Encryption, TableDesign
from veil.encoding import DATE_KIND, DECIMAL_KIND, INT_KIND, STRING_KIND
from veil.exec.direct import projection
from veil.session.row_ids import allocate
from veil.session.set_values import Assignment
from veil.session.templates import Template, shape
from veil.sql.plan import RND_ROW_ID, ROW_ID, Aggregation
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


class _Later:
    """A shape whose plan is not verified yet: ask again after another run."""


LATER = _Later()


def point_plan(session: Session, sql: str, args: Sequence[object]) -> PointPlan | _Later | None:
    """The native parts of ``sql``'s plan for arguments like ``args``; None if not one,
    ``LATER`` if its template is not verified yet."""
    kinds = shape(args)
    if kinds is None or not all(_integer(a) for a in args):
        return None
    found = session.plan_of_shape(sql, kinds)
    if found is None or found.template is None or not found.template.verified:
        return LATER
    plan, template = found.plan, found.template
    seen = projection(plan)
    if seen is None or len(template.rendered) != 1:
        return None
    scan, pairs = seen
    ((server_sql, rendered),) = template.rendered.values()
    fetched = scan.fetched()
    counts = _counted(scan.aggregation)
    if counts is None:
        return None
    if counts:  # COUNT(*) by key: the server's one row, as it comes
        names = ["COUNT(*)"] * counts
    else:
        names = [scan.table.row_id if enc is None else enc.name for _, enc in fetched]
    if not server_sql.startswith(f"SELECT {', '.join(names)} FROM "):
        return None  # the statement's columns are not the scan's, in its order
    ranges = [_range(value) for value in args]
    server_params = _server_params(session, template, rendered, ranges)
    if server_params is None:
        return None
    at = {column: i for i, (column, _) in enumerate(fetched)}
    row_id = at.get(RND_ROW_ID, at.get(ROW_ID))
    outputs: list[tuple[int, tuple[object, ...], tuple[object, ...]]] = []
    for column, _ in pairs:
        index = at.get(column)
        if index is not None and counts:
            outputs.append((index, ("plain",), ("int", 64)))
            continue
        enc = fetched[index][1] if index is not None else None
        if index is None or enc is None:
            return None
        made = _output(session, scan.table, enc)
        if made is None:
            return None
        outputs.append((index, *made))
    return PointPlan(server_sql, server_params, ranges, outputs, row_id)


def _counted(aggregation: Aggregation | None) -> int | None:
    """How many ``COUNT(*)`` a whole-table aggregation is (0: none, a plain scan); None
    if it is another aggregation."""
    if aggregation is None:
        return 0
    if aggregation.keys or aggregation.hom_product is not None or aggregation.id_bit:
        return None
    if aggregation.word_sum is not None or not aggregation.items:
        return None
    for item in aggregation.items:
        if item.kind != "COUNT" or item.enc is not None or item.count_key is not None:
            return None
        if item.null_field is not None or item.server is not None:
            return None
    return len(aggregation.items)


def _server_params(
    session: Session, template: Template, rendered: list[object], ranges: list[tuple[int, int]]
) -> list[tuple[object, ...]] | None:
    """The server statement's parameters: DET slots of bare integer arguments (narrowing
    ``ranges`` to their columns' types) and constants; None if another kind."""
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
    return server_params


def _integer(value: object) -> bool:
    """An int parameter, or an integer read off a statement's text (``TextInt``)."""
    return isinstance(value, int) and not isinstance(value, bool)


TEXT = (1, 0)  # a parameter's range when it is text (``rust/veil-py/src/point``)


def _range(value: object) -> tuple[int, int]:
    """The integers of ``value``'s literal type and sign (``templates.shape``'s key)."""
    assert isinstance(value, int)
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


@dataclass(frozen=True)
class PointUpdate:
    """A point UPDATE in native terms (``rust/veil-py/src/point/write.rs``)."""

    table: str
    server_table: str
    match_sql: str
    match_params: list[tuple[object, ...]]
    ranges: list[tuple[int, int]]
    row_id: int  # the match's fetched column of row ids
    update_sql: str
    update_types: list[int]
    # ("new_id",), ("old_id",), ("reseal_word", column, key, bits),
    # ("reseal_bytes", column, key), ("assigned_text", param, key),
    # ("assigned", key, bits, param, sign, source_bits,
    # column_bits, (column, opener) or None)
    update_params: list[tuple[object, ...]]


def point_update(session: Session, sql: str, args: Sequence[object]) -> PointUpdate | _Later | None:
    """The native parts of the kept point UPDATE of ``sql`` (``veil.session.point_writes``)
    for arguments like ``args``; ``LATER`` while its match is not verified; None unless
    every part is one written out here: integer or text SET values of the table's
    row-bound RND columns, the row's other row-bound columns moved to its new id as
    stored, nothing else of the table written (no Paillier group, blocks, ASHE words,
    onion layers, foreign keys or CHECKs; no assigned column with another copy or in a
    key)."""
    from veil.session import point_writes  # (as the session imports it: when first needed)

    kinds = shape(args)
    if kinds is None or not all(_integer(a) or type(a) is str for a in args):
        return None
    write = point_writes.kept(session.shape_scope, session.shape_key(sql, kinds))
    if write is None:
        return LATER
    if write.kind != "UPDATE" or write.fast is None or write.located:
        return None
    template, plan = write.template, write.plan
    if template is None or plan is None or template.refused:
        return LATER if template is None or plan is None else None
    pinned: dict[int, object] = {}
    if not template.verified:  # it answers the values it was planned with (``_fits``)
        values = [args[i] for i in write.where]
        if any(
            type(a) is not type(b) or a != b for a, b in zip(values, template.values, strict=True)
        ):
            return LATER  # its second planning, with other values, checks the first's
        pinned = dict(zip(write.where, template.values, strict=True))
    if len(template.rendered) != 1:
        return None
    table = session.design.tables.get(write.table.name)
    if table is None or not _plainly_written(session, table, write.assigned):
        return None
    texts = {a.param for a in write.fast if a.bits == 0}
    if len(plan.scans) != 1 or any((type(v) is str) != (i in texts) for i, v in enumerate(args)):
        return None  # a text value only where a text column is set to it
    ranges = [TEXT if type(value) is str else _range(value) for value in args]
    for index, value in pinned.items():  # pgbench's one branch: its key never changes
        if not _integer(value):
            return None
        assert isinstance(value, int)
        ranges[index] = (int(value), int(value))
    ((match_sql, rendered),) = template.rendered.values()
    match_params = _server_params(session, template, rendered, ranges)
    if match_params is None or any(p[0] == "det_int" and p[1] in texts for p in match_params):
        return None
    fetched = plan.scans[0].fetched()
    names = [table.row_id if enc is None else enc.name for _, enc in fetched]
    if not match_sql.startswith(f"SELECT {', '.join(names)} FROM "):
        return None
    by_source = {column: (i, enc) for i, (column, enc) in enumerate(fetched)}
    found = by_source.get(ROW_ID, by_source.get(RND_ROW_ID))
    if found is None:
        return None
    row_id = found[0]
    assignments = {a.column: a for a in write.fast}
    sets = [f"{_quoted(table.row_id)} = $1::bigint"]
    params: list[tuple[object, ...]] = [("new_id",)]
    types = [INT8]
    for enc in table.encryptions:
        if not enc.row_bound:
            continue
        made = _new_value(session, table, enc, assignments.get(enc.source), fetched)
        if made is None:
            return None
        params.append(made)
        bytes_ = made[0] in ("reseal_bytes", "assigned_text")
        types.append(BYTEA if bytes_ else INT8)
        sets.append(f"{_quoted(enc.name)} = ${len(params)}::{'bytea' if bytes_ else 'bigint'}")
    params.append(("old_id",))
    types.append(INT8)
    update = (
        f"UPDATE {_quoted(table.server_name)} SET {', '.join(sets)} "
        f"WHERE {_quoted(table.row_id)} = ${len(params)}::bigint"
    )
    return PointUpdate(
        table.name, table.server_name, match_sql, match_params, ranges, row_id, update, types,
        params,
    )  # fmt: skip


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _plainly_written(session: Session, table: TableDesign, assigned: set[str]) -> bool:
    """Whether a row of ``table`` is rewritten by its row-bound RND columns alone."""
    from veil.ciphers.blocks import block_columns
    from veil.session import references

    if table.hom is not None or table.sums is not None or table.layers_table:
        return False
    if table.checks or table.references or block_columns(table):
        return False
    if references.referencing(session.design, table.name):
        return False
    if any(assigned & set(key) for key in table.keys):
        return False
    for enc in table.encryptions:
        if enc.outer is not None or enc.scheme not in (DET, RND, OPE):
            return False
        if enc.source in assigned and enc.scheme != RND:
            return False  # another copy of an assigned value would need writing too
    return True


def _row_key(session: Session, table: TableDesign, enc: Encryption) -> tuple[object, int] | None:
    """The row-bound RND key of column ``enc`` and its width (0: 64 bits), where its
    cipher is that layer alone (a fitted copy, an onion or another scheme: None)."""
    cipher = session.ciphers.get(table, enc)
    if type(cipher) is not RowBoundCipher or cipher._inner is not None:
        return None
    layer = cipher._layer
    if not isinstance(layer, RowRnd):
        return None
    return layer._cipher, cipher._bits or 0


def _new_value(
    session: Session,
    table: TableDesign,
    enc: Encryption,
    assignment: Assignment | None,
    fetched: list[tuple[str, Encryption | None]],
) -> tuple[object, ...] | None:
    """What the UPDATE writes into row-bound column ``enc``."""
    found = _row_key(session, table, enc)
    if found is None:
        return None
    key, bits = found
    integral = enc.sql_type.kind == INT_KIND
    if assignment is None:
        at = next(
            (i for i, (_, e) in enumerate(fetched) if e is not None and e.name == enc.name), None
        )
        if at is None:
            return None
        if integral or enc.sql_type.kind in (DECIMAL_KIND, DATE_KIND):
            return ("reseal_word", at, key, bits)
        if enc.sql_type.kind == STRING_KIND:
            return ("reseal_bytes", at, key)
        return None
    if assignment.bits == 0:  # text set to a parameter
        if enc.sql_type.kind != STRING_KIND or enc.sql_type.name != "VARCHAR":
            return None
        return ("assigned_text", assignment.param, key)
    if not integral or enc.sql_type.name not in _INT_BITS:
        return None
    source = None
    if assignment.source is not None:
        place = next(
            (i for i, (c, e) in enumerate(fetched) if c == assignment.source and e is not None),
            None,
        )
        if place is None:
            return None
        source_enc = fetched[place][1]
        assert source_enc is not None
        opened = _output(session, table, source_enc)
        if opened is None or opened[0][0] not in ("rnd_word", "det_int"):
            return None
        source = (place, opened[0])
    return (
        "assigned", key, bits, assignment.param, assignment.sign, assignment.source_bits,
        assignment.bits, source,
    )  # fmt: skip


def write_begin(session: Session, name: str, server_name: str) -> int | None:
    """Before a native point UPDATE of table ``name``: its write lock held (until the
    transaction ends, or ``write_end`` outside one, as for the session's own writes),
    the design still the plan's, and the row's fresh id; None: the session writes it."""
    session.table_locks.take(name)
    if session.design_file_stamp() != session.design_version:
        return None  # a rebuild swapped the table before the lock was had
    table = session.design.tables.get(name)
    if table is None or table.server_name != server_name:
        return None
    return allocate(session.backend, table, 1)


def write_end(session: Session) -> None:
    """After a native point UPDATE outside a transaction: the table locks ``write_begin``
    took go, as at the end of the session's own autocommit writes."""
    if not session.in_transaction and not session.writes_running:
        session.table_locks.release()


@dataclass(frozen=True)
class PointInsert:
    """A one-row INSERT in native terms (``rust/veil-py/src/point/write.rs``)."""

    table: str
    server_table: str
    insert_sql: str
    insert_types: list[int]
    ranges: list[tuple[int, int]]  # per argument, as ``PointPlan``'s
    # ("new_id",), ("int", param, negated, column bits, key, bits), ("text", param, key),
    # ("fixed", encoded value or None, key, bits), ("clock", key, bits)
    values: list[tuple[object, ...]]


def point_insert(session: Session, sql: str, args: Sequence[object]) -> PointInsert | _Later | None:
    """The native parts of the kept one-row INSERT of ``sql`` (``veil.session.point_inserts``)
    for arguments like ``args``; None unless each column is stored as row-bound RND alone
    and takes a bare integer or text parameter, a constant or ``CURRENT_TIMESTAMP``, on a
    table written by its rows alone (``_plainly_written``; no identity, no key)."""
    from veil.encoding import TIMESTAMP_KIND, TIMESTAMPTZ_KIND, encode
    from veil.session import point_inserts

    kinds = shape(args)
    if kinds is None or not all(_integer(a) or type(a) is str for a in args):
        return None
    kept = point_inserts.kept(session.shape_scope, session.shape_key(sql, kinds))
    if kept is None:
        return LATER
    table = session.design.tables.get(kept.table.name)
    if table is None or table.server_name != kept.table.server_name or table.keys:
        return None
    if not _plainly_written(session, table, set()):
        return None
    by_source = {e.source: e for e in table.encryptions}
    if len(by_source) != len(table.encryptions) or set(by_source) != {
        c.name for c in table.columns
    }:
        return None  # one stored form per column
    ranges = [TEXT if type(v) is str else _range(v) for v in args]
    names, types = [table.row_id], [INT8]
    values: list[tuple[object, ...]] = [("new_id",)]
    for column, source in zip(table.columns, kept.sources, strict=True):
        enc = by_source[column.name]
        found = _row_key(session, table, enc)
        if column.identity or column.sequence or found is None:
            return None
        key, bits = found
        kind, name = enc.sql_type.kind, enc.sql_type.name
        text = kind == STRING_KIND and name == "VARCHAR"
        value: tuple[object, ...]
        if source.param is not None:
            given = args[source.param]
            if type(given) is str and text and not source.negated:
                value = ("text", source.param, key)
            elif _integer(given) and kind == INT_KIND and name in _INT_BITS:
                width = _INT_BITS[name]
                value = ("int", source.param, source.negated, width, key, bits)
                low, high = ranges[source.param]
                half = 1 << (width - 1)
                if source.negated:  # -value must lie in the column's range
                    ranges[source.param] = (max(low, -half + 1), min(high, half))
                else:
                    ranges[source.param] = (max(low, -half), min(high, half - 1))
            else:
                return None
        elif source.fixed is not None:
            encoded = encode(source.fixed.cast(enc.sql_type.arrow_type()), enc.sql_type)
            stored = encoded[0].as_py()
            if stored is None and column.not_null:
                return None
            if stored is not None and type(stored) is not (bytes if text else int):
                return None
            value = ("fixed", stored, key, bits)
        elif source.clock is not None:
            utc = str(source.clock) in ("UTC", "Etc/UTC")
            if not (kind == TIMESTAMPTZ_KIND or (kind == TIMESTAMP_KIND and utc)):
                return None
            value = ("clock", key, bits)
        else:
            return None  # a value the catalogue casts each run
        names.append(enc.name)
        values.append(value)
        types.append(BYTEA if value[0] == "text" or (value[0] == "fixed" and text) else INT8)
    if any(r[0] > r[1] and r != TEXT for r in ranges):
        return None
    marks = ", ".join(
        f"${i}::{'bytea' if t == BYTEA else 'bigint'}" for i, t in enumerate(types, 1)
    )
    insert = (
        f"INSERT INTO {_quoted(table.server_name)} ({', '.join(map(_quoted, names))}) "
        f"VALUES ({marks})"
    )
    return PointInsert(table.name, table.server_name, insert, types, ranges, values)
