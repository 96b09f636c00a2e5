"""Veil's public exceptions.

Every error says what went wrong and what to do; each class names an anchor in
``docs/errors.md`` where the longer explanation lives.
"""

from __future__ import annotations

DOCS = "docs/errors.md"


class VeilError(Exception):
    """Base class of every error Veil raises on purpose."""

    docs = DOCS  # the page that explains it (an area may have its own)
    anchor = "veil-error"

    def __str__(self) -> str:
        return f"{super().__str__()} (see {self.docs}#{self.anchor})"


# PEP 249's exception classes (``veil.Error`` is ``VeilError``): every error
# Veil raises is one of them, so DB-API code can catch them by kind.


class Warning(Exception):
    """PEP 249's Warning (Veil raises none)."""


class InterfaceError(VeilError):
    """The DB-API object was used wrongly (closed cursor, no result yet)."""

    anchor = "dbapi"


class DatabaseError(VeilError):
    """An error of the data or the database (every other Veil error)."""


class DataError(DatabaseError):
    """A value is wrong for its column or scheme."""


class OperationalError(DatabaseError):
    """The server, the client directory or the key is unusable."""


class IntegrityError(DatabaseError):
    """A declared constraint would be broken (NOT NULL: ``NotNullViolationError``)."""


class ProgrammingError(DatabaseError):
    """The statement is wrong: syntax, unknown names, types, parameters."""


class NotSupportedError(DatabaseError):
    """Veil does not run this statement or feature."""

    anchor = "dbapi"


class SerializationError(OperationalError):
    """Concurrent writes to the same rows collided: this statement changed nothing.

    SQLSTATE 40001 on the wire, as PostgreSQL's serialization_failure: run the
    statement (or the transaction) again.
    """

    anchor = "serialization"


class KeyFileError(OperationalError):
    """The key file is missing, unreadable, malformed or has unsafe permissions."""

    anchor = "key-file"


class KeyProviderError(KeyFileError):
    """The key provider (KMIP server, HSM) holding the key-encryption key cannot be used."""

    docs = "docs/keys.md"
    anchor = "when-the-provider-cannot-be-reached"


class WrongKeyError(OperationalError):
    """The key (or passphrase) does not match what the data was encrypted with."""

    anchor = "wrong-key"


class AuthenticationError(DatabaseError):
    """A ciphertext failed authentication: wrong key or tampered data."""

    anchor = "authentication"


class MalformedCiphertextError(DatabaseError):
    """A ciphertext is truncated, of an unknown version, or otherwise unreadable."""

    anchor = "malformed-ciphertext"


class DomainError(DataError):
    """A plaintext value lies outside the domain its scheme was set up for."""

    anchor = "domain"

    def __init__(self, message: str, *, column: str | None = None, domain: str | None = None):
        where = f"column {column!r}: " if column else ""
        span = f" (domain: {domain})" if domain else ""
        super().__init__(f"{where}{message}{span}")
        self.column = column
        self.domain = domain


class ParameterError(ProgrammingError):
    """A scheme was configured with parameters it cannot work with."""

    anchor = "parameter"


class InternalError(DatabaseError):
    """Veil itself failed on a statement (a bug): nothing was changed; please report it."""

    anchor = "internal"
