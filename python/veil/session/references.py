"""FOREIGN KEYs, checked by the client on every write of the referencing and referenced tables.

The server cannot compare ciphertexts of two tables unless they share a key,
so the client checks, in the writing transaction, as PostgreSQL's NO ACTION
does at the end of each statement:

- a written row's key (all its columns non-null: MATCH SIMPLE) must name a
  row of the parent table; the client reads those parent rows (a Veil query)
  and *locks* them in its transaction, so no other client deletes or re-keys
  them before it commits;
- a deleted (or re-keyed) parent row must not be referenced any more; the
  client asks the child table, inside the transaction, after its own delete.

The hold (``veil.session.row_locks.hold_keys``) lasts until commit. On
PostgreSQL it is FOR KEY SHARE, as PostgreSQL's own foreign keys take: a
concurrent delete of the parent waits and then finds the new child, while
writers of children of one parent do not wait for each other. DuckDB has no
row locks: there the parent rows are rewritten in place, and of two
transactions writing one row DuckDB aborts one (the statement runs again), so
writers of children of one parent retry: the price of checking on the client.
"""

from __future__ import annotations

import dataclasses

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.design.model import PhysicalDesign, Reference, TableDesign
from veil.session.context import SessionContext
from veil.session.matching import matching_rows
from veil.session.row_locks import Locks
from veil.session.upsert import key_filters
from veil.sql.errors import ForeignKeyViolationError, QueryError
from veil.sql.parse import literal

_KEYS, _MINUS, _ORDINAL = "__veil_fk_rows", "__veil_fk_minus", "__veil_fk_n"
_CHUNK = 500  # changed keys per statement of an action


# -- declared (CREATE TABLE, ALTER TABLE) -----------------------------------------------


def resolved(
    design: PhysicalDesign, table: str, found: list[Reference], keys: list[list[str]]
) -> list[Reference]:
    """``found`` with parent columns named (a parent's primary key where none were given),
    each checked against a declared key of the parent (``keys``: the new table's own)."""
    done = []
    for reference in found:
        parent = design.tables.get(reference.parent)
        if parent is None and reference.parent != table:
            raise QueryError(
                f"foreign key {reference.name}: table {reference.parent} does not exist"
            )
        parent_keys = keys if reference.parent == table else parent.keys if parent else []
        columns = reference.parent_columns or (
            parent_keys[0]
            if parent_keys and (parent is None or parent.primary_key() is not None)
            else []
        )
        if not columns or set(columns) not in [set(k) for k in parent_keys]:
            raise QueryError(
                f"foreign key {reference.name}: there is no unique constraint matching the "
                f"given keys for referenced table {reference.parent}"
            )
        if len(columns) != len(reference.columns):
            raise QueryError(
                f"foreign key {reference.name}: {len(reference.columns)} referencing columns, "
                f"{len(columns)} referenced"
            )
        done.append(dataclasses.replace(reference, parent_columns=list(columns)))
    return done


def referencing(design: PhysicalDesign, table: str) -> list[tuple[TableDesign, Reference]]:
    """The foreign keys naming ``table`` as their parent, with the tables declaring them."""
    return [(t, r) for t in design.tables.values() for r in t.references if r.parent == table]


# -- checked (INSERT, UPDATE, DELETE) -----------------------------------------------------


def parent_locks(session: SessionContext, table: TableDesign, rows: pa.Table) -> Locks:
    """Refuse ``rows`` (to be written to ``table``) if one names a missing parent row;
    else the parent rows to hold in the write's transaction (``row_locks.hold_keys``)."""
    locks: Locks = []
    for reference in table.references:
        minus = None
        if reference.parent == table.name:  # a row may name a row of the same statement
            minus = rows.select(reference.parent_columns)
        keys = distinct_keys(session.local, rows, reference.columns, minus)
        if not len(keys):
            continue
        parent = session.design.table(reference.parent)
        named = keys.rename_columns(reference.parent_columns)
        wanted: list[exp.Expr] = [exp.column(c) for c in reference.parent_columns]
        found = [
            matching_rows(session, parent, wanted, w)
            for w in key_filters([reference.parent_columns], named)
        ]
        ids = pa.concat_arrays([f.column(f.num_columns - 1).combine_chunks() for f in found])
        if len(ids) < len(keys):
            raise ForeignKeyViolationError(
                f'insert or update on table "{table.name}" violates foreign key constraint '
                f'"{reference.name}": a key of ({", ".join(reference.columns)}) is not '
                f'present in table "{reference.parent}"'
            )
        locks.append((parent, ids))
    return locks


def check_unreferenced(
    session: SessionContext, table: TableDesign, old: pa.Table, new: pa.Table | None = None
) -> None:
    """Carry out the referencing tables' ON DELETE / ON UPDATE actions for the rows of
    ``table`` a write deleted (``old``, ``new`` None) or rewrote (``old``: the key columns
    they had, ``new``: what they became, row by row, maybe followed by inserted rows), then
    refuse the write if a key they had, and ``new`` rows do not, is still referenced.
    Called in the write's transaction, after it, as PostgreSQL runs its foreign keys'
    triggers at the end of the statement."""
    for child, reference in referencing(session.design, table.name):
        action = reference.on_delete if new is None else reference.on_update
        if action in ("cascade", "set null", "set default"):
            _act(session, child, reference, action, old, new)
            continue
        minus = None if new is None else new.select(reference.parent_columns)
        gone = distinct_keys(session.local, old, reference.parent_columns, minus)
        if len(gone) and _referenced(session, child, reference, gone):
            raise ForeignKeyViolationError(
                f'update or delete on table "{table.name}" violates foreign key '
                f'constraint "{reference.name}" on table "{child.name}": a key is still '
                "referenced"
            )


