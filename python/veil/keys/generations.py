"""Which master key each table of a design is under: read from, and written into, its key scopes.

A table is under the key its scopes' markers name (``veil.keys.ring``), or,
unmarked, under the design's base key (``PhysicalDesign.key_fingerprint``).
A re-key marks a table's scopes as it re-encrypts it, and ends by taking
every marker off while making the new key the base (``veil.load.rekey``).
"""

from __future__ import annotations

from veil.design.model import AsheSums, Encryption, HomGroup, PhysicalDesign, TableDesign
from veil.keys.ring import marked, marker_of, unmarked


def _scoped(table: TableDesign) -> list[Encryption | AsheSums | HomGroup]:
    """The parts of a table that carry a key scope: its encryptions, sums and HOM group."""
    found: list[Encryption | AsheSums | HomGroup] = list(table.encryptions)
    return found + [p for p in (table.sums, table.hom) if p is not None]


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
