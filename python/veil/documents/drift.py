"""Blind ``$inc`` of a chained ``h_add`` field: the increment in clear, its drift bounded.

A chained word is ``w = E·2^k + 1`` with ``E = (v − lo + pad) mod 2^M``
(:mod:`veil.documents.chainlayout`). Adding ``δ·2^k`` on the server (``$inc`` of
the stored word) leaves the low ``k`` bits, the count of the group's proof,
untouched, and adds ``δ`` to the sums of the upper parts: one command, no read,
no new position, so no hole in the chain. The price: the server sees ``δ``.
That is why a field takes this path only with ``"reveal_increments": true`` in
its schema (docs/security.md); without it ``$inc`` stays the read-modify-write.

The upper parts are then no longer reduced mod ``2^M``: a document's word
holds ``E + d`` where ``d`` is the sum of the increments it received, and its
value ``v = v0 + d`` may leave the declared domain. What stays exact, and why:

* **The drift counter.** Before an increment is sent it claims ``|δ|`` units
  of the field's drift counter (a chain of its own, :data:`DRIFT_CHAIN`, in the
  field's claims collection), and is sent only if the claim ends at or below
  the budget ``B = (2^M − 1 − span) // 2`` (``span = hi − lo``); otherwise the
  update falls back to the read-modify-write. So the applied drift of the
  whole field, ``Σ|δ|`` over the increments sent, is at most ``min(D, B)``
  where ``D`` is the counter's length read at any later time.
* **One value** (a find): ``v − lo`` lies in ``[−B, span + B]``, a window of
  ``span + 2B + 1 ≤ 2^M`` integers, so ``((w >> k) − pad + B) mod 2^M − B + lo``
  is ``v``.
* **A group's sum** of ``n`` words (the count proves they are positions
  1..n of its chain): ``S − n·lo`` lies in ``[−D, n·span + D]``, exact when
  ``n·span + 2D < 2^M``; and every partial sum the server forms lies in
  ``[−D·2^k, (n·(2^M − 1) + D)·2^k + n]``, so none overflows int64 (which
  FerretDB and MongoDB would turn into an inexact double) when
  ``(n·(2^M − 1) + D)·2^k + n < 2^63``. ``D`` is read after the aggregation,
  so it covers every increment applied before it. When either condition
  fails the group is fetched (each value opened as above): never a wrong sum.
"""

from __future__ import annotations

from veil.documents.chainlayout import ChainLayout

#: The drift counter's chain number in a field's claims collection (chain numbers
#: of group values are non-negative).
DRIFT_CHAIN = -1
_INT64 = 2**63


def budget(layout: ChainLayout) -> int:
    """``B``: the total ``|δ|`` a field's blind increments may ever reach."""
    return max(0, ((1 << layout.sum_bits) - 1 - (layout.hi - layout.lo)) // 2)


def sum_is_exact(layout: ChainLayout, length: int, drift: int) -> bool:
    """Whether a group of ``length`` words with at most ``drift`` applied drift sums
    exactly: its window fits ``2^M`` and no partial sum overflows int64."""
    top = (1 << layout.sum_bits) - 1
    if length * (layout.hi - layout.lo) + 2 * drift > top:
        return False
    return (length * top + drift) * (1 << layout.count_bits) + length < _INT64


def increment(layout: ChainLayout, delta: int) -> int:
    """The server ``$inc`` of a word that adds ``delta`` to its value."""
    return delta << layout.count_bits
