"""Indexes made with ``CREATE INDEX``, carried from a table's server tables onto its rebuilt copy.

``CREATE INDEX`` (``veil.load.ddl``) builds an index on the server over a
column's DET or OPE (or JOIN-ADJ) ciphertexts and records nothing in the
design: the server's catalog is the record. A re-key copies a table into new
server tables with fresh names (``veil.load.rekey``), so it reads the old
table's indexes from the catalog and builds each again on the copy, over the
same encryptions' new columns, under a fresh name. Unique indexes are left
out: they are the declared keys', which ``veil.load.keys`` installs from the
design (Spark has no indexes: ``Backend.indexes`` lists none).
"""

from __future__ import annotations

from veil.backends import Backend
from veil.design.model import TableDesign, opaque_name


def copy_indexes(backend: Backend, old: TableDesign, new: TableDesign) -> list[str]:
    """Build on ``new``'s server table each non-unique index ``old``'s has and it lacks;
    the old indexes' names (for the caller's message)."""
    renamed = {old.server_name: new.server_name, old.row_id: new.row_id}
    renamed |= {
        before.name: after.name
        for before, after in zip(old.encryptions, new.encryptions, strict=True)
    }
    have = {_shape(sql) for _, sql in _made_by_hand(backend, new)}
    made = []
    for name, sql in _made_by_hand(backend, old):
        made_sql = sql.replace(name, opaque_name("i"), 1)  # first: a name may hold the table's
        for before, after in renamed.items():
            made_sql = made_sql.replace(before, after)
        if _shape(made_sql) in have:
            continue  # made before (a catch-up round's second look)
        backend.execute(made_sql)
        made.append(name)
    return made


def _made_by_hand(backend: Backend, table: TableDesign) -> list[tuple[str, str]]:
    """The table's indexes but the unique ones (the declared keys')."""
    found = backend.indexes(table.server_name)
    return [(name, sql) for name, sql in found if not sql.upper().startswith("CREATE UNIQUE")]


def _shape(sql: str) -> str:
    """An index's definition without its name: what it covers, to compare two."""
    return sql[sql.index(" ON ") :] if " ON " in sql else sql
