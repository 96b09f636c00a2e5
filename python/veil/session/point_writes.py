"""UPDATE and DELETE planned once per statement shape (issue 41).

``UPDATE accounts SET balance = balance + ? WHERE id = ?`` used to plan its
row match every run: the match was one query whose local plan computed the
SET values, so each new value made a new plan (~10-25 ms). Here a write's
shape (its text and its parameters' types, under one design version) keeps:

- the match: ``SELECT <columns> FROM t WHERE <where>`` with each row's id,
  with no SET value in it, planned as a template of the SELECTs'
  (``veil.session.templates``): while planned, each ciphertext made from a
  parameter becomes a slot; a second planning with other values must make
  the same plan but for the slots, and from then on each run encrypts the
  new values into the slots (``Session.run_template``) and, where the
  answer is the fetched rows, never touches the local DuckDB
  (``veil.exec.direct``). A WHERE without parameters plans once;
- the SET values: one local statement over the matched rows, rendered once
  with a mark in place of each parameter, each run writing the values in as
  the literals plaintext DuckDB binds them as (``literal``);
- then the write of ``veil.session.dml``, unchanged: fresh row ids, one
  transaction under the onion layers, every row read still there or the
  statement runs again (``dml.retried``), locks and constraints as before.

Only the shapes whose write needs nothing more are kept: one target table,
no FROM/USING, WITH, RETURNING or subquery, no DEFAULT or sequence call, no
other table's foreign key naming a column written (or, for DELETE, the
table at all). Everything else, a value a slot's type cannot hold exactly,
and a template the second planning refuses, runs the general path of
``veil.session.dml`` as before. A peel while planning, or any design change
(its version is in the key), plans again.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.backends.base import BackendError
from veil.design.model import Reference, TableDesign
from veil.encoding import exact_arrow
from veil.exec.server import FetchStats
from veil.session import dml, point_inserts, references, set_values, stored_columns
from veil.session.context import SessionContext
from veil.session.defaults import is_default, mentions_sequences
from veil.session.plan_cache import Key, Recent
from veil.session.result import Result
from veil.session.templates import Recorder, Template, fingerprint
from veil.sql.errors import QueryError
from veil.sql.functions import is_repeatable
from veil.sql.parse import literal
from veil.sql.plan import ROW_ID, SplitPlan
from veil.sql.slots import PARAM

_ROWS = "__veil_point_rows"
_MARK = "__veil_param_"
_MARKS = re.compile(rf'"?{_MARK}(\d+)"?')
_KEPT_SIZE = 256
_VERBS = ("UPDATE", "DELETE")


@dataclass
class PointWrite:
    """A write's shape: its match's plan and how its new rows are made."""

    kind: str  # UPDATE or DELETE
    table: TableDesign  # as planned (its server tables: a rebuild makes another)
    stamp: int  # the design file's version it was planned on
    match: exp.Select  # bound to the values it was first planned with
    new_rows: str  # UPDATE: the SET values' local SQL over _ROWS, parameters marked
    assigned: set[str] = field(default_factory=set)
    where: tuple[int, ...] = ()  # the parameters the match reads, by index
    reads: dict[str, str] = field(default_factory=dict)  # columns the SET values read: types
    plan: SplitPlan | None = None  # kept once a run planned it reusably
    template: Template | None = None  # None: the WHERE has no parameter
    fast: set_values.Assignments | None = None  # UPDATE: SET values made without DuckDB
    # UPDATE: the columns the match decrypts, then those it may read as stored, each with
    # its server column, and the assigned ones it leaves out (``veil.session.stored_columns``)
    decrypted: list[str] = field(default_factory=list)
    sealable: dict[str, str] = field(default_factory=dict)
    placed: list[str] = field(default_factory=list)
    # UPDATE: a kept DET column read as stored, and its server column, by whose index the
    # write finds each row (``stored_columns.locator``)
    located: tuple[str, str] | None = None


# the write shapes of this process, by client directory, access and shape key (None: a
# statement this path does not take)
_KEPT: Recent[tuple[object, ...], PointWrite | None] = Recent(_KEPT_SIZE)
# tables whose row ids have an index on their server (``_index_row_ids``), by server
_INDEXED: set[tuple[str, str]] = set()
# those whose index a write inside a transaction could not make yet: when to try again
_INDEX_LATER: dict[tuple[str, str], float] = {}
_INDEXED_LOCK = threading.Lock()
_INDEX_WAIT = "200ms"  # how long the second connection waits for the table's lock
_INDEX_RETRY = 2.0  # seconds before a write tries again
log = logging.getLogger(__name__)


class _Replan(Exception):
    """The kept shape no longer fits (design moved, value not exact): nothing was written."""


def answer(
    session: SessionContext,
    sql: str,
    params: Sequence[object],
    shape: Key,
    scope: object,
    fits: Callable[[], bool] | None = None,
) -> Result | None:
    """The statement run as its kept shape (an UPDATE or DELETE here, an INSERT in
    ``veil.session.point_inserts``); None: the general path runs it (nothing written).

    ``shape``: the session's key of ``sql``'s shape (text, parameter types, design
    version); ``scope``: what else a session's plans are kept apart by (its client
    directory and access to files); ``fits``: whether ``sql`` with ``params`` means what
    the statement as written does (its literals made parameters: ``veil.sql.literals``),
    asked before a new shape is kept.
    """
    verb = sql.lstrip()[:6].upper()
    key = (scope, *shape)
    if verb == "INSERT":  # one row of VALUES (``point_inserts``)
        return point_inserts.answer(session, sql, params, key, fits)
    if verb not in _VERBS:
        return None
    known, write = _KEPT.get(key)
    if known and write is None:
        return None  # a shape this path does not take
    if write is None:
        if fits is not None and not fits():
            return None
        if mentions_sequences(sql):  # admitting it would take their numbers (``point_inserts``)
            _KEPT.put(key, None)
            return None
        tree = session.admitted(sql, list(params))
        write = prepared(session, tree)
        if write is None:
            _KEPT.put(key, None)
            return None
        return _run(session, write, params, key, planned=True)
    return _run(session, write, params, key, planned=False)


def kept(scope: object, shape: Key) -> PointWrite | None:
    """The write kept for a statement's ``shape`` (``answer``'s key; None: none yet, or not
    one this path takes)."""
    return _KEPT.peek((scope, *shape))


def prepared(session: SessionContext, tree: exp.Expr) -> PointWrite | None:
    """``tree``'s point write, planned with its values; None if its shape is not one."""
    if not isinstance(tree, exp.Update | exp.Delete) or not _plain(tree):
        return None
    target = tree.this
    table = session.design.tables.get(target.name.lower())
    if table is None:
        return None
    if isinstance(tree, exp.Update):
        tree = dml.plain_assignments(table, tree)
        if any(is_default(a.expression) for a in tree.expressions):
            return None
    referenced = references.referencing(session.design, table.name)
    assigned = {a.this.name.lower() for a in tree.expressions} if tree.key == "update" else set()
    if referenced and (tree.key == "delete" or assigned & _parent_columns(referenced)):
        return None
    dml.check(session, tree)  # DuckDB's binder: the shape's errors, in the user's terms
    alias = target.alias_or_name
    reads = _reads(table, tree) if isinstance(tree, exp.Update) else {}
    fast = set_values.assignments(table, tree) if isinstance(tree, exp.Update) else None
    # SET values made from the parameters alone need no old value of their columns
    held = assigned if fast is not None else set()
    decrypted, sealable, placed = (
        stored_columns.split(session, table, assigned, set(reads), held)
        if tree.key == "update"
        else ([], {}, [])
    )
    located = stored_columns.locator(session, table, assigned) if tree.key == "update" else None
    if located is not None and located[0] in decrypted:
        located = None  # read as its value (a SET value reads it)
    fetched = [*decrypted, *sealable, *([located[0]] if located else [])]
    columns: list[exp.Expr] = [exp.column(c, table=alias) for c in fetched]
    match = exp.select(*(columns or [exp.Literal.number(1)])).from_(target.copy())
    where = tree.args.get("where")
    if where is not None:
        match = match.where(where.this.copy())
    return PointWrite(
        kind=tree.key.upper(),
        table=table,
        stamp=session.design_file_stamp(),
        match=match,
        new_rows=_new_rows_sql(table, tree) if isinstance(tree, exp.Update) else "",
        reads=reads,
        assigned=assigned,
        where=tuple(sorted({n.meta[PARAM][1] for n in match.walk() if PARAM in n.meta})),
        fast=fast,
        decrypted=decrypted,
        sealable=sealable,
        placed=placed,
        located=located,
    )


