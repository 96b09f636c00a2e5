"""Which OPE key scopes get a narrower ciphertext range (``veil.crypto.ope``'s ``cipher_bits``).

An int64 OPE column of ``bits``-bit plaintexts has ``bits + 31`` ciphertext bits
by default, and a server that bit-packs integers (DuckDB) stores about that many
a row, however few its values' own bits: TPC-DS SF 1's ss_net_profit, a
DECIMAL(7,2) (25-bit plaintexts), takes 56 bits a row, 20 MB of store_sales'
268 MB. With ``bits + NARROW_EXPANSION`` (16) ciphertext bits it takes 41.

The width follows from the column's ``bits`` (its SQL type's domain), never from
the loaded values: every value the type accepts, loaded now or written later,
encrypts into the narrower range. A scope (OPE columns compared with each
other) narrows only as a whole, when each of its columns is an int64 OPE column
of the same ``bits`` (not the bytes form, whose dictionary holds 8-byte values
either way, nor an onion layer, whose wrapped values are random); a scope that
tables loaded earlier (and not reloaded now) use keeps what they have.

Only where the server bit-packs integers: PostgreSQL stores 8 bytes a BIGINT
whatever its value, so there nothing changes.
"""

from __future__ import annotations

from veil.ciphers.columns import BYTES_FORM, OPE_CIPHER_BITS
from veil.crypto.ope import NARROW_CIPHER_BITS, NARROW_EXPANSION
from veil.design.model import OPE, Encryption, PhysicalDesign


def choose(fresh: PhysicalDesign, loaded: PhysicalDesign) -> None:
    """Set ``params["cipher_bits"]`` on the OPE scopes of ``fresh`` that qualify.

    Run after the bytes form is chosen (``form``: those scopes stay as they are).
    """
    earlier = {
        enc.key_scope: enc.params.get(OPE_CIPHER_BITS)
        for table in loaded.tables.values()
        if table.name not in fresh.tables
        for enc in table.encryptions
        if enc.scheme == OPE
    }
    for scope, encs in _scopes(fresh).items():
        width = earlier[scope] if scope in earlier else _width(encs)
        if isinstance(width, int):
            for enc in encs:
                enc.params[OPE_CIPHER_BITS] = width


def candidate(enc: Encryption) -> bool:
    """An int64 OPE column (not the bytes form, not an onion layer)."""
    return (
        enc.scheme == OPE
        and not enc.onion
        and enc.outer is None
        and not enc.ope_binary
        and enc.params.get("form") != BYTES_FORM
    )


def _width(encs: list[Encryption]) -> int | None:
    widths = {int(str(e.params.get("bits", 64))) + NARROW_EXPANSION for e in encs}
    if not all(candidate(e) for e in encs) or len(widths) != 1:
        return None
    width = widths.pop()
    return width if width <= NARROW_CIPHER_BITS else None


def _scopes(fresh: PhysicalDesign) -> dict[str, list[Encryption]]:
    members: dict[str, list[Encryption]] = {}
    for table in fresh.tables.values():
        for enc in table.encryptions:
            if enc.scheme == OPE:
                members.setdefault(enc.key_scope, []).append(enc)
    return members
