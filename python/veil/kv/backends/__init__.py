"""Storage backends for MiniCrypt packs, chosen by URL scheme.

``sqlite:///path/to/file.db`` is the embedded default;
``cassandra://host:port/keyspace`` talks to Apache Cassandra. Each scheme is a
module ``veil.kv.backends.<scheme>`` exposing ``open_backend(url)``; see
:mod:`veil.kv.backends.base` for the interface every backend implements.
"""

from __future__ import annotations

import importlib
from urllib.parse import urlsplit

from veil.errors import ParameterError
from veil.kv.backends.base import KVBackend, Row

__all__ = ["KVBackend", "Row", "open_backend"]

SCHEMES = ("sqlite", "cassandra")


def open_backend(url: str) -> KVBackend:
    """Open the backend that ``url`` names (``sqlite:///...`` or ``cassandra://...``)."""
    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise ParameterError(
            f"unknown key-value store URL {url!r}; use sqlite:///path/to/file.db "
            "or cassandra://host:port/keyspace"
        )
    try:
        module = importlib.import_module(f"veil.kv.backends.{scheme}")
    except ModuleNotFoundError as exc:
        if exc.name != f"veil.kv.backends.{scheme}":
            raise
        raise ParameterError(
            f"the {scheme} backend is not installed in this Veil build; "
            "use a sqlite:/// URL instead"
        ) from None
    backend: KVBackend = module.open_backend(url)
    return backend
