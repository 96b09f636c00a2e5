"""The SQLSTATE of each of Veil's error classes, as PostgreSQL names the same failures.

``veil serve`` sends them to its clients (``veil.serve.errors``) and the audit
log records them for the DB-API's statements too (``veil.dbapi``).
"""

from __future__ import annotations

import re

from veil.errors import (
    AuthenticationError,
    DomainError,
    InternalError,
    KeyFileError,
    KeyProviderError,
    ParameterError,
    SerializationError,
    VeilError,
    WrongKeyError,
)
from veil.sql.errors import (
    ActiveTransactionError,
    CheckViolationError,
    ClientDirectoryError,
    ForeignKeyViolationError,
    GeneratedAlwaysError,
    InFailedTransactionError,
    InsufficientPrivilegeError,
    NotNullViolationError,
    OutOfMemoryError,
    QueryCancelledError,
    QueryError,
    QuerySyntaxError,
    UniqueViolationError,
    UnsupportedStatementError,
)

# https://www.postgresql.org/docs/current/errcodes-appendix.html
SQLSTATES: list[tuple[type[VeilError], str]] = [
    (QueryCancelledError, "57014"),  # query_canceled
    (OutOfMemoryError, "53200"),  # out_of_memory
    (InsufficientPrivilegeError, "42501"),  # insufficient_privilege
    (InFailedTransactionError, "25P02"),  # in_failed_sql_transaction
    (ActiveTransactionError, "25001"),  # active_sql_transaction
    (NotNullViolationError, "23502"),  # not_null_violation
    (UniqueViolationError, "23505"),  # unique_violation
    (CheckViolationError, "23514"),  # check_violation
    (ForeignKeyViolationError, "23503"),  # foreign_key_violation
    (GeneratedAlwaysError, "428C9"),  # generated_always
    (SerializationError, "40001"),  # serialization_failure
    (QuerySyntaxError, "42601"),  # syntax_error
    (UnsupportedStatementError, "0A000"),  # feature_not_supported
    (ParameterError, "22023"),  # invalid_parameter_value
    (DomainError, "22003"),  # numeric_value_out_of_range
    (QueryError, "42000"),  # syntax_error_or_access_rule_violation
    (ClientDirectoryError, "58000"),  # system_error
    # the session cannot open: its key provider is unreachable or refuses
    (KeyProviderError, "08001"),  # sqlclient_unable_to_establish_sqlconnection
    (KeyFileError, "58000"),
    (WrongKeyError, "58000"),
    (AuthenticationError, "XX001"),  # data_corrupted
    (InternalError, "XX000"),
]


# A QueryError comes from DuckDB's binder or catalogue, whose exception classes do
# not say which name was unknown: its message does (Veil's own wording or DuckDB's).
# Drivers and ORMs branch on these codes (SQLAlchemy's "has_table", psql's scripts).
_QUERY_SQLSTATES = [
    (re.compile(r"^table \S+ does not exist|Table with name .* does not exist"), "42P01"),
    (re.compile(r"Referenced column .* not found|does not have a column named"), "42703"),
    (re.compile(r"Function with name .* does not exist"), "42883"),
]


def sqlstate(exc: VeilError) -> str:
    """``exc``'s SQLSTATE (XX000, internal_error, for a class without one)."""
    code = next((c for cls, c in SQLSTATES if isinstance(exc, cls)), "XX000")
    return query_sqlstate(str(exc)) if code == "42000" else code


def query_sqlstate(message: str) -> str:
    """A query error's SQLSTATE from its message: 42P01, 42703, 42883, else 42000."""
    return next((c for pattern, c in _QUERY_SQLSTATES if pattern.search(message)), "42000")
