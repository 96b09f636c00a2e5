"""Errors of the document layer; each names what to do and links docs/documents.md."""

from __future__ import annotations

from veil.errors import VeilError

DOCS = "docs/documents.md"


class DocumentsError(VeilError):
    """Base class of the errors ``veil.documents`` raises on purpose."""

    docs = DOCS
    anchor = "errors"


class SchemaError(DocumentsError):
    """The schema is malformed, or a document holds a field the schema does not allow."""

    anchor = "schema"


class FieldTypeError(DocumentsError):
    """A value's type does not fit its field's attribute (e.g. a string in an int index)."""

    anchor = "attributes"


class UnsupportedQueryError(DocumentsError):
    """A filter, sort, update or pipeline needs an operation the field's attribute forbids."""

    anchor = "what-runs-where"

    def __init__(self, field: str, operator: str, attribute: str, needs: str | None = None):
        hint = f"; declare it {needs} to allow this" if needs else ""
        super().__init__(
            f"field {field!r}: {operator} is not possible on a {attribute!r} field{hint}"
        )
        self.field, self.operator, self.attribute = field, operator, attribute


class ServerError(DocumentsError):
    """The MongoDB-wire server is unreachable or refused a command."""

    anchor = "server"


class ServerRefusedError(ServerError):
    """The server answered but refused a command (an operator it lacks, a limit)."""


class PartialWriteError(DocumentsError):
    """A bulk write stopped part way; ``written_ids`` says exactly which documents were written."""

    anchor = "server"

    def __init__(self, message: str, written_ids: list[object]):
        super().__init__(message)
        self.written_ids = written_ids
