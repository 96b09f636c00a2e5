"""Which DET integer key scopes get narrow ciphertexts (``veil.crypto.det_narrow``).

A scope (a column, or an equi-join group of columns) is narrowed when every
column of it is a DET integer stored as BIGINT (not the bytes form, not an
onion layer) and the loaded values fit ``MAX_BITS``: its width is the bit
length of the largest |value| across the scope, plus the sign and one bit of
headroom, at least FF1's ``MIN_BITS``. A scope that tables loaded earlier
(and not reloaded now) already use keeps its width, or its lack of one:
every column of a scope must encrypt alike for equality to hold.

Only where the server compresses what repeats or is narrow (DuckDB bit-packs
integers). PostgreSQL stores 8 bytes a BIGINT whatever its value, so there a
width sized from the data would save nothing, and a later value beyond it
would need its column retyped. There ``choose_by_type`` narrows the scopes
whose SQL types bound every value to 32 bits (INTEGER, SMALLINT, DATE,
BOOLEAN, DECIMAL(9, s) and narrower): FF1 over the type's own bits, whose
ciphertexts fit an INTEGER column (``STORED_BITS``, 4 bytes a row, not 8)
whatever the values, loaded now or written later.
"""

from __future__ import annotations

from veil.ciphers.columns import STORED_BITS
from veil.crypto.det_narrow import MAX_BITS, MIN_BITS
from veil.design.domains import signed_bits, type_domain
from veil.design.model import DET, Encryption, PhysicalDesign
from veil.encoding import BOOL_KIND
from veil.load import ashe_widths, fetch_copies

NARROW_PARAM = "narrow_bits"


def candidate(enc: Encryption) -> bool:
    """A DET integer column, or a precomputed boolean (not an onion layer).

    A boolean's 2 values bit-pack to 20 bits a row, and DuckDB filters them
    ~5x faster than a BLOB of the bytes form (6M rows: 5 against 25 ms).
    """
    if enc.scheme != DET or enc.onion or not enc.sql_type.is_integral:
        return False
    return not enc.is_expression or enc.sql_type.kind == BOOL_KIND


def choose(
    fresh: PhysicalDesign,
    loaded: PhysicalDesign,
    ranges: dict[int, tuple[int | None, int | None]],
) -> None:
    """Set ``params["narrow_bits"]`` on the DET scopes of ``fresh`` that qualify.

    ``ranges`` holds the encoded (min, max) of each candidate, by id(encryption);
    run after the bytes form is chosen (bytes-form scopes stay as they are).
    The ASHE flags words of ``fresh`` narrow too (``ashe_widths.count_on_columns``),
    and DET copies kept only to fetch OPE columns of few values go first
    (``fetch_copies``): narrowed, they would still take 20 bits a row.
    """
    fetch_copies.choose(fresh)
    members = _scopes(fresh)
    earlier = _earlier(fresh, loaded, NARROW_PARAM)
    for scope, encs in members.items():
        bits = earlier[scope] if scope in earlier else _width(encs, ranges)
        if isinstance(bits, int):
            for enc in encs:
                enc.params[NARROW_PARAM] = bits
    for table in fresh.tables.values():  # the ASHE flags word, as narrow as it may be
        ashe_widths.count_on_columns(table)


def _width(encs: list[Encryption], ranges: dict[int, tuple[int | None, int | None]]) -> int | None:
    largest = 0
    for enc in encs:
        if not candidate(enc) or enc.params.get("form") is not None or id(enc) not in ranges:
            return None
        low, high = ranges[id(enc)]
        if low is not None and high is not None:
            largest = max(largest, abs(low), abs(high))
    bits = max(MIN_BITS, largest.bit_length() + 2)  # sign, and room to grow
    return bits if bits <= MAX_BITS else None


def choose_by_type(fresh: PhysicalDesign, loaded: PhysicalDesign) -> None:
    """For a server storing each integer in its column type's bytes (PostgreSQL): narrow
    DET, stored as 32-bit integers, for the scopes whose SQL types bound every encoded
    value to 32 bits (``STORED_BITS``). No width depends on the data, so every value
    the types accept, now or later, encrypts into an INTEGER. A scope tables loaded
    earlier use keeps what they have (its width and stored form, or neither).

    The ASHE words of at most 31 bits too (``AsheSums.stored_bits``): a word is stored
    modulo 2**bits whatever the value, and a later value beyond the words' range is
    flagged, not stored there (``veil.load.ashe_widths``)."""
    earlier = _earlier(fresh, loaded, NARROW_PARAM)
    stored = _earlier(fresh, loaded, STORED_BITS)
    for scope, encs in _scopes(fresh).items():
        bits = earlier[scope] if scope in earlier else _type_width(encs)
        width = stored.get(scope) if scope in earlier else 32
        if isinstance(bits, int) and bits <= 32:
            for enc in encs:
                enc.params[NARROW_PARAM] = bits
                if width == 32:
                    enc.params[STORED_BITS] = 32
    for table in fresh.tables.values():  # ASHE words masked below 2**31: INTEGER columns
        if table.sums is not None:
            table.sums.stored_bits = 32


def _type_width(encs: list[Encryption]) -> int | None:
    """FF1's bits for a scope whose every column's type has a domain of at most 32 bits."""
    widest = MIN_BITS
    for enc in encs:
        domain = type_domain(enc.sql_type)
        if not candidate(enc) or enc.params.get("form") is not None or domain is None:
            return None
        widest = max(widest, signed_bits(*domain))
    return widest if widest <= 32 else None


def _scopes(fresh: PhysicalDesign) -> dict[str, list[Encryption]]:
    members: dict[str, list[Encryption]] = {}
    for table in fresh.tables.values():
        for enc in table.encryptions:
            if enc.scheme == DET:
                members.setdefault(enc.key_scope, []).append(enc)
    return members


def _earlier(fresh: PhysicalDesign, loaded: PhysicalDesign, param: str) -> dict[str, object]:
    """``param`` of each DET scope that tables loaded earlier (not reloaded now) use."""
    return {
        enc.key_scope: enc.params.get(param)
        for table in loaded.tables.values()
        if table.name not in fresh.tables
        for enc in table.encryptions
        if enc.scheme == DET
    }
