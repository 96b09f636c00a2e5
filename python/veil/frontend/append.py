"""``veil load --append``: a source's rows added to tables the client directory holds.

The rows go in as INSERTs through a session (``veil.session.dml.insert_rows``),
batch by batch inside one transaction: the table keeps its design, its rows
and everything written since; constraints, defaults and sequences apply as
for any INSERT; and either every row lands or none does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa

from veil.load.loader import BATCH_ROWS, LoadReport, loaded_tables
from veil.load.sources import open_source
from veil.session.dml import insert_rows
from veil.session.session import Session


def append_source(
    source: str, client_dir: str, say: Callable[[str], None] = lambda _: None
) -> tuple[list[LoadReport], list[str]]:
    """Insert the rows of each source table the directory holds; returns the reports and
    the names of the source's other tables (for ``veil load`` to load as new ones)."""
    con, tables = open_source(source, say)
    held = loaded_tables(client_dir)
    reports: list[LoadReport] = []
    try:
        appended = [t for t in tables if t.name in held]
        if not appended:
            return [], [t.name for t in tables]
        session = Session(client_dir)
        try:
            session.begin()
            try:
                for table in appended:
                    started, rows = time.perf_counter(), 0
                    columns = [c.name for c in table.columns(con)]
                    for batch in table.batches(con, BATCH_ROWS):
                        given = pa.Table.from_batches([batch])
                        rows += insert_rows(session, table.name, columns, given).rowcount
                    seconds = time.perf_counter() - started
                    say(f"{table.name}: {rows:,} rows appended in {seconds:.1f} s")
                    reports.append(LoadReport(table.name, rows, seconds))
                session.commit()
            except BaseException:
                session.rollback()
                raise
        finally:
            session.close()
        return reports, [t.name for t in tables if t.name not in held]
    finally:
        con.close()
