"""Which numbers' RND copies are fitted to the loaded values (``veil.ciphers.fitted_rnd``).

An onion load fetches a number of under 64 bits from a row-bound RND copy
(``veil.designer.onions``); fitted to the span of its loaded values, each row
takes the bits of that span (with headroom) instead of its type's, and a later
value beyond it still works, in the type's width. Only onion copies, whose
server bit-packs integers (DuckDB: the copies exist there only).
"""

from __future__ import annotations

from veil.ciphers.fitted_rnd import FIT_PARAM, fitted_range
from veil.design.model import RND, RND_BITS, Encryption, TableDesign


def candidate(enc: Encryption) -> bool:
    """An onion load's RND copy of a number, in its type's bits."""
    return enc.scheme == RND and enc.origin == "onion" and isinstance(enc.params.get(RND_BITS), int)


def choose(table: TableDesign, ranges: dict[int, tuple[int | None, int | None]]) -> None:
    """Fit each candidate of ``table`` whose encoded ``(min, max)`` (by id(encryption)) is
    known and narrower than its type."""
    for enc in table.encryptions:
        low, high = ranges.get(id(enc), (None, None))
        if not candidate(enc) or low is None or high is None:
            continue
        fit = fitted_range(low, high, int(str(enc.params[RND_BITS])))
        if fit is not None:
            enc.params[FIT_PARAM] = fit
