"""What a statement may ask of the client's own DuckDB: allow-lists, checked before planning.

The client's local DuckDB finishes split plans on the trusted side, beside
the key file. Users of ``veil serve`` (and of every session, unless the
application opts in to reading files: ``veil.connect(..., external_access=True)``)
must reach nothing there but the tables Veil registers. DuckDB itself runs
with file, network and extension access off (``veil.exec.local_duckdb``);
this module refuses, before anything is parsed further or planned, what a
DuckDB setting cannot express, by allow-lists:

- statement kinds, by their first keyword (queries, INSERT/UPDATE/DELETE,
  table DDL, DESCRIBE/SHOW): ATTACH, INSTALL, LOAD, PRAGMA, SET, CALL, COPY,
  EXPORT, IMPORT and any verb DuckDB may add are refused, parsed or not;
- table functions: ``range``, ``generate_series``, ``unnest`` and a few more
  that compute rows from their arguments alone (catalogue queries also get
  the ``duckdb_*`` functions that describe the plaintext schema). Every other
  one, ``read_text``, ``read_csv``, ``glob``, ``query``, ``duckdb_settings``...,
  is refused wherever it appears (a CTE, a subquery, a lateral join);
- system tables: the ``information_schema`` and ``pg_catalog`` views over
  the plaintext schema, not ``pg_settings`` (the engine's settings, paths
  among them) or ``pg_prepared_statements`` (its internal statements).

Scalar functions compute on their arguments, except the few that read the
engine's own state: those are refused by name (``TRUSTED_SIDE_FUNCTIONS``),
and a test reviews every DuckDB function whose name suggests state, files or
the environment, so a new DuckDB cannot add one unseen.
"""

from __future__ import annotations

import functools
import itertools

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from veil.sql.catalog_queries import is_system_table
from veil.sql.errors import InsufficientPrivilegeError
from veil.sql.functions import function_name, table_function_names

# First keywords of the statements a session runs; anything else is refused unparsed.
STATEMENT_HEADS = frozenset(
    {
        "SELECT", "WITH", "VALUES", "FROM", "TABLE", "PIVOT", "UNPIVOT",
        "INSERT", "UPDATE", "DELETE",
        "CREATE", "DROP", "ALTER", "TRUNCATE",
        "DESCRIBE", "DESC", "SHOW",
    }
)  # fmt: skip
# Parsed statements a session runs (DDL kinds are checked by veil.load.ddl).
_STATEMENTS = (
    exp.Query,
    exp.Pivot,
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.TruncateTable,
    exp.Describe,
    exp.Show,
)

# Table functions whose rows come from their arguments alone.
TABLE_FUNCTIONS = frozenset(
    {"range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree"}
)
# sqlglot's names for some of them (PostgreSQL's generate_series in a FROM clause)
_PARSED_AS = {"exploding_generate_series": "generate_series"}
# And, for catalogue queries, the ones describing the (plaintext, empty) schema.
CATALOG_TABLE_FUNCTIONS = frozenset(
    {
        "duckdb_tables", "duckdb_columns", "duckdb_views", "duckdb_schemas", "duckdb_types",
        "duckdb_constraints", "duckdb_indexes", "duckdb_keywords", "duckdb_functions",
        "duckdb_databases", "duckdb_sequences", "duckdb_dependencies", "pragma_table_info",
    }
)  # fmt: skip
# System views that describe the plaintext schema (DuckDB's, and Veil's shims).
_HIDDEN_SYSTEM_TABLES = frozenset({"pg_settings", "pg_prepared_statements"})

# Scalar functions that read or change the engine's own state, not their arguments.
TRUSTED_SIDE_FUNCTIONS = frozenset(
    {
        "current_setting",  # settings: paths of the client's machine among them
        "getvariable",
        "current_query",  # the local plan's text: Veil's internal names
        "write_log",
        "parse_duckdb_log_message",
        "json_execute_serialized_sql",  # runs SQL that no allow-list saw
        "json_serialize_plan",
    }
)