def _plain(tree: exp.Update | exp.Delete) -> bool:
    """One target table, nothing but SET and WHERE, no subquery, same each run."""
    if any(tree.args.get(k) for k in ("from_", "using", "with_", "returning", "order", "limit")):
        return False
    if not isinstance(tree.this, exp.Table) or tree.this.args.get("db"):
        return False
    if any(tree.find_all(exp.Subquery, exp.Select, exp.Exists)):
        return False
    return is_repeatable(tree)


def _parent_columns(referenced: list[tuple[TableDesign, Reference]]) -> set[str]:
    return {c for _, r in referenced for c in r.parent_columns}


def _new_rows_sql(table: TableDesign, tree: exp.Update) -> str:
    """The SET values' SQL over the matched rows (``_ROWS``, as the statement's alias),
    each parameter a mark ``_MARK<n>``: one column a column assigned."""
    alias = tree.this.alias_or_name
    items: list[exp.Expr] = []
    for assignment in tree.expressions:
        column = table.column(assignment.this.name.lower())
        assert column is not None  # ``plain_assignments`` checked it
        marked = assignment.expression.copy().transform(_marked)
        items.append(exp.alias_(exp.cast(marked, column.type), column.name))
    select = exp.select(*items).from_(exp.to_table(_ROWS).as_(alias))
    return select.sql(dialect="duckdb")


