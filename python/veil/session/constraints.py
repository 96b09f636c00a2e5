"""Constraints a table declares, checked on the client before anything is written.

The server holds ciphertexts and cannot check a value it cannot read, so the
client checks each INSERT's and UPDATE's new rows, whole columns at a time,
and refuses the statement before anything reaches the server. Violations
carry PostgreSQL's SQLSTATEs and messages, which name the table and the
column, never the value. NOT NULL (23502) and CHECK (23514) here, CHECKs
evaluated by the client's local DuckDB over the whole batch at once; PRIMARY
KEY and UNIQUE (23505) by the server's unique index on the key's DET
ciphertexts, whose refusal (``DuplicateKeyError``) is put in the user's
terms here.
"""

from __future__ import annotations

import re

import duckdb
import pyarrow as pa

from veil.design.model import TableDesign
from veil.errors import VeilError
from veil.sql.errors import (
    CheckViolationError,
    NotNullViolationError,
    QueryError,
    UniqueViolationError,
)

_CHECKED = "__veil_checked_rows"
# DuckDB's words for a NOT NULL violation in the client's catalogue
_DUCKDB_NOT_NULL = re.compile(r"NOT NULL constraint failed: (?:\"?[^.\s]+\"?\.)?\"?([^\s\"]+)\"?")


def check_rows(local: duckdb.DuckDBPyConnection, table: TableDesign, rows: pa.Table) -> None:
    """Refuse ``rows`` (the table's columns, by name) if one breaks NOT NULL or a CHECK.

    A CHECK holds unless its expression is false (null passes, as in SQL).
    """
    check_not_null(table, rows)
    if not table.checks or not len(rows):
        return
    labels = {c.name: c.label or c.name for c in table.columns}
    local.register(_CHECKED, rows.rename_columns([labels[n] for n in rows.column_names]))
    tests = ", ".join(
        f"bool_and(COALESCE(CAST(({sql}) AS BOOLEAN), TRUE))" for _, sql in table.checks
    )
    try:
        held = local.execute(f'SELECT {tests} FROM "{_CHECKED}"').fetchall()[0]
    except duckdb.Error as exc:
        reason = str(exc).splitlines()[0]
        raise QueryError(f"evaluating the CHECKs of {table.name}: {reason}") from None
    finally:
        local.unregister(_CHECKED)
    assert held is not None
    for (name, _), ok in zip(table.checks, held, strict=True):
        if ok is False:
            raise CheckViolationError(
                f'new row for relation "{table.name}" violates check constraint "{name}"'
            )


def check_not_null(table: TableDesign, rows: pa.Table) -> None:
    """Refuse ``rows`` (the table's columns, by name) if a NOT NULL column holds a null."""
    for column in table.columns:
        held = column.not_null and column.name in rows.column_names
        if held and rows.column(column.name).null_count:
            raise not_null_violation(table.name, column.name)


def not_null_violation(table: str, column: str) -> NotNullViolationError:
    return NotNullViolationError(
        f'null value in column "{column}" of relation "{table}" violates not-null constraint'
    )


def unique_violation(table: TableDesign) -> UniqueViolationError:
    """Two rows would share a declared key: named by the table's key columns, never a value."""
    keys = " or ".join(f"({', '.join(key)})" for key in table.keys) or "a declared key"
    return UniqueViolationError(
        f"duplicate key value violates a unique constraint of {table.name}: another row "
        f"has the same {keys}"
    )


def constraint_error(table: TableDesign, exc: duckdb.ConstraintException) -> VeilError:
    """The catalogue's refusal of a statement, in PostgreSQL's terms where it has them."""
    found = _DUCKDB_NOT_NULL.search(str(exc))
    if found is not None:
        return not_null_violation(table.name, found[1].lower())
    if "Duplicate key" in str(exc) or "UNIQUE constraint violation" in str(exc):  # its own rows
        return unique_violation(table)
    return QueryError(str(exc).replace("\n", " ").strip())
