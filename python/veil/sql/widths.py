"""Bytes per fetched row, estimated from the design: what the planner and the cost model
count a statement's result by (``pushdown_joins``, ``veil.cost.model``)."""

from __future__ import annotations

from veil.design.model import BLOCKS, DET, OPE, Encryption

_FIXED_WIDTH = ("int", "date", "timestamp", "decimal", "bool", "float")
TEXT_BYTES = 24  # a text column's mean length when the load recorded none
_CIPHERTEXT_BYTES = 17


def encryption_width(enc: Encryption | None) -> float:
    """8 for a width-preserving DET/OPE integer (and a row id or count: None); a text's
    mean length (recorded at load, else 24) plus its ciphertext's 17 bytes (version, SIV or
    nonce and tag); in BLOCKS, the row id and about a third of the text (zstd)."""
    if enc is None or (enc.scheme in (DET, OPE) and enc.sql_type.kind in _FIXED_WIDTH):
        return 8
    mean = enc.params.get("mean_bytes")
    text = float(mean) if isinstance(mean, int | float) else TEXT_BYTES
    return 8 + text / 3 if enc.scheme == BLOCKS else text + _CIPHERTEXT_BYTES