def _reads(table: TableDesign, tree: exp.Update) -> dict[str, str]:
    """The columns the SET values read, with their types."""
    names = {c.name.lower() for a in tree.expressions for c in a.expression.find_all(exp.Column)}
    return {c.name: c.type for c in table.columns if c.name in names}


def _marked(node: exp.Expr) -> exp.Expr:
    if PARAM in node.meta:
        return exp.column(f"{_MARK}{node.meta[PARAM][1]}")
    return node


def _run(
    session: SessionContext,
    write: PointWrite,
    params: Sequence[object],
    key: tuple[object, ...],
    *,
    planned: bool,
) -> Result | None:
    """``write`` with ``params``; None if the kept shape no longer fits (nothing written)."""
    stats = FetchStats()
    stats.plan_hit = True  # until the match is planned

    def attempt() -> Result:
        if session.design_file_stamp() != write.stamp:
            raise _Replan  # a peel, DDL, a redesign: plan on the new design
        matched, plan = _matched(session, write, params, stats, key, planned)
        _index_row_ids(session, write.table)  # before the write finds its rows by id
        table = session.design.table(write.table.name)
        row_ids = matched.column(matched.num_columns - 1).combine_chunks()
        if not len(row_ids):
            return Result(pa.table({}), 0, stats)
        if write.kind == "DELETE":
            dml.delete_rows(session, table, row_ids, stats=stats)
        else:
            names = [
                *write.decrypted,
                *write.sealable,
                *([write.located[0]] if write.located else []),
            ]
            columns = matched.select(list(range(len(names)))).rename_columns(names)
            columns, located = _located(write, columns, plan)
            rows, resealed = stored_columns.stored_rows(
                session, columns, write.decrypted, write.sealable, write.assigned, plan, table,
                row_ids, write.placed,
            )  # fmt: skip
            plain = _new_values(session, write, rows, params)
            dml.update_rows(
                session,
                table,
                row_ids,
                plain,
                write.assigned,
                stats=stats,
                resealed=resealed,
                located=located,
            )
        return Result(pa.table({}), len(row_ids), stats)

    try:
        return dml.retried(session, write.kind, write.table, attempt)
    except (_Replan, stored_columns.DesignMoved):
        _KEPT.discard(key)
        return None


def _located(
    write: PointWrite, columns: pa.Table, plan: SplitPlan
) -> tuple[pa.Table, dml.Located | None]:
    """The match's columns without the locator, and the locator's server column with each
    row's stored value; None unless the plan fetched it as stored."""
    if write.located is None:
        return columns, None
    column, server = write.located
    rest = columns.drop_columns([column])
    if len(plan.scans) != 1 or column not in plan.scans[0].ciphertext:
        return rest, None  # decrypted: no stored value to find the row by
    return rest, (server, columns.column(column).combine_chunks())