def check_text(sql: str, *, external_access: bool = False) -> None:
    """Refuse, before parsing, a statement of a kind, or calling a table function, not allowed.

    Checked on the tokens too, since a parser may fail on what DuckDB would run
    (PostgreSQL's dialect reads ``glob`` as an operator).
    """
    try:
        tokens = sqlglot.Dialect.get_or_raise("duckdb").tokenize(sql)
    except TokenError:
        return  # the parser reports it
    words = [t for t in tokens if t.token_type not in (TokenType.L_PAREN, TokenType.SEMICOLON)]
    head = words[0].text.upper() if words else None
    # a word DuckDB does not know as a keyword is a typo: the parser says so
    if head is not None and head not in STATEMENT_HEADS and head.lower() in _keywords():
        raise InsufficientPrivilegeError(
            f"permission denied: Veil does not run {head} statements; a session runs queries "
            "(SELECT, WITH, VALUES), INSERT, UPDATE, DELETE and table DDL"
        )
    if external_access:
        return
    refused = table_function_names() - TABLE_FUNCTIONS - CATALOG_TABLE_FUNCTIONS
    for token, after in itertools.pairwise(tokens):
        name = token.text.lower()
        call = after.token_type == TokenType.L_PAREN and token.token_type != TokenType.STRING
        if call and name in refused:
            raise _refused_table_function(name)


@functools.cache
def _keywords() -> frozenset[str]:
    with duckdb.connect() as con:
        return frozenset(
            str(r[0]) for r in con.sql("SELECT keyword_name FROM duckdb_keywords()").fetchall()
        )


def check_tree(tree: exp.Expr, *, catalog: bool = False, external_access: bool = False) -> None:
    """Refuse ``tree`` unless it is a statement kind, and names only functions, Veil allows.

    ``catalog``: the statement runs on the catalogue DuckDB (schema functions
    allowed). ``external_access``: the application's own process opted in to
    DuckDB's file functions; statement kinds are still checked.
    """
    if not isinstance(tree, _STATEMENTS) and not _shows(tree):
        raise InsufficientPrivilegeError(
            f"permission denied: Veil does not run {tree.key.upper()} statements; a session "
            "runs queries (SELECT, WITH, VALUES), INSERT, UPDATE, DELETE and table DDL"
        )
    if external_access:
        return
    allowed = TABLE_FUNCTIONS | CATALOG_TABLE_FUNCTIONS if catalog else TABLE_FUNCTIONS
    table_functions = table_function_names()
    for node in tree.walk():
        if isinstance(node, exp.Table):
            _check_table(node, allowed)
        elif isinstance(node, exp.Func):
            name = function_name(node)
            if name in table_functions and name not in allowed:
                raise _refused_table_function(name)
            if name in TRUSTED_SIDE_FUNCTIONS:
                raise InsufficientPrivilegeError(
                    f"permission denied for function {name}: it reads the state of the "
                    "client's trusted engine, which Veil does not show"
                )


def _shows(tree: exp.Expr) -> bool:
    return isinstance(tree, exp.Command) and tree.name.upper() in ("SHOW", "DESCRIBE")


def _check_table(table: exp.Table, allowed: frozenset[str]) -> None:
    if isinstance(table.this, exp.Func):
        name = function_name(table.this)
        name = _PARSED_AS.get(name, name)
        if name not in allowed:
            raise _refused_table_function(name)
        return
    if is_system_table(table):
        name = table.name.lower()
        if name in _HIDDEN_SYSTEM_TABLES or (
            name.startswith("duckdb_") and name not in CATALOG_TABLE_FUNCTIONS
        ):
            raise InsufficientPrivilegeError(
                f"permission denied for relation {name}: it describes the client's trusted "
                "engine, not your tables"
            )


def _refused_table_function(name: str) -> InsufficientPrivilegeError:
    shown = ", ".join(sorted(TABLE_FUNCTIONS - {"repeat_row"}))
    return InsufficientPrivilegeError(
        f"permission denied for function {name}: a query reads your tables and the table "
        f"functions {shown}; not files, settings or the client's trusted engine"
    )
