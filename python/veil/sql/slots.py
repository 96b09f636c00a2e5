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

# this run's ciphertexts, and whether statements keep a slot's place (``Pending``) for them
_BOUND: ContextVar[tuple[Sequence[object], bool] | None] = ContextVar("veil_slots", default=None)


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


class Pending:
    """A rendered statement's parameter that is slot ``number``: filled as it is sent
    (``sent``), so the rendered text serves every run of its plan."""

    __slots__ = ("number",)

    def __init__(self, number: int):
        self.number = number


def filled(value: object) -> object:
    """What a statement rendered now holds for ``value``: if it is a slot, this run's
    ciphertext, or its ``Pending`` place when statements are kept for later runs."""
    if isinstance(value, SlotInt | SlotBytes):
        found = _BOUND.get()
        if found is None:
            return value
        values, pending = found
        return Pending(value.number) if pending else values[value.number]
    return value


def sent(params: list[object]) -> list[object]:
    """A rendered statement's parameters with each ``Pending`` slot's ciphertext of this run."""
    if not any(isinstance(p, Pending) for p in params):
        return params
    found = _BOUND.get()
    if found is None:
        raise RuntimeError("a kept statement with parameter slots runs outside its binding")
    return [found[0][p.number] if isinstance(p, Pending) else p for p in params]


@contextlib.contextmanager
def bound(values: Sequence[object], *, pending: bool = False) -> Iterator[None]:
    """Statements rendered inside hold ``values[n]`` for slot ``n`` (``pending``: their
    place, filled from ``values`` as each is sent; for servers that take parameters)."""
    token = _BOUND.set((values, pending))
    try:
        yield
    finally:
        _BOUND.reset(token)
