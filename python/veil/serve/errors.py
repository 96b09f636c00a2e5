"""Errors as the wire reports them: a SQLSTATE (``veil.sqlstates``) for each of Veil's errors."""

from __future__ import annotations

from veil.errors import VeilError
from veil.sqlstates import sqlstate


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
    code = sqlstate(exc)
    text = str(exc)
    # "... (see docs/errors.md#query)": the reference goes to the hint
    message, _, see = text.rpartition(" (see ")
    if not message:
        return WireError(code, text)
    return WireError(code, message, hint=f"see {see.rstrip(')')}")
