"""Catalogue queries (``pg_catalog``, ``information_schema``, ``version()``) answered on the client.

The session's catalogue DuckDB holds an empty copy of every table's
plaintext schema (``veil.session.session``), and DuckDB serves PostgreSQL's
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
    "CREATE OR REPLACE MACRO pg_get_indexdef(id) AS '', (id, col, pretty) AS ''",
    "CREATE OR REPLACE MACRO pg_get_partkeydef(id) AS NULL",
    "CREATE OR REPLACE MACRO pg_get_statisticsobjdef_columns(id) AS NULL",
    "CREATE OR REPLACE MACRO pg_relation_is_publishable(id) AS false",
    # no defaults, checks or partitions: no expressions to show
    "CREATE OR REPLACE MACRO pg_get_expr(e, relation) AS CAST(NULL AS VARCHAR), "
    "(e, relation, pretty) AS CAST(NULL AS VARCHAR)",
    "CREATE OR REPLACE MACRO array_upper(a, dimension) AS len(a)",
    # PostgreSQL's type OIDs and typmods (DuckDB's pg_attribute has its own ids;
    # pg_attribute is read through _PG_ATTRIBUTE, which maps them)
    "CREATE OR REPLACE MACRO veil_format_type(type_oid, typmod) AS "
    "CASE WHEN type_oid = 1700 AND typmod > 4 THEN 'numeric(' || ((typmod - 4) // 65536) || ',' "
    "|| ((typmod - 4) % 65536) || ')' ELSE "
    "coalesce((SELECT typname FROM pg_catalog.pg_type WHERE oid = type_oid), 'text') END",
    "CREATE OR REPLACE MACRO _pg_expandarray(a) AS {'x': CAST(NULL AS INTEGER), 'n': CAST(NULL AS INTEGER)}",
    "CREATE OR REPLACE MACRO quote_ident(name) AS '\"' || replace(name, '\"', '\"\"') || '\"'",
)


def install(connection: duckdb.DuckDBPyConnection) -> None:
    for statement in SHIMS:
        connection.execute(statement)


# Catalogue tables DuckDB does not have, answered as empty tables of their
# columns (psql's \\d asks about policies, publications, inheritance...).
EMPTY_TABLES = {
    "pg_policy": "polname VARCHAR, polpermissive BOOLEAN, polroles INTEGER[], polqual VARCHAR, "
    "polwithcheck VARCHAR, polcmd VARCHAR, polrelid INTEGER",
    "pg_statistic_ext": "oid INTEGER, stxrelid INTEGER, stxnamespace INTEGER, stxname VARCHAR, "
    "stxkind VARCHAR[], stxstattarget INTEGER",
    "pg_publication": "oid INTEGER, pubname VARCHAR, puballtables BOOLEAN",
    "pg_publication_namespace": "pnpubid INTEGER, pnnspid INTEGER",
    "pg_publication_rel": "prpubid INTEGER, prrelid INTEGER, prqual VARCHAR, prattrs SMALLINT[]",
    "pg_inherits": "inhrelid INTEGER, inhparent INTEGER, inhseqno INTEGER, "
    "inhdetachpending BOOLEAN",
    "pg_roles": "oid INTEGER, rolname VARCHAR",
    "pg_trigger": "oid INTEGER, tgrelid INTEGER, tgname VARCHAR",
}
# DuckDB's pg_attribute with PostgreSQL's type OIDs and numeric typmods
_PG_ATTRIBUTE = """
(SELECT a.* REPLACE (
    coalesce(t.oid, 25) AS atttypid,
    CASE WHEN a.atttypmod > 0 THEN (a.atttypmod // 1000) * 65536 + a.atttypmod % 1000 + 4
         ELSE -1 END AS atttypmod)
 FROM pg_catalog.pg_attribute AS a
 LEFT JOIN pg_catalog.pg_type AS t
   ON t.typname = split_part(pg_catalog.format_type(a.atttypid, -1), '(', 1))
"""

# pg_database as PostgreSQL has it (psql's \\l reads its collations and ACLs; DuckDB's
# view has four columns): one database, the one this session connected to
_PG_DATABASE = """
(SELECT CAST(1 AS INTEGER) AS oid, {name} AS datname, CAST(10 AS INTEGER) AS datdba,
        CAST(6 AS INTEGER) AS encoding, 'c' AS datlocprovider, false AS datistemplate,
        true AS datallowconn, CAST(-1 AS INTEGER) AS datconnlimit,
        CAST(0 AS INTEGER) AS dattablespace, 'C.UTF-8' AS datcollate, 'C.UTF-8' AS datctype,
        CAST(NULL AS VARCHAR) AS daticulocale, CAST(NULL AS VARCHAR) AS daticurules,
        CAST(NULL AS VARCHAR) AS datlocale, CAST(NULL AS VARCHAR) AS datcollversion,
        CAST(NULL AS VARCHAR[]) AS datacl)
"""

# pg_class columns DuckDB's view lacks, as constants
_MISSING_COLUMNS = {"relforcerowsecurity": "false"}

_SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")  # their functions: DuckDB's or shims
_OID_ALIASES = {"regtype", "regclass", "regproc", "regprocedure", "regnamespace", "regrole"}


def _type_name(cast: exp.Cast) -> str:
    """The cast's type, unqualified (``pg_catalog.regtype`` is ``regtype``)."""
    return cast.to.sql(dialect="postgres").lower().rsplit(".", 1)[-1]


def _oid_of(cast: exp.Cast) -> exp.Expr:
    """``x::regclass`` and kin: a table name looked up in pg_class, anything else as is."""
    inner = cast.this
    if _type_name(cast) == "regclass" and isinstance(inner, exp.Literal):
        return exp.maybe_parse(
            "(SELECT oid FROM pg_catalog.pg_class WHERE relname = "
            f"{exp.Literal.string(inner.name.split('.')[-1].strip(chr(34))).sql()} LIMIT 1)",
            dialect="duckdb",
        )
    return inner


def _catalog_table(node: exp.Expr, name: str) -> bool:
    if not isinstance(node, exp.Table) or node.name.lower() != name:
        return False
    return node.db.lower() in ("", "pg_catalog")


def _derived(sql: str, table: exp.Table) -> exp.Expr:
    """``table`` (keeping its alias) as the derived table ``sql``."""
    query: exp.Expr = exp.maybe_parse(sql.strip(), dialect="duckdb")
    return exp.Subquery(
        this=query.this, alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))
    )


