"""``veil redesign``: move a loaded client directory to another design, table by table.

When the workload changes, ``veil design --from`` proposes a new design and
lists what changes; this applies it without the source data: each table whose
encryptions differ is read back through Veil (fetched and decrypted, as a
``SELECT *``), encrypted again under the new table design with fresh names and
keys, and swapped in atomically (``load_into``: the design file names the new
server tables only once they are complete, then the old ones are dropped).
Tables whose encryptions are unchanged are not touched.

A crash between tables leaves every table whole, under its old design or its
new one; running ``veil redesign`` again finishes the rest. Queries keep
running meanwhile (sessions follow the design file), each against a complete
table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from veil.design.fresh import fresh_design
from veil.design.model import DesignError, PhysicalDesign, TableDesign
from veil.exec.local_duckdb import source_duckdb
from veil.keys.generations import writing
from veil.load.loader import load_into
from veil.load.progress import Reporter
from veil.load.sources import SourceTable
from veil.session.session import Session
from veil.session.table_locks import exclusive

_SOURCE = "__veil_redesign_source"


@dataclass
class TableChange:
    """Encryptions to add and drop in one table (``"SCHEME source"``)."""

    table: str
    added: list[str]
    dropped: list[str]


def design_changes(current: PhysicalDesign, target: PhysicalDesign) -> list[TableChange]:
    """The tables whose stored encryptions differ between the two designs, by name."""
    if current.plaintext_schema() != target.plaintext_schema():
        raise DesignError(
            "the new design describes other tables or columns than the client directory; "
            "make it with `veil design` over this directory"
        )
    changes = []
    for name in sorted(target.tables):
        now, then = _stored(current.tables[name]), _stored(target.tables[name])
        if now != then:
            changes.append(TableChange(name, sorted(then - now), sorted(now - then)))
    return changes


def _stored(table: TableDesign) -> set[str]:
    """What a table stores, in design terms (names and keys aside)."""
    found = {f"{e.scheme} {e.source}" for e in table.encryptions}
    found |= {f"ASHE {s}" for s in (table.sums.sources if table.sums else [])}
    found |= {f"HOM {s}" for s in (table.hom.sources if table.hom else [])}
    return found


def redesign(
    session: Session, target: PhysicalDesign, progress: Callable[[str], None] | None = None
) -> list[TableChange]:
    """Rebuild each table of ``session``'s client directory that ``target`` changes."""
    session.follow_design()
    changes = design_changes(session.design, target)
    say = Reporter(progress or (lambda _: None))
    for change in changes:
        # writers wait (table_locks); a re-key's final switch too (keys.generations)
        with writing(session.client.path), exclusive(session.client.path, [change.table]):
            session.follow_design()
            _rebuild(session, target.tables[change.table], say)
        session.reload_design()
    return changes


def _rebuild(session: Session, table: TableDesign, say: Reporter) -> None:
    data = session.run(f'SELECT * FROM "{table.name}"').table
    fresh = fresh_design(
        PhysicalDesign(session.master.fingerprint(), {table.name: table}),
        session.master.fingerprint(),
    )
    source = source_duckdb()
    try:
        source.register(_SOURCE, data.rename_columns([c.name for c in table.columns]))
        load_into(
            source,
            [SourceTable(table.name, _SOURCE)],
            fresh,
            session.client,
            session.master,
            session.backend,
            say,
        )
    finally:
        source.close()
