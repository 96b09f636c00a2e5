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


class KeyFileError(VeilError):
    """The key file is missing, unreadable, malformed or has unsafe permissions."""

    anchor = "key-file"


class WrongKeyError(VeilError):
    """The key (or passphrase) does not match what the data was encrypted with."""

    anchor = "wrong-key"


class AuthenticationError(VeilError):
    """A ciphertext failed authentication: wrong key or tampered data."""

    anchor = "authentication"


class MalformedCiphertextError(VeilError):
    """A ciphertext is truncated, of an unknown version, or otherwise unreadable."""

    anchor = "malformed-ciphertext"


class DomainError(VeilError):
    """A plaintext value lies outside the domain its scheme was set up for."""

    anchor = "domain"

    def __init__(self, message: str, *, column: str | None = None, domain: str | None = None):
        where = f"column {column!r}: " if column else ""
        span = f" (domain: {domain})" if domain else ""
        super().__init__(f"{where}{message}{span}")
        self.column = column
        self.domain = domain


class ParameterError(VeilError):
    """A scheme was configured with parameters it cannot work with."""

    anchor = "parameter"


class InternalError(VeilError):
    """Veil itself failed on a statement (a bug): nothing was changed; please report it."""

    anchor = "internal"
