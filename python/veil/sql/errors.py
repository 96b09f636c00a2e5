"""Errors of the SQL query path; each says what was wrong and what to do."""

from __future__ import annotations

from veil.errors import IntegrityError, NotSupportedError, OperationalError, ProgrammingError


class QuerySyntaxError(ProgrammingError):
    """The SQL text does not parse; the message gives line and column."""

    anchor = "query-syntax"

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None):
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(f"syntax error{where}: {message}")
        self.line = line
        self.column = column


class QueryError(ProgrammingError):
    """The query is well-formed but wrong: unknown table or column, type mismatch."""

    anchor = "query"


class UnsupportedStatementError(NotSupportedError):
    """A statement kind Veil does not run (DDL, transactions control, ...)."""

    anchor = "unsupported-statement"


class InsufficientPrivilegeError(ProgrammingError):
    """The statement asks for what no Veil user may: the trusted side's files, settings, engine."""

    anchor = "insufficient-privilege"


class InFailedTransactionError(OperationalError):
    """A statement of a transaction that already failed: only ROLLBACK ends it (25P02)."""

    anchor = "transactions"


class ActiveTransactionError(OperationalError):
    """A statement that cannot run inside a transaction block (25001)."""

    anchor = "transactions"


class NotNullViolationError(IntegrityError):
    """A NOT NULL column would hold a null (23502); nothing was written."""

    anchor = "constraints"


class UniqueViolationError(IntegrityError):
    """Two rows would have one declared key (23505); nothing was written."""

    anchor = "constraints"


class CheckViolationError(IntegrityError):
    """A row would make a CHECK constraint false (23514); nothing was written."""

    anchor = "constraints"


class ForeignKeyViolationError(IntegrityError):
    """A row would reference a missing parent row, or a parent row is still referenced (23503)."""

    anchor = "constraints"


class GeneratedAlwaysError(QueryError):
    """A value given for a GENERATED ALWAYS AS IDENTITY column (428C9); nothing was written."""

    anchor = "constraints"


class ClientDirectoryError(OperationalError):
    """The client directory is missing or incomplete."""

    anchor = "client-directory"


class QueryCancelledError(OperationalError):
    """The statement was cancelled while it ran (a cancel request, Ctrl-C)."""

    anchor = "cancelled"


class OutOfMemoryError(OperationalError):
    """The client's local engine needed more than its memory limit (``VEIL_MEMORY_LIMIT``)."""

    anchor = "out-of-memory"
