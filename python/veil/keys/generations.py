"""Which master key each table of a design is under: read from, and written into, its key scopes.

A table is under the key its scopes' markers name (``veil.keys.ring``), or,
unmarked, under the design's base key (``PhysicalDesign.key_fingerprint``).
A re-key marks a table's scopes as it re-encrypts it, and ends by taking
every marker off while making the new key the base (``veil.load.rekey``).

That last step, the *final switch*, also destroys the old key. A statement
that encrypts rows for a table it then adds to the design (CREATE TABLE,
ALTER TABLE: ``veil.load.ddl``) does so under the keys its session read when
it began, so it holds :func:`writing` (shared) from before it reads them
until its table is saved, and the switch is made under :func:`switching`
(exclusive): it waits for such statements, then finds their tables under the
old key and moves them too before destroying it; a statement begun after the
switch reads the new key.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from veil.design.model import AsheSums, Encryption, HomGroup, PhysicalDesign, TableDesign
from veil.keys.ring import marked, marker_of, unmarked


def _scoped(table: TableDesign) -> list[Encryption | AsheSums | HomGroup]:
    """The parts of a table that carry a key scope: its encryptions, sums and HOM group."""
    found: list[Encryption | AsheSums | HomGroup] = list(table.encryptions)
    return found + [p for p in (table.sums, table.hom) if p is not None]


def scopes(table: TableDesign) -> list[str]:
    """``table``'s key scopes, markers included: which keys its rows are encrypted under."""
    return [part.key_scope for part in _scoped(table)]


def table_keys(table: TableDesign, base: str) -> set[str]:
    """The fingerprints of the keys ``table``'s data is under (one, but for a table a
    JOIN onion adjusted onto a column of another generation)."""
    return {marker_of(part.key_scope) or base for part in _scoped(table)}


def scope_keys(design: PhysicalDesign) -> set[str]:
    """The fingerprints the design's markers name."""
    found = set()
    for table in design.tables.values():
        for part in _scoped(table):
            fingerprint = marker_of(part.key_scope)
            if fingerprint is not None:
                found.add(fingerprint)
    return found


def mark_table(table: TableDesign, fingerprint: str) -> None:
    """Every scope of ``table`` under the key of ``fingerprint`` (in place)."""
    for part in _scoped(table):
        part.key_scope = marked(part.key_scope, fingerprint)


def unmark_design(design: PhysicalDesign, fingerprint: str) -> None:
    """Make ``fingerprint`` the design's base key and take the markers off (in place).

    Only right once every table is under that key: a scope derives the same
    working keys marked under a ring as unmarked under its base.
    """
    for table in design.tables.values():
        for part in _scoped(table):
            part.key_scope = unmarked(part.key_scope)
    design.key_fingerprint = fingerprint


SWITCH_LOCK = "generation.lock"  # in the client directory


@contextmanager
def writing(client_dir: Path) -> Iterator[None]:
    """Held (shared) by a statement encrypting a table it will add to the design: no
    re-key's final switch meanwhile (``switching``)."""
    with _locked(client_dir, fcntl.LOCK_SH):
        yield


@contextmanager
def switching(client_dir: Path, waiting: Callable[[], None]) -> Iterator[None]:
    """Held (exclusive) by a re-key's final switch; ``waiting()`` is called first if
    statements holding ``writing`` make it wait."""
    with _locked(client_dir, fcntl.LOCK_EX, waiting):
        yield


@contextmanager
def _locked(
    client_dir: Path, kind: int, waiting: Callable[[], None] | None = None
) -> Iterator[None]:
    fd = os.open(client_dir / SWITCH_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(fd, kind)
        yield
    finally:
        os.close(fd)  # releases the lock
