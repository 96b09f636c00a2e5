"""What a point UPDATE's match reads of the columns it keeps (issue 41).

A point UPDATE (``veil.session.point_writes``) writes its rows in place under
fresh row ids (``veil.session.row_ids``), so every row-bound RND column
changes even where its value does not. Before, the match decrypted every
column and the write encrypted every one again: for TPC-H ``orders`` and
``SET o_comment = ?``, decoding and encoding six kept columns were ~0.5 ms
of a ~2 ms UPDATE by key on PostgreSQL. Now the match reads

- the columns the SET values write or read, a written foreign key's
  columns, and any column stored otherwise: decrypted, as before;
- a kept column stored only as plain row-bound RND (besides DET): as its
  stored values (``Scan.ciphertext``), carried to the new id by XOR with the
  old and new ids' keystreams (``veil.ciphers.encrypt.Resealed``);
- a kept column stored only as DET: not at all (an UPDATE in place never
  writes it: ``veil.session.dml.unchanged_columns``);
- an assigned column whose new value reads no old one (``held``: the SET
  values made without DuckDB, ``veil.session.set_values``): not at all; a
  column of NULLs of its type holds its place in the rows the SET values
  fill (decrypting its old value only to replace it cost ~0.14 ms of a
  PostgreSQL UPDATE by key).

Before -> after, for ``UPDATE orders SET o_comment = ? WHERE o_orderkey = ?``:
``SELECT <all 9 columns>`` decrypted -> six RND columns as stored (``o_comment``
held, the two DET keys not read; on DuckDB, with an index on ``o_orderkey``, its
stored DET value too, by which the write finds the row: ``locator``). Where the write needs whole rows (a server that cannot
update in place, CHECKs, per-row expressions, a HOM group, ASHE sums, BLOCKS)
every column is decrypted, as before. A write whose design moved meanwhile
(``DesignMoved``) writes nothing and plans again.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

import pyarrow as pa

from veil.ciphers.blocks import block_columns
from veil.ciphers.encrypt import Resealed
from veil.design.model import BLOCKS, DesignError, Encryption, TableDesign
from veil.exec.direct import projection
from veil.keys.generations import scopes
from veil.session import dml
from veil.session.context import SessionContext
from veil.sql.plan import RND_ROW_ID, ROW_ID, SplitPlan


class DesignMoved(Exception):
    """The match ran on a design whose keys or columns are no longer the table's."""


def split(
    session: SessionContext,
    table: TableDesign,
    assigned: set[str],
    reads: set[str],
    held: AbstractSet[str] = frozenset(),
) -> tuple[list[str], dict[str, str], list[str]]:
    """The columns the match decrypts, those it may read as stored (each with its server
    column), and the assigned ones it leaves out (``held``, their new values made from
    the parameters alone), in table order; a column in none it never reads."""
    everything: tuple[list[str], dict[str, str], list[str]] = (
        [c.name for c in table.columns],
        {},
        [],
    )
    if (
        not session.backend.updates_in_place
        or table.checks
        or table.hom is not None
        or table.sums is not None
        or block_columns(table)
        or any(e.is_expression for e in table.encryptions)
    ):
        return everything
    referenced = {c for r in table.references if assigned & set(r.columns) for c in r.columns}
    needed = assigned | reads | referenced
    placeable = (held & assigned) - reads - referenced
    kept = set(dml.unchanged_columns(table, {c.name for c in table.columns} - assigned))
    encrypting = dml.encryptor(session, table)
    decrypted: list[str] = []
    sealable: dict[str, str] = {}
    placed: list[str] = []
    for column in table.columns:
        stored = [e for e in table.encryptions if e.source == column.name and e.name not in kept]
        if column.name in placeable:
            placed.append(column.name)
        elif column.name in needed or len(stored) > 1:
            decrypted.append(column.name)
        elif len(stored) == 1:
            enc = stored[0]
            if encrypting.resealable(enc.name) and not enc.params.get("lazy"):
                sealable[column.name] = enc.name
            else:
                decrypted.append(column.name)
    return decrypted, sealable, placed


def locator(
    session: SessionContext, table: TableDesign, assigned: set[str]
) -> tuple[str, str] | None:
    """A column the write keeps, fetched as its DET column (which the write leaves as it is)
    that an index of its own covers, with that server column: the match reads each row's stored value of it, by which a
    server that ``locates_rows`` finds the row (``veil.session.dml``, ``LOCATOR``): the
    same row as by its id alone, whose check it keeps. None: no such column, or a server
    that finds rows by their ids only."""
    backend = session.backend
    if not backend.locates_rows:
        return None
    kept = {c.name for c in table.columns} - assigned
    unwritten = set(dml.unchanged_columns(table, kept))
    indexed = _indexed(session, table)
    for column in table.columns:
        try:
            enc = table.fetchable(column.name)  # what the match fetches of it
        except DesignError:
            continue
        if enc.name in unwritten and enc.name in indexed:
            return column.name, enc.name
    return None