def _matched(
    session: SessionContext,
    write: PointWrite,
    params: Sequence[object],
    stats: FetchStats,
    key: tuple[object, ...],
    planned: bool,
) -> tuple[pa.Table, SplitPlan]:
    """The rows the write changes (its columns, then each row's id), and the plan run."""
    template = write.template
    kept = write.plan
    # a template not checked yet still answers the values it was planned with (a
    # branch key of a one-branch pgbench: the check needs another value, never sent)
    values = _where_values(write, params)
    if not planned and kept is not None and (template is None or _fits(template, values)):
        if template is None:
            return session.execute_plan(kept, stats), kept
        ran = session.run_template(template, kept, tuple(params), stats)
        if ran is None:
            raise _Replan  # a value its slot's type cannot hold exactly
        return ran[1], ran[0]
    # plan with these values: the first run, or the second that checks the first's plan
    stats.plan_hit = False
    match = write.match if planned else _rebound(session, key, params)
    places = len({n.meta[PARAM][0] for n in match.walk() if PARAM in n.meta})
    recorder = Recorder(places) if places else None
    with session.recording(recorder):
        plan = session.plan(match, row_ids_of=match.args["from_"].this.alias_or_name)
    source = plan.local.args["from_"].this
    plan.local.append("expressions", exp.column(ROW_ID, table=source.alias_or_name))
    stored = dict(write.sealable)
    if write.located is not None:
        stored[write.located[0]] = write.located[1]
    stored_columns.leave_stored(plan, write.table.name, stored)
    table = session.execute_plan(plan, stats)
    _remember(write, plan, recorder, stats, values, key)
    return table, plan


def _where_values(write: PointWrite, params: Sequence[object]) -> tuple[object, ...]:
    return tuple(params[i] for i in write.where)


def _fits(template: Template, values: tuple[object, ...]) -> bool:
    """Whether ``template``'s plan answers ``values``: checked, or planned with them."""
    if template.verified:
        return True
    return not template.refused and all(
        type(a) is type(b) and a == b for a, b in zip(values, template.values, strict=True)
    )


def _rebound(
    session: SessionContext, key: tuple[object, ...], params: Sequence[object]
) -> exp.Select:
    """The match bound to ``params`` (the statement parsed again)."""
    tree = session.admitted(str(key[1]), list(params))
    again = prepared(session, tree)
    if again is None:
        raise _Replan
    return again.match


def _remember(
    write: PointWrite,
    plan: SplitPlan,
    recorder: Recorder | None,
    stats: FetchStats,
    params: Sequence[object],
    key: tuple[object, ...],
) -> None:
    """Keep ``plan`` as the shape's match, or check the kept one against it."""
    if not plan.pushdown or plan.fallback is not None or plan.peels:
        return  # planned on a design that is no longer the key's, or not reusable
    if recorder is None:  # the WHERE has no parameter: one plan answers every run
        write.plan = plan
        _KEPT.put(key, write)
        return
    if not recorder.complete:
        _KEPT.put(key, None)  # a parameter did not reach the server as a slot
        return
    made = fingerprint(plan, stats.remote_sql, recorder.uses)
    if write.template is None:
        write.template = Template(recorder.uses, made, tuple(params))
        write.plan = plan
        _KEPT.put(key, write)
        return
    write.template.check(made, params)
    if write.template.refused:
        _KEPT.put(key, None)


def row_id_index_name(table: TableDesign) -> str:
    """The name of the index on ``table``'s row ids (PostgreSQL)."""
    return f"{table.server_name}_row_ids"


def row_id_index(table: TableDesign) -> str:
    """The statement making the index on ``table``'s row ids, if it is not there."""
    name = row_id_index_name(table)
    return f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table.server_name}" ("{table.row_id}")'


