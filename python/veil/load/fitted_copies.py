"""Which numbers' RND copies are fitted to the loaded values (``veil.ciphers.fitted_rnd``).

A number of under 64 bits is fetched from a row-bound RND copy in its type's
bits: an onion load's copies (``veil.designer.onions``) and the greedy
design's RND columns alike. Fitted to the span of its loaded values, each row
takes the bits of that span (with headroom) instead of its type's, and a later
value beyond it still works, in the type's width. Only where the server
bit-packs integers (DuckDB): onion copies exist there only; the greedy
design's are fitted where the loader says the server packs them
(``packed``), as PostgreSQL stores 8 bytes a BIGINT whatever its bits, so a
fit there would tell the server the values' span and save nothing.

TPC-DS SF 1's greedy RND columns (prices, quantities, a few keys, DECIMAL(7,2)
in 25 bits, INTEGER in 32) span far fewer bits: cs_list_price 15, ws_ship_customer_sk
17, cr_return_quantity 7. A point UPDATE still carries a fitted copy's stored
values to the row's new id without decrypting them (``Resealed``).
"""

from __future__ import annotations

from veil.ciphers.fitted_rnd import FIT_PARAM, fitted_range
from veil.design.model import RND, RND_BITS, Encryption, TableDesign


def candidate(enc: Encryption) -> bool:
    """An RND copy of a number, in its type's bits (its own value's: not an onion layer)."""
    return (
        enc.scheme == RND
        and enc.outer is None
        and enc.sql_type.is_integral
        and isinstance(enc.params.get(RND_BITS), int)
    )


def choose(
    table: TableDesign, ranges: dict[int, tuple[int | None, int | None]], *, packed: bool = False
) -> None:
    """Fit each candidate of ``table`` whose encoded ``(min, max)`` (by id(encryption)) is
    known and narrower than its type: an onion load's copies, and the greedy design's
    too where the server bit-packs integers (``packed``)."""
    for enc in table.encryptions:
        low, high = ranges.get(id(enc), (None, None))
        if not candidate(enc) or low is None or high is None:
            continue
        if enc.origin != "onion" and not packed:
            continue
        fit = fitted_range(low, high, int(str(enc.params[RND_BITS])))
        if fit is not None:
            enc.params[FIT_PARAM] = fit
