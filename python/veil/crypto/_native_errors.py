"""The one place where errors of the native core become Veil's exceptions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from veil import _native
from veil.errors import (
    AuthenticationError,
    DomainError,
    MalformedCiphertextError,
    ParameterError,
    VeilError,
)


@contextmanager
def native_errors(column: str | None = None, domain: str | None = None) -> Iterator[None]:
    """Re-raise native errors as Veil errors naming ``column`` where known."""
    where = f"column {column!r}: " if column else ""
    try:
        yield
    except _native.NativeDomainError as exc:
        raise DomainError(str(exc), column=column, domain=domain) from None
    except _native.NativeAuthenticationError as exc:
        raise AuthenticationError(f"{where}{exc}") from None
    except _native.NativeMalformedError as exc:
        raise MalformedCiphertextError(f"{where}{exc}") from None
    except _native.NativeParameterError as exc:
        raise ParameterError(f"{where}{exc}") from None
    except _native.NativeError as exc:
        raise VeilError(f"{where}{exc}") from None
