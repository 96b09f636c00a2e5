"""``veil load``: plaintext source -> encode -> encrypt column-wise -> bulk load.

Each table is loaded atomically (the backend loads a staging table and renames
it), and the design file is rewritten after each table, so the design always
describes exactly the tables on the server. A failed load can simply be run
again: the table is designed afresh under new opaque names and the old
server table, if any, is dropped once the new one is in place.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import sqlglot

from veil.backends import Backend, connect
from veil.crypto.keys import MasterKey
from veil.design.greedy import greedy_design
from veil.design.model import Column, PhysicalDesign, TableDesign
from veil.encoding import SqlType, encode_scalar
from veil.exec.ciphers import available_schemes
from veil.exec.clientdir import ClientDir, create_client_dir
from veil.exec.encrypt import TableEncryptor, ope_bits, uses_ope
from veil.load.sources import SourceTable, open_source

BATCH_ROWS = 65536

Progress = Callable[[str], None]


@dataclass
class LoadReport:
    table: str
    rows: int
    seconds: float


def read_workload(paths: list[str]) -> list[str]:
    """The statements of the given SQL files (several per file, ``;``-separated)."""
    queries: list[str] = []
    for path in paths:
        text = Path(path).read_text()
        queries += [s.sql(dialect="duckdb") for s in sqlglot.parse(text, read="duckdb") if s]
    return queries


def load(
    source: str,
    server_url: str,
    client_dir: str,
    workload: list[str] | None = None,
    progress: Progress | None = None,
    *,
    hom: bool = False,
) -> list[LoadReport]:
    """Load every table of ``source``; returns what was loaded.

    ``hom`` adds Paillier columns for the workload's SUM/AVG arguments (slow to
    load: about a millisecond per row and summed expression).
    """
    say = progress or (lambda text: print(text, file=sys.stderr))
    client, master = create_client_dir(client_dir, server_url)
    con, tables = open_source(source)
    schema = {t.name: t.columns(con) for t in tables}
    fresh = greedy_design(
        schema, workload or [], available_schemes(), master.fingerprint(), hom=hom
    )
    design = client.design(master) if client.has_design() else PhysicalDesign(master.fingerprint())
    backend = connect(server_url)
    try:
        return [
            _load_table(t, con, fresh.tables[t.name], design, client, master, backend, say)
            for t in tables
        ]
    finally:
        backend.close()
        con.close()


def _load_table(
    source: SourceTable,
    con: duckdb.DuckDBPyConnection,
    table: TableDesign,
    design: PhysicalDesign,
    client: ClientDir,
    master: MasterKey,
    backend: Backend,
    say: Progress,
) -> LoadReport:
    started = time.perf_counter()
    _size_ope_columns(source, con, table)
    encryptor = TableEncryptor(master, table)
    rows = backend.bulk_load(
        table.server_name,
        _encrypted_batches(source, con, encryptor, say),
        schema=encryptor.server_schema(_empty(table.columns)),
    )
    table.row_count = rows
    previous = design.tables.get(table.name)
    design.tables[table.name] = table
    design.save(client.design_path)
    if previous is not None and previous.server_name != table.server_name:
        backend.drop_table(previous.server_name)
    seconds = time.perf_counter() - started
    say(f"{table.name}: {rows} rows loaded in {seconds:.1f} s")
    return LoadReport(table.name, rows, seconds)


def _encrypted_batches(
    source: SourceTable, con: duckdb.DuckDBPyConnection, encryptor: TableEncryptor, say: Progress
) -> Iterator[pa.RecordBatch]:
    done = 0
    for batch in source.batches(con, BATCH_ROWS):
        plain = pa.Table.from_batches([batch]).rename_columns(
            [c.lower() for c in batch.schema.names]
        )
        yield from encryptor.encrypt(plain).to_batches()
        done += batch.num_rows
        say(f"{source.name}: {done} rows encrypted")


def _size_ope_columns(
    source: SourceTable, con: duckdb.DuckDBPyConnection, table: TableDesign
) -> None:
    """Choose each OPE column's plaintext width from the data's range.

    Columns sharing an OPE key scope (compared with each other) share a width,
    or their ciphertexts would not be comparable.
    """
    widths: dict[str, int] = {}
    for enc in uses_ope(table):
        low, high = source.min_max(con, enc.source)
        sql_type = SqlType(enc.type)
        bits = ope_bits(
            _as_int(encode_scalar(low, sql_type)), _as_int(encode_scalar(high, sql_type))
        )
        widths[enc.key_scope] = max(bits, widths.get(enc.key_scope, 0))
    for enc in uses_ope(table):
        enc.params["bits"] = widths[enc.key_scope]


def _as_int(value: int | bytes | None) -> int | None:
    return value if isinstance(value, int) else None


def _empty(columns: list[Column]) -> pa.Table:
    return pa.table({c.name: pa.array([], type=c.sql_type.arrow_type()) for c in columns})
