"""Errors as the wire reports them: a SQLSTATE for each of Veil's error classes."""

from __future__ import annotations

from veil.errors import (
    AuthenticationError,
    DomainError,
    InternalError,
    KeyFileError,
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
    QueryCancelledError,
    QueryError,
    QuerySyntaxError,
    UniqueViolationError,
    UnsupportedStatementError,
)

# https://www.postgresql.org/docs/current/errcodes-appendix.html
_SQLSTATES: list[tuple[type[VeilError], str]] = [
    (QueryCancelledError, "57014"),  # query_canceled
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
    (KeyFileError, "58000"),
    (WrongKeyError, "58000"),
    (AuthenticationError, "XX001"),  # data_corrupted
    (InternalError, "XX000"),
]


class WireError(Exception):
    """An error for the wire client; the Rust glue reads these attributes."""

    def __init__(
        self,
        sqlstate: str,
        message: str,
        *,
        hint: str | None = None,
        position: int | None = None,
    ):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.hint = hint
        self.position = position


def wire_error(exc: VeilError) -> WireError:
    code = next((c for cls, c in _SQLSTATES if isinstance(exc, cls)), "XX000")
    text = str(exc)
    # "... (see docs/errors.md#query)": the reference goes to the hint
    message, _, see = text.rpartition(" (see ")
    if not message:
        return WireError(code, text)
    return WireError(code, message, hint=f"see {see.rstrip(')')}")
