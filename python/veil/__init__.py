"""Veil: an encrypted database system.

The server holds only ciphertexts and does as much of each query as it can
over them; this client holds every key, decrypts what comes back and finishes
the query.
"""

from veil.dbapi import connect
from veil.errors import VeilError

__version__ = "0.1.0"

__all__ = ["VeilError", "__version__", "connect"]