def _missing_table(node: exp.Expr) -> bool:
    """A catalogue table DuckDB lacks (``pg_catalog.pg_policy`` or unqualified)."""
    if not isinstance(node, exp.Table) or node.name.lower() not in EMPTY_TABLES:
        return False
    return node.db.lower() in ("", "pg_catalog")


def _empty_table(table: exp.Table) -> exp.Expr:
    """``pg_catalog.X [AS a]`` as an empty derived table with X's columns."""
    columns = EMPTY_TABLES[table.name.lower()]
    empty: exp.Expr = exp.maybe_parse(
        f"(SELECT * FROM (SELECT {_typed_nulls(columns)}) WHERE false)", dialect="duckdb"
    )
    return exp.Subquery(
        this=empty.this, alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))
    )


def _typed_nulls(columns: str) -> str:
    return ", ".join(
        f"CAST(NULL AS {kind}) AS {name}"
        for name, kind in (c.strip().split(" ", 1) for c in columns.split(", "))
    )


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
        if _missing_table(node):
            assert isinstance(node, exp.Table)
            return _empty_table(node)
        if _catalog_table(node, "pg_database"):
            assert isinstance(node, exp.Table)
            return _derived(_PG_DATABASE.format(name=exp.Literal.string(database).sql()), node)
        if _catalog_table(node, "pg_attribute"):
            assert isinstance(node, exp.Table)
            return _derived(_PG_ATTRIBUTE, node)
        if isinstance(node, exp.Anonymous) and node.name.lower() == "format_type":
            return exp.Anonymous(this="veil_format_type", expressions=node.expressions)
        if isinstance(node, exp.Column) and node.name.lower() in _MISSING_COLUMNS:
            return exp.maybe_parse(_MISSING_COLUMNS[node.name.lower()])
        if isinstance(node, exp.Collate):  # COLLATE pg_catalog.default: DuckDB's is the same
            return node.this
        if isinstance(node, exp.Anonymous) and node.name.lower() in constants:
            return exp.Literal.string(constants[node.name.lower()])
        if isinstance(node, exp.DataType) and isinstance(node.args.get("kind"), exp.Dot):
            kind = node.args["kind"]
            if kind.this.name.lower() == "pg_catalog" and kind.name.lower() not in _OID_ALIASES:
                return exp.DataType.build(kind.name, dialect="postgres")  # pg_catalog.text
        if isinstance(node, exp.Cast) and _type_name(node) in _OID_ALIASES:
            return _oid_of(node)
        if isinstance(node, exp.CurrentUser | exp.SessionUser):
            return exp.Literal.string(user)
        if isinstance(node, exp.CurrentDatabase | exp.CurrentCatalog):
            return exp.Literal.string(database)
        if type(node).__name__ == "CurrentVersion":  # version(), parsed as DuckDB's own
            return exp.Literal.string(VERSION_TEXT)
        return node

    # first unqualify functions: transform does not descend into a replaced node
    unqualified = tree.copy().transform(_unqualified_function, copy=False)
    return unqualified.transform(replace, copy=False)


def _unqualified_function(node: exp.Expr) -> exp.Expr:
    """``pg_catalog.f(...)`` as ``f(...)``: DuckDB's f, or a shim (table functions too)."""
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Func):
        if node.db.lower() in _SYSTEM_SCHEMAS:
            node.set("db", None)
        return node
    qualified = isinstance(node, exp.Dot) and node.this.name.lower() in _SYSTEM_SCHEMAS
    if qualified and isinstance(node.expression, exp.Func):
        return node.expression
    return node
