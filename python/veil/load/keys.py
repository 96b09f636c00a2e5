"""PRIMARY KEY and UNIQUE: a server unique index on the key columns' DET ciphertexts.

DET is injective under one key, so two rows have equal ciphertexts exactly
when they have equal values, and the server's unique index enforces the key
atomically among every client's writes, without learning a value: it already
sees which DET ciphertexts repeat (``docs/security.md``, "Declared keys").
A key's columns are therefore stored DET (a table created without it is
re-encrypted with it, as ALTER does), a primary key's are NOT NULL, and the
design lists the keys (``TableDesign.keys``) so that later rebuilds keep them.
Writes that would repeat a key are refused by the server, inside their
transaction, and reported as PostgreSQL's 23505 (``veil.session.constraints``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sqlglot import exp

from veil.design.model import DET, Column, TableDesign, opaque_name
from veil.session.constraints import not_null_violation, unique_violation
from veil.session.point_writes import row_id_index
from veil.sql.errors import QueryError, UnsupportedStatementError

if TYPE_CHECKING:
    from veil.session.session import Session


@dataclasses.dataclass
class Key:
    columns: list[str]
    primary: bool


def column_keys(item: exp.ColumnDef) -> list[Key]:
    """The keys a column definition declares (``id INT PRIMARY KEY``, ``code TEXT UNIQUE``)."""
    found = []
    for constraint in item.args.get("constraints") or []:
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.PrimaryKeyColumnConstraint | exp.UniqueColumnConstraint):
            primary = isinstance(kind, exp.PrimaryKeyColumnConstraint)
            found.append(Key([item.name.lower()], primary))
    return found


def table_key(item: exp.Expr) -> Key | None:
    """The key a table constraint declares (``PRIMARY KEY (a, b)``, ``UNIQUE (c)``)."""
    if isinstance(item, exp.Constraint) and len(item.expressions) == 1:
        item = item.expressions[0]  # CONSTRAINT name PRIMARY KEY (...)
    if isinstance(item, exp.PrimaryKey):
        return Key([_name(c) for c in item.expressions], primary=True)
    if isinstance(item, exp.UniqueColumnConstraint) and isinstance(item.this, exp.Schema):
        return Key([_name(c) for c in item.this.expressions], primary=False)
    return None


def _name(node: exp.Expr) -> str:
    return (node.this if isinstance(node, exp.Ordered) else node).name.lower()


def checked(keys: list[Key], columns: list[Column], table: str) -> list[Key]:
    """``keys`` with the primary one first; errors for unknown columns or two primaries."""
    names = {c.name for c in columns}
    for key in keys:
        unknown = [c for c in key.columns if c not in names]
        if unknown:
            raise QueryError(f"key column {unknown[0]} does not exist in table {table}")
        if len(set(key.columns)) != len(key.columns):
            raise QueryError(f"a key of {table} names a column twice")
    primaries = [k for k in keys if k.primary]
    if len(primaries) > 1:
        raise QueryError(f"multiple primary keys for table {table} are not allowed")
    return primaries + [k for k in keys if not k.primary]


def with_keys(columns: list[Column], keys: list[Key]) -> list[Column]:
    """The columns, a primary key's NOT NULL."""
    required = {c for k in keys if k.primary for c in k.columns}
    return [dataclasses.replace(c, not_null=c.not_null or c.name in required) for c in columns]


def check_existing(session: Session, table: str, keys: list[Key]) -> None:
    """Refuse keys the rows already break (a null in a primary key, a repeated value)."""
    for key in keys:
        listed = ", ".join(f'"{c}"' for c in key.columns)
        if key.primary:
            nulls = " OR ".join(f'"{c}" IS NULL' for c in key.columns)
            found = session.run(f'SELECT {listed} FROM "{table}" WHERE {nulls} LIMIT 1').table
            if found.num_rows:
                column = next(c for c in key.columns if found.column(c)[0].as_py() is None)
                raise not_null_violation(table, column)
        present = " AND ".join(f'"{c}" IS NOT NULL' for c in key.columns)
        repeated = session.run(
            f'SELECT 1 FROM "{table}" WHERE {present} GROUP BY {listed} HAVING count(*) > 1 LIMIT 1'
        ).table
        if repeated.num_rows:
            design = session.design.tables[table]
            raise unique_violation(dataclasses.replace(design, keys=[key.columns]))


def install(session: Session, name: str, keys: list[Key]) -> None:
    """Unique indexes on the keys' DET columns, and the keys in the design."""
    if not keys:
        return
    with session.client.design_lock():
        design = session.client.design(session.master)
        table = design.tables[name]
        for key in keys:
            session.backend.execute(_unique_index(table, key))
        if session.backend.dialect == "postgres":
            # a table with a key is written by key: those writes find their rows by row
            # id, and made later, under concurrent writers, the index waits for a moment
            # when no transaction holds the table (``point_writes._index_row_ids``)
            session.backend.execute(row_id_index(table))
        table.keys = [k.columns for k in keys]
        design.save(session.client.design_path)


def _unique_index(table: TableDesign, key: Key) -> str:
    columns = []
    for column in key.columns:
        enc = table.find(column, DET)
        if enc is None or enc.onion:
            raise UnsupportedStatementError(
                f"a key on {table.name}.{column} needs the column stored DET, which this "
                "table's design (onions) does not give; recreate the table with CREATE TABLE"
            )
        columns.append(f'"{enc.name}"')
    return (
        f'CREATE UNIQUE INDEX "{opaque_name("k")}" ON "{table.server_name}" ({", ".join(columns)})'
    )