def _referenced(
    session: SessionContext, child: TableDesign, reference: Reference, keys: pa.Table
) -> bool:
    """Whether a row of ``child`` names one of ``keys`` (parent columns) by ``reference``."""
    named = keys.rename_columns(reference.columns)
    for where in key_filters([reference.columns], named):
        probe = exp.select(exp.Literal.number(1)).from_(child.name).where(where).limit(1)
        if session.query(probe).table.num_rows:
            return True
    return False


def _act(
    session: SessionContext,
    child: TableDesign,
    reference: Reference,
    action: str,
    old: pa.Table,
    new: pa.Table | None,
) -> None:
    """CASCADE, SET NULL or SET DEFAULT on the rows of ``child`` naming a key ``old`` rows
    had: each a DELETE or UPDATE of ``child`` run through Veil in this transaction, so
    its own constraints and foreign keys (further actions) apply in turn."""
    pairs = _changed(session.local, reference.parent_columns, old, new)
    if not len(pairs):
        return
    width = len(reference.columns)
    olds = pairs.select(list(range(width))).rename_columns(reference.columns)
    for start in range(0, len(olds), _CHUNK):
        chunk = olds.slice(start, _CHUNK)
        for where in key_filters([reference.columns], chunk):
            statement: exp.Expr
            if action == "cascade" and new is None:
                statement = exp.delete(child.name).where(where)
            else:
                values = _new_values(reference, action, pairs.slice(start, _CHUNK))
                statement = exp.update(child.name, values).where(where)
            session.write(statement)


def _new_values(reference: Reference, action: str, pairs: pa.Table) -> dict[str, object]:
    """What an UPDATE of the child sets its key columns to: null, DEFAULT, or (CASCADE)
    the new parent key of the row each old key belonged to."""
    if action == "set null":
        return {c: exp.null() for c in reference.columns}
    if action == "set default":
        return {c: exp.var("DEFAULT") for c in reference.columns}
    width = len(reference.columns)
    columns = [[literal(v) for v in pairs.column(i).to_pylist()] for i in range(2 * width)]
    matches = [
        exp.and_(
            *(
                exp.EQ(this=exp.column(c), expression=olds[k])
                for c, olds in zip(reference.columns, columns[:width], strict=True)
            )
        )
        for k in range(len(pairs))
    ]
    return {
        c: exp.Case(
            ifs=[exp.If(this=m, true=v) for m, v in zip(matches, news, strict=True)],
        )
        for c, news in zip(reference.columns, columns[width:], strict=True)
    }


def _changed(
    local: duckdb.DuckDBPyConnection, columns: list[str], old: pa.Table, new: pa.Table | None
) -> pa.Table:
    """The distinct non-null keys ``old`` rows had, for the rows whose key changed
    (every row, for a delete), each followed by the key its row has in ``new``."""
    o = [f'o."{c}"' for c in columns]
    present = " AND ".join(f"{c} IS NOT NULL" for c in o)
    if new is None:
        local.register(_KEYS, old.select(columns))
        try:
            return local.sql(
                f'SELECT DISTINCT {", ".join(o)} FROM "{_KEYS}" AS o WHERE {present}'
            ).to_arrow_table()
        finally:
            local.unregister(_KEYS)
    numbered = pa.array(range(len(old)), pa.int64())
    local.register(_KEYS, old.select(columns).append_column(_ORDINAL, numbered))
    local.register(_MINUS, new.slice(0, len(old)).select(columns).append_column(_ORDINAL, numbered))
    n = [f'n."{c}" AS "__veil_new_{i}"' for i, c in enumerate(columns)]
    differ = " OR ".join(f'o."{c}" IS DISTINCT FROM n."{c}"' for c in columns)
    try:
        return local.sql(
            f'SELECT DISTINCT {", ".join(o + n)} FROM "{_KEYS}" AS o JOIN "{_MINUS}" AS n '
            f'USING ("{_ORDINAL}") WHERE {present} AND ({differ})'
        ).to_arrow_table()
    finally:
        local.unregister(_KEYS)
        local.unregister(_MINUS)


def distinct_keys(
    local: duckdb.DuckDBPyConnection,
    rows: pa.Table,
    columns: list[str],
    minus: pa.Table | None = None,
) -> pa.Table:
    """The distinct ``columns`` tuples of ``rows`` with no null, less those in ``minus``."""
    listed = ", ".join(f'"{c}"' for c in columns)
    present = " AND ".join(f'"{c}" IS NOT NULL' for c in columns)
    sql = f'SELECT DISTINCT {listed} FROM "{_KEYS}" WHERE {present}'
    local.register(_KEYS, rows.select(columns))
    if minus is not None:
        local.register(_MINUS, minus.rename_columns(columns))
        sql += f' EXCEPT SELECT {listed} FROM "{_MINUS}"'
    try:
        return local.sql(sql).to_arrow_table()
    finally:
        local.unregister(_KEYS)
        if minus is not None:
            local.unregister(_MINUS)