def _index_row_ids(session: SessionContext, table: TableDesign) -> None:
    """An index on the row ids of a table written by key, on PostgreSQL, made once.

    A write finds the rows it read by their row ids: without an index the
    server scans the whole table for each (~60 ms of a 150,000-row table's
    UPDATE by key; ~90 ms of pgbench's million accounts). Row ids are public,
    so the index tells the server nothing new. DuckDB is left without (an
    index on a column every write changes measured both faster and slower
    there). A rebuilt table's server name is new, so it gets its own.

    Inside a transaction (pgbench's every write) it is made on the session's
    second connection (``Backend.autonomous``), which commits on its own: made
    in the transaction it would hold the table until the transaction ends. That
    connection's wait for the table is bounded (``_INDEX_WAIT``): another
    client's open transaction that wrote the table, or this one's, may be
    waiting on this session, a wait PostgreSQL cannot see as a deadlock. A
    try that gave up is made again by a later write, after ``_INDEX_RETRY``.
    """
    backend = session.backend
    if backend.dialect != "postgres":
        return
    key = (backend.url, table.server_name)
    with _INDEXED_LOCK:
        if key in _INDEXED or time.monotonic() < _INDEX_LATER.get(key, 0.0):
            return
        _INDEXED.add(key)
    # present already (made with the table's declared keys, or by another process): a
    # catalog read takes no lock on the table, where CREATE INDEX IF NOT EXISTS waits for
    # every open transaction that wrote it (8 pgbench clients always hold one)
    name = row_id_index_name(table)
    if any(found == name for found, _ in backend.indexes(table.server_name)):
        return
    made = row_id_index(table)
    own = not backend.in_transaction
    target = backend if own else backend.autonomous()
    try:
        with target.transaction():
            if not own:
                target.execute(f"SET LOCAL lock_timeout = '{_INDEX_WAIT}'")
            target.execute(made)
    except BackendError as exc:  # another client made it at once, or the wait ran out
        log.info("index on the row ids of %r not made (%s)", table.name, exc)
        with _INDEXED_LOCK:
            _INDEXED.discard(key)
            _INDEX_LATER[key] = time.monotonic() + _INDEX_RETRY


def _new_values(
    session: SessionContext, write: PointWrite, rows: pa.Table, params: Sequence[object]
) -> pa.Table:
    """The matched rows with the SET values in place, as DuckDB computes them.

    Values that read no column are computed once for all the rows; the few
    columns a value reads of a few rows are written into the statement as
    typed literals; else the rows are registered in the local DuckDB. The
    commonest shapes (``col = col + ?``) skip DuckDB (``set_values``).
    """
    if write.fast is not None:
        done = set_values.computed(write.fast, rows, params)
        if done is not None:
            return done
    sql = _MARKS.sub(lambda m: f"({_literal_sql(params[int(m.group(1))])})", write.new_rows)
    inline = _inline_rows(rows, write.reads)
    try:
        if inline is not None:
            # the FROM is the statement's last mention of _ROWS (values come before it)
            head, _, tail = sql.rpartition(_ROWS)
            computed = exact_arrow(session.local, head + inline + tail)
        else:
            session.local.register(_ROWS, rows)
            try:
                computed = exact_arrow(session.local, sql)
            finally:
                session.local.unregister(_ROWS)
    except duckdb.Error as exc:
        raise QueryError(str(exc).replace("\n", " ").strip()) from None
    if not write.reads and computed.num_rows == 1 and rows.num_rows != 1:
        computed = computed.take(pa.array([0] * rows.num_rows, pa.int64()))
    for name, column in zip(computed.column_names, computed.columns, strict=True):
        at = rows.schema.get_field_index(name)
        rows = rows.set_column(at, name, column.cast(rows.schema.field(at).type))
    return rows


# the types whose values a literal writes exactly (``literal``)
_LITERAL_TYPES = (
    pa.types.is_integer,
    pa.types.is_string,
    pa.types.is_boolean,
    pa.types.is_date32,
    pa.types.is_decimal128,
)
_INLINE_ROWS = 16


def _inline_rows(rows: pa.Table, reads: dict[str, str]) -> str | None:
    """The columns ``reads`` of ``rows`` as a subquery of literals; None if the rows are
    many or a column's values may not come back exactly from a literal."""
    if not reads:
        return "(SELECT 1)"
    if rows.num_rows > _INLINE_ROWS:
        return None
    for name in reads:
        kind = rows.schema.field(name).type
        if not any(test(kind) for test in _LITERAL_TYPES):
            return None
    selects = []
    for row in rows.select(list(reads)).to_pylist():
        items = [
            f"CAST({_literal_sql(row[name])} AS {kind}) AS {_quoted(name)}"
            for name, kind in reads.items()
        ]
        selects.append(f"SELECT {', '.join(items)}")
    return f"({' UNION ALL '.join(selects)})"


def _literal_sql(value: object) -> str:
    """``literal(value)``'s SQL, written directly for the common kinds (building its type
    node parses the type's name: ~0.1 ms a value)."""
    if type(value) is int and -(2**63) <= value < 2**63:
        return f"CAST('{value}' AS {'INTEGER' if -(2**31) <= value < 2**31 else 'BIGINT'})"
    if type(value) is str:
        return "'" + value.replace("'", "''") + "'"
    return literal(value).sql(dialect="duckdb")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
