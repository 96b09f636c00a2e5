"""Statements about the schema, not the data: answered from the plaintext schema on the client.

``SHOW TABLES``, ``DESCRIBE t``, ``SHOW t`` and queries that read only the
system catalogue (``information_schema.*``, ``pg_catalog.*``,
``duckdb_tables()``...) run on the session's catalogue DuckDB, which holds an
empty copy of every table (``veil.session.session``). They never reach the
server, and they list the user's tables instead of the client's scratch ones.
"""

from __future__ import annotations

from sqlglot import exp

SYSTEM_SCHEMAS = frozenset({"information_schema", "pg_catalog"})
_SYSTEM_PREFIXES = ("pg_", "duckdb_")


def is_system_table(table: exp.Table) -> bool:
    name = table.this.name if isinstance(table.this, exp.Func) else table.name
    return table.db.lower() in SYSTEM_SCHEMAS or name.lower().startswith(_SYSTEM_PREFIXES)


def reads_only_catalog(tree: exp.Expr) -> bool:
    """A SHOW / DESCRIBE, or a query whose every table is a system one."""
    if isinstance(tree, exp.Describe | exp.Show):
        return True
    if isinstance(tree, exp.Command):
        return tree.name.upper() in ("SHOW", "DESCRIBE")
    if not isinstance(tree, exp.Query):
        return False
    tables = list(tree.find_all(exp.Table))
    return bool(tables) and all(is_system_table(t) for t in tables)
