"""Ciphertexts of statement parameters that a cached plan fills in at each run (issue 41).

A plan made for ``WHERE o_orderkey = ?`` holds the ciphertext of the value it
was planned with. So that the same plan answers the next value without
planning again, the session hands the planner that ciphertext as a ``Slot``:
an ``int`` or ``bytes`` like any other (the planner's decisions see the real
value), marked with its number in the plan's list of slots. When a plan runs
under ``bound(values)``, rendering a statement (``veil.sql.remote.numbered``)
sends the run's ciphertext of each slot in place of the planned one; outside
``bound`` a slot is the ciphertext it always was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

PARAM = "veil_param"  # meta key of a bound ``?``: (its place among the markers, its parameter)

_BOUND: ContextVar[Sequence[object] | None] = ContextVar("veil_slots", default=None)


class SlotInt(int):
    """An integer ciphertext (DET, OPE) of a parameter: slot ``number`` of its plan."""

    number: int


class SlotBytes(bytes):
    """A bytes ciphertext of a parameter: slot ``number`` of its plan."""

    number: int


def slot(ciphertext: object, number: int) -> object | None:
    """``ciphertext`` marked as slot ``number`` (None: a kind of ciphertext no slot holds)."""
    marked: SlotInt | SlotBytes
    if isinstance(ciphertext, int) and not isinstance(ciphertext, bool):
        marked = SlotInt(ciphertext)
    elif isinstance(ciphertext, bytes):
        marked = SlotBytes(ciphertext)
    else:
        return None
    marked.number = number
    return marked


def filled(value: object) -> object:
    """What a statement sends for ``value``: this run's ciphertext if it is a slot."""
    if isinstance(value, SlotInt | SlotBytes):
        values = _BOUND.get()
        return value if values is None else values[value.number]
    return value


@contextlib.contextmanager
def bound(values: Sequence[object]) -> Iterator[None]:
    """Statements rendered inside send ``values[n]`` for slot ``n``."""
    token = _BOUND.set(values)
    try:
        yield
    finally:
        _BOUND.reset(token)