def _indexed(session: SessionContext, table: TableDesign) -> frozenset[str]:
    """The server columns of ``table`` that an index of their own covers, read once per
    server table (an index made later is not used until the process starts again; one
    dropped leaves the write scanning, as before)."""
    key = (session.backend.url, table.server_name)
    found = _INDEXED.get(key)
    if found is None:
        found = frozenset(
            column
            for _, sql in session.backend.indexes(table.server_name)
            if (column := _one_column(sql)) is not None
        )
        if len(_INDEXED) >= 256:
            _INDEXED.clear()
        _INDEXED[key] = found
    return found


_INDEXED: dict[tuple[str, str], frozenset[str]] = {}


def _one_column(sql: str) -> str | None:
    """The column of ``CREATE [UNIQUE] INDEX name ON table(column)``; None for any other."""
    inside = sql[sql.rfind("(") + 1 : sql.rfind(")")] if sql.count("(") == 1 else ""
    name = inside.strip().strip('"')
    return name if name and all(ch.isalnum() or ch == "_" for ch in name) else None


def leave_stored(plan: SplitPlan, table: str, sealable: dict[str, str]) -> None:
    """Have ``plan`` fetch the ``sealable`` columns as stored (``Scan.ciphertext``) where
    its answer is its one scan's columns as fetched (``veil.exec.direct``): then each
    comes back as its server column's values, with the row ids they are under."""
    if not sealable or plan.late_outputs or len(plan.scans) != 1:
        return
    found = projection(plan)
    if found is None or found[0].table.name != table:
        return
    scan, pairs = found
    named = dict(pairs)  # each column's output name
    fetched = scan.fetched()
    if not any(column in (ROW_ID, RND_ROW_ID) for column, _ in fetched):
        return
    servers = {column: enc.name for column, enc in fetched if enc is not None}
    for column, server in sealable.items():
        if servers.get(column) == server and named.get(column) == column:
            scan.ciphertext.add(column)


def stored_rows(
    session: SessionContext,
    columns: pa.Table,
    decrypted: list[str],
    sealable: dict[str, str],
    assigned: set[str],
    plan: SplitPlan,
    table: TableDesign,
    row_ids: pa.Array,
    placed: Sequence[str] = (),
) -> tuple[pa.Table, Resealed | None]:
    """The matched rows' decrypted columns, and the stored ones to carry to new ids.

    ``columns``: the match's columns by name (``decrypted``, then ``sealable``);
    ``placed``: assigned columns the match left out, each given a column of
    NULLs of its type for the SET values to fill.
    Fails closed (``DesignMoved``) if a server column of ``table`` would be
    left unwritten, or the match's design has other keys or columns.
    """
    if len(decrypted) == len(table.columns):
        return columns, None  # whole rows, decrypted
    sealed = [c for c in sealable if len(plan.scans) == 1 and c in plan.scans[0].ciphertext]
    rows = _held(columns.drop_columns(sealed) if sealed else columns, table, placed, row_ids)
    carried = _carried(session, sealable, plan, table, columns, sealed)
    kept = set(dml.unchanged_columns(table, {c.name for c in table.columns} - assigned))
    present = set(rows.column_names)
    written = [e for e in table.encryptions if e.scheme != BLOCKS and e.name not in kept]
    if any(e.source not in present for e in written if e.name not in carried):
        raise DesignMoved  # a column the write needs and the match left out
    if not carried:
        return rows, None
    ids = row_ids.cast(pa.int64()).to_numpy(zero_copy_only=False)
    return rows, Resealed(ids, carried)


def _held(rows: pa.Table, table: TableDesign, placed: Sequence[str], row_ids: pa.Array) -> pa.Table:
    """``rows`` with a column of NULLs for each ``placed`` column, of the type its
    decrypted values would have (``decode``'s: the SQL type's Arrow type)."""
    if not placed:
        return rows
    count = len(row_ids)  # ``rows`` may have no column, and so no length
    held = {}
    for name in placed:
        column = table.column(name)
        if column is None:
            raise DesignMoved  # a column dropped since the shape was kept
        held[name] = pa.nulls(count, column.sql_type.arrow_type())
    if not rows.num_columns:
        return pa.table(held)
    for name, values in held.items():
        rows = rows.append_column(name, values)
    return rows


def _carried(
    session: SessionContext,
    sealable: dict[str, str],
    plan: SplitPlan,
    table: TableDesign,
    columns: pa.Table,
    sealed: list[str],
) -> dict[str, pa.Array]:
    """The stored values of the ``sealed`` columns, by server column."""
    if not sealed:
        return {}
    source = plan.scans[0].table
    moved = source is not table  # the same design object has the same keys and columns
    if moved and (source.server_name, scopes(source)) != (table.server_name, scopes(table)):
        raise DesignMoved  # a rebuild or a re-key between planning and now
    encrypting = dml.encryptor(session, table)
    carried = {}
    for column in sealed:
        server = sealable[column]
        if moved and _encryption(table, server) != _encryption(source, server):
            raise DesignMoved
        if not encrypting.resealable(server):
            raise DesignMoved
        carried[server] = columns.column(column).combine_chunks()
    return carried


def _encryption(table: TableDesign, name: str) -> Encryption | None:
    return next((e for e in table.encryptions if e.name == name), None)
