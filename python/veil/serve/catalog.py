"""Catalogue queries (``pg_catalog``, ``information_schema``, ``version()``) answered on the client.

The session's catalogue DuckDB holds an empty copy of every table's
plaintext schema (``veil.exec.session``), and DuckDB serves PostgreSQL's
catalogue views over it, so psql's ``\\dt`` and ``\\d``, drivers' metadata
calls and SQLAlchemy's reflection see the user's tables and columns. Nothing
here reaches the untrusted server. The few functions that must answer as
PostgreSQL does are replaced by constants first.
"""

from __future__ import annotations

import duckdb
from sqlglot import exp

from veil import __version__

SERVER_VERSION = "16.0"
VERSION_TEXT = f"PostgreSQL {SERVER_VERSION} (Veil {__version__}, encrypted; DuckDB catalogue)"


# PostgreSQL catalogue functions DuckDB lacks, as macros of the catalogue connection.
SHIMS = (
    "CREATE OR REPLACE MACRO pg_get_userbyid(id) AS 'veil'",
    # no extension types here (psycopg looks up hstore with it)
    "CREATE OR REPLACE MACRO to_regtype(name) AS CAST(NULL AS INTEGER)",
    "CREATE OR REPLACE MACRO pg_encoding_to_char(id) AS 'UTF8'",
    "CREATE OR REPLACE MACRO pg_relation_size(id) AS 0",
    "CREATE OR REPLACE MACRO pg_total_relation_size(id) AS 0",
    "CREATE OR REPLACE MACRO pg_get_indexdef(id) AS ''",
    "CREATE OR REPLACE MACRO pg_get_indexdef(id, col, pretty) AS ''",
    "CREATE OR REPLACE MACRO pg_get_partkeydef(id) AS NULL",
    "CREATE OR REPLACE MACRO pg_get_statisticsobjdef_columns(id) AS NULL",
    "CREATE OR REPLACE MACRO quote_ident(name) AS '\"' || replace(name, '\"', '\"\"') || '\"'",
)


def install(connection: duckdb.DuckDBPyConnection) -> None:
    for statement in SHIMS:
        connection.execute(statement)


_OID_ALIASES = {"regtype", "regclass", "regproc", "regprocedure", "regnamespace", "regrole"}


def _oid_of(cast: exp.Cast) -> exp.Expr:
    """``x::regclass`` and kin: a table name looked up in pg_class, anything else as is."""
    inner = cast.this
    if cast.to.sql(dialect="postgres").lower() == "regclass" and isinstance(inner, exp.Literal):
        return exp.maybe_parse(
            "(SELECT oid FROM pg_catalog.pg_class WHERE relname = "
            f"{exp.Literal.string(inner.name.split('.')[-1].strip(chr(34))).sql()} LIMIT 1)",
            dialect="duckdb",
        )
    return inner


def prepare(tree: exp.Expr, user: str, database: str) -> exp.Expr:
    """``tree`` with PostgreSQL-only functions replaced by their values for this session."""
    constants = {
        "version": VERSION_TEXT,
        "current_database": database,
        "current_catalog": database,
        "current_user": user,
        "session_user": user,
        "user": user,
    }

    def replace(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Collate):  # COLLATE pg_catalog.default: DuckDB's is the same
            return node.this
        qualified = isinstance(node, exp.Dot) and node.this.name.lower() == "pg_catalog"
        if qualified and isinstance(node.expression, exp.Func):
            node = node.expression  # pg_catalog.f(...): DuckDB's f or a shim
        if isinstance(node, exp.Anonymous) and node.name.lower() in constants:
            return exp.Literal.string(constants[node.name.lower()])
        if isinstance(node, exp.Cast) and node.to.sql(dialect="postgres").lower() in _OID_ALIASES:
            return _oid_of(node)
        if isinstance(node, exp.CurrentUser):
            return exp.Literal.string(user)
        if type(node).__name__ == "CurrentVersion":  # version(), parsed as DuckDB's own
            return exp.Literal.string(VERSION_TEXT)
        return node

    return tree.copy().transform(replace, copy=False)
