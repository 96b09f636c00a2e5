"""PostgreSQL's session settings, as ``veil serve`` keeps them: never the local DuckDB's.

``SET``, ``SHOW``, ``current_setting()`` and ``pg_settings`` answer from the
connection's own table of PostgreSQL settings (what drivers set and read at
connect time). None of them reaches the client's DuckDB: its settings hold
paths of the trusted side, and its configuration is locked. A ``SET`` of a
name that only DuckDB knows (``threads``, ``enable_external_access``...),
DuckDB's ``SET VARIABLE`` and ``SET GLOBAL`` are refused (42501).
"""

from __future__ import annotations

import functools
import zoneinfo

import duckdb
from sqlglot import exp

from veil.serve.errors import WireError

# PostgreSQL parameters that are also DuckDB setting names: kept here, as PostgreSQL's
POSTGRES_NAMES = frozenset(
    {
        "timezone", "search_path", "datestyle", "intervalstyle", "client_encoding",
        "application_name", "default_transaction_isolation", "transaction_isolation",
        "statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout",
        "extra_float_digits", "standard_conforming_strings", "bytea_output",
        "client_min_messages", "work_mem", "max_identifier_length", "lc_collate", "lc_ctype",
        "integer_datetimes", "server_version", "server_encoding", "transaction_read_only",
        "default_transaction_read_only", "jit", "synchronous_commit",
    }
)  # fmt: skip
_DUCKDB_ONLY_FORMS = ("VARIABLE", "GLOBAL")


@functools.cache
def duckdb_setting_names() -> frozenset[str]:
    """Every configuration name DuckDB knows (lower case)."""
    with duckdb.connect() as con:
        rows = con.sql("SELECT name FROM duckdb_settings()").fetchall()
    return frozenset(str(r[0]).lower() for r in rows)


def check_settable(name: str) -> None:
    """Refuse a ``SET``/``RESET`` of a setting only the trusted DuckDB has."""
    lowered = name.lower()
    if lowered.upper() in _DUCKDB_ONLY_FORMS or (
        lowered in duckdb_setting_names() and lowered not in POSTGRES_NAMES
    ):
        raise WireError(
            "42501",
            f'permission denied to set parameter "{name}": the client\'s trusted engine '
            "is configured by Veil, not by its users",
        )


def answer_settings(tree: exp.Expr, settings: dict[str, str]) -> exp.Expr:
    """``current_setting(name)`` as its value, ``pg_settings`` as the session's settings."""

    def replace(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Dot) and _is_current_setting(node.expression):
            node = node.expression  # pg_catalog.current_setting(...)
        if _is_current_setting(node):
            return _current_setting(node, settings)
        if (
            isinstance(node, exp.Table)
            and node.name.lower() == "pg_settings"
            and node.db.lower() in ("", "pg_catalog")
        ):
            return _settings_table(node, settings)
        return node

    if not any(
        _is_current_setting(n) or (isinstance(n, exp.Table) and n.name.lower() == "pg_settings")
        for n in tree.walk()
    ):
        return tree
    return tree.copy().transform(replace, copy=False)


def _is_current_setting(node: exp.Expr) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.lower() == "current_setting"


def _current_setting(node: exp.Expr, settings: dict[str, str]) -> exp.Expr:
    arguments = node.expressions
    if not arguments or not isinstance(arguments[0], exp.Literal):
        raise WireError("0A000", "current_setting() takes a setting's name as a constant")
    name = arguments[0].name.lower()
    if name in settings:
        return exp.Literal.string(settings[name])
    missing_ok = len(arguments) > 1 and arguments[1].sql().upper() == "TRUE"
    if missing_ok:
        return exp.cast(exp.null(), "VARCHAR")
    raise WireError("42704", f'unrecognized configuration parameter "{arguments[0].name}"')


def _settings_table(table: exp.Table, settings: dict[str, str]) -> exp.Expr:
    rows = [
        exp.Tuple(expressions=[exp.Literal.string(k), exp.Literal.string(v)])
        for k, v in sorted(settings.items())
    ]
    values = exp.Values(
        expressions=rows,
        alias=exp.TableAlias(
            this=exp.to_identifier("s"),
            columns=[exp.to_identifier("name"), exp.to_identifier("setting")],
        ),
    )
    query = exp.select(
        "name", "setting", "CAST(NULL AS VARCHAR) AS unit", "'' AS short_desc",
        "'user' AS context", "'string' AS vartype", "'session' AS source",
    ).from_(values)  # fmt: skip
    return exp.Subquery(
        this=query, alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))
    )


def time_zone(name: str) -> str:
    """A TimeZone setting's value, checked to be a zone both DuckDB and Python know.

    Timestamps with time zones are stored as UTC instants; the zone only says how
    they are shown (text results, COPY TO) and how a time without an offset is read.
    """
    try:
        zoneinfo.ZoneInfo(name)
        with duckdb.connect() as con:
            con.execute("SET TimeZone = ?", [name])
    except (ValueError, zoneinfo.ZoneInfoNotFoundError, duckdb.Error):
        raise WireError("22023", f'invalid value for parameter "TimeZone": "{name}"') from None
    return name
