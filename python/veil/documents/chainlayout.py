"""The bit layout of a chained ``h_add`` field's words (veil.documents.chains).

A value ``v`` in the declared domain ``[lo, hi]`` at a chain position with pad
``pad`` is stored as one int64 word ``(E << k) + 1``, ``E = (v - lo + pad) mod 2**M``,
so that the server's ``$sum`` of a group's words holds the sum of the ``E`` above
bit ``k`` and the count of words below it. ``M`` and ``k`` are chosen from the domain
alone: as long chains as possible whose sums still fit one int64.
"""

from __future__ import annotations

from dataclasses import dataclass

from veil.documents.errors import FieldTypeError, SchemaError


@dataclass(frozen=True)
class ChainLayout:
    """The bit layout of a chained field's words for values in ``[lo, hi]``."""

    lo: int
    hi: int
    count_bits: int  # k
    sum_bits: int  # M

    @classmethod
    def for_domain(cls, path: str, lo: int, hi: int) -> ChainLayout:
        """The layout with the longest chains whose words still sum below ``2**63``."""
        span = hi - lo
        for k in range(31, 0, -1):
            capacity = (1 << k) - 1
            sum_bits = max(1, (capacity * span).bit_length())
            if capacity * ((((1 << sum_bits) - 1) << k) + 1) < 2**63:
                return cls(lo, hi, k, sum_bits)
        raise SchemaError(
            f"field {path!r}: the domain [{lo}, {hi}] is too wide for a chained h_add "
            "(its sums cannot fit one int64 word); narrow it or drop the chain"
        )

    @property
    def capacity(self) -> int:
        """Documents a chain sums exactly; a longer chain's sums are fetched."""
        return (1 << self.count_bits) - 1

    def sub_chain(self, position: int) -> int:
        """The sub-chain of a position (1-based): each sums ``capacity`` positions."""
        return (position - 1) // self.capacity

    def check(self, path: str, value: int) -> None:
        if not self.lo <= value <= self.hi:
            raise FieldTypeError(
                f"field {path!r}: {value} is outside the domain [{self.lo}, {self.hi}] the "
                "schema declares for this chained h_add field; widen the domain or store "
                "the value in another field"
            )

    def word(self, value: int, pad: int) -> int:
        shifted = (value - self.lo + pad) % (1 << self.sum_bits)
        return (shifted << self.count_bits) + 1

    def open(self, total: int, pads: int, count: int, drift: int = 0) -> int:
        """The plaintext sum of ``count`` words whose summed pads are ``pads``, their
        shifted sum in ``[-drift, 2**M - drift)`` (blind increments: veil.documents.drift)."""
        shifted = ((total >> self.count_bits) - pads + drift) % (1 << self.sum_bits) - drift
        return shifted + count * self.lo

    def count(self, total: int) -> int:
        return total & self.capacity
