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

The lock (``veil.exec.row_locks``) holds until commit: on PostgreSQL a
concurrent delete waits and then finds the new child; DuckDB aborts one of
two transactions that write one row (the statement runs again). Writers of
children of one parent row therefore wait for each other, or on DuckDB
retry: the price of checking on the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.design.model import PhysicalDesign, Reference, TableDesign
from veil.exec.matching import matching_rows
from veil.exec.row_locks import lock_rows
from veil.exec.upsert import key_filters
from veil.sql.errors import ForeignKeyViolationError, QueryError

if TYPE_CHECKING:
    from veil.exec.session import Session

Locks = list[tuple[TableDesign, pa.Array]]  # parent rows to lock: their table, their row ids
_KEYS, _MINUS = "__veil_fk_rows", "__veil_fk_minus"


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
        done.append(Reference(reference.name, reference.columns, reference.parent, list(columns)))
    return done


def referencing(design: PhysicalDesign, table: str) -> list[tuple[TableDesign, Reference]]:
    """The foreign keys naming ``table`` as their parent, with the tables declaring them."""
    return [(t, r) for t in design.tables.values() for r in t.references if r.parent == table]


# -- checked (INSERT, UPDATE, DELETE) -----------------------------------------------------


def parent_locks(session: Session, table: TableDesign, rows: pa.Table) -> Locks:
    """Refuse ``rows`` (to be written to ``table``) if one names a missing parent row;
    else the parent rows to lock in the write's transaction (``lock``)."""
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


def lock(session: Session, locks: Locks) -> None:
    """Lock the parent rows ``locks`` names, in the current transaction (``row_locks``)."""
    for parent, ids in locks:
        lock_rows(session, parent, ids)


def check_unreferenced(
    session: Session, table: TableDesign, old: pa.Table, new: pa.Table | None = None
) -> None:
    """Refuse the write if a key ``old`` rows of ``table`` had, and ``new`` ones do not,
    is still named by a referencing row (called in the write's transaction, after it)."""
    for child, reference in referencing(session.design, table.name):
        minus = None if new is None else new.select(reference.parent_columns)
        gone = distinct_keys(session.local, old, reference.parent_columns, minus)
        if not len(gone):
            continue
        named = gone.rename_columns(reference.columns)
        for where in key_filters([reference.columns], named):
            probe = exp.select(exp.Literal.number(1)).from_(child.name).where(where).limit(1)
            if session.query(probe).table.num_rows:
                raise ForeignKeyViolationError(
                    f'update or delete on table "{table.name}" violates foreign key '
                    f'constraint "{reference.name}" on table "{child.name}": a key is still '
                    "referenced"
                )


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
