"""Peeling onions at run time: a layer comes off when a query first needs what is beneath.

A column loaded adaptively (``veil.designer.onions``) is stored as DET and OPE
ciphertexts wrapped in row-bound RND (``Encryption.outer``): the server can
compare nothing. Before a query is planned, ``wanted_peels`` asks the
workload analysis which server operations it would use (equality, grouping,
joins: DET; ranges, ORDER BY, MIN/MAX: OPE) and keeps the wrapped layers the
column's policy allows to come off. ``peel`` then, per layer:

1. in one server transaction: locks the column's row of the table's layers
   table (``lock_layers``), and unless it already says peeled, sends
   the layer key and lets the server XOR the column with its keystream
   (``veil_layer_xor_*``) and marks the row peeled;
2. after the commit, under the client directory's lock, drops the layer
   from the design (read fresh from disk), saves it and logs the peel.

The JOIN-ADJ, OPE and SEARCH onions of a load, and the DET onions of the
columns fetched from a copy instead (text from sealed blocks, numbers of under
64 bits from a row-bound RND copy: ``veil.designer.onions``), are not built at
load (``defer_layers``: ``params["lazy"]``; most columns are never joined,
ranged or searched, and those layers were most of an onion load's time and
space): the server holds NULLs in their columns, which the planner never reads
until they are built (``TableDesign.find``, ``fetchable``). Their first peel
builds them instead of XORing (in step 1, under the same lock): it fetches the
column's DET onion (or its copy) with the row ids, decrypts it on the client,
encrypts the values under the layer's scheme and writes the ciphertexts,
without the RND layer, to every row. The server sees what an XOR peel would
have shown it (SEARCH's words, never wrapped, reveal nothing until a query
sends a word's token), and no plaintext. An onion load's ASHE words are built
so too, all of a table's at once, by the first SUM or AVG of one of them
(``veil.session.ashe_build``; ``Peel(..., ASHE)``).

A crash between 1 and 2 leaves the server peeled and the design wrapped;
``reconcile`` (run whenever a session reads the design) repairs the design
from the layers table. Peeling is idempotent: a layer already off is not
XORed again (the XOR is its own inverse), whichever client got there first.
The layer key reveals that one layer of that one column, nothing else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from veil.backends.base import OLD_KEY, BackendError, quote
from veil.ciphers.columns import (
    JoinCipher,
    RowBoundCipher,
    column_cipher,
    layer_form,
    layer_key,
)
from veil.ciphers.encrypt import rnd_context
from veil.crypto.keys import KeyLabel, MasterKey
from veil.design.model import (
    ASHE,
    BLOCKS,
    DET,
    JOIN,
    OPE,
    RND,
    SEARCH,
    AsheSums,
    DesignError,
    Encryption,
    PhysicalDesign,
    TableDesign,
    opaque_name,
)
from veil.design.policy import Policy
from veil.errors import SerializationError
from veil.exec.decrypt import BlockReader
from veil.exec.server import FetchStats, run_remote
from veil.session.ashe_build import ashe_layer, ashe_words, unbuilt_sums
from veil.session.context import SessionContext
from veil.session.peel_marks import peeling, unmark
from veil.sql.remote import (
    LAYER_COLUMN,
    LAYER_KEY,
    LAYER_PEELED,
    SET_ASIDE_INDEX,
    index_rebuilt_statement,
    layer_states_statement,
    lock_layer_statements,
    mark_peeled_statement,
    mark_rekeyed_statement,
    peel_statement,
    peeled_rows_statement,
    rekey_statement,
    rekeyed_rows_statement,
    render,
    set_aside_index_statement,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# what each layer lets the server learn, once peeled (``veil leakage``, ``veil explain``)
REVEALS = {
    DET: "which rows hold equal values",
    OPE: "the order of values",
    JOIN: "which rows hold equal values (re-keyable for joins)",
    SEARCH: "nothing until a query searches a word, then which rows hold it",
    ASHE: "nothing (the server adds the words blind)",
}
LAYERED = (DET, OPE, JOIN)  # the onions wrapped in RND at load
# the onions a load leaves for their first peel to build: DET only where another form
# fetches the column (``_build_source``: text's blocks, a number's RND copy)
DEFERRED = (DET, OPE, JOIN, SEARCH)
# the onions with a row in the layers table: the wrapped ones, and SEARCH (built or not)
TRACKED = (*LAYERED, SEARCH)
LAZY = "lazy"  # ``Encryption.params`` key: an onion layer not built on the server yet
_CONFLICT = "onflict"  # DuckDB: another transaction wrote the layers row first
_ATTEMPTS = 100


@dataclass(frozen=True)
class Peel:
    """Take the RND layer off ``table.column``'s onion of ``scheme`` (DET, OPE or JOIN), or
    build an unbuilt one (SEARCH's words, which have no RND layer; ASHE: the table's sums,
    ``column`` one of them)."""

    table: str
    column: str
    scheme: str

    def __str__(self) -> str:
        if self.scheme == ASHE:  # every summed column of the table at once
            return f"{self.table}: its sums' ASHE words built ({REVEALS[ASHE]})"
        return f"{self.table}.{self.column} to {self.scheme} ({REVEALS[self.scheme]})"


@dataclass(frozen=True)
class Rekey:
    """Re-key ``table.column``'s JOIN onion onto the key of ``onto``'s (JOIN-ADJ)."""

    table: str
    column: str
    onto: tuple[str, str]

    def __str__(self) -> str:
        return (
            f"{self.table}.{self.column} re-keyed to join {'.'.join(self.onto)} (JOIN-ADJ: "
            "which rows of the two hold equal values)"
        )


Adjustment = Peel | Rekey


def has_wrapped(design: PhysicalDesign) -> bool:
    """Does the design hold onions a query could still adjust (a wrapped or unbuilt layer, a
    JOIN key)?"""
    return any(
        e.outer or e.scheme == JOIN or unbuilt(e)
        for t in design.tables.values()
        for e in t.encryptions
    ) or any(unbuilt_sums(t) is not None for t in design.tables.values())


def wanted_peels(design: PhysicalDesign, policy: Policy, tree: exp.Expr) -> list[Adjustment]:
    """The layers ``tree`` would compute on, and the join keys to adjust, that ``policy`` allows."""
    # here, not at the top: a plan kept by an earlier process runs without the workload's
    # analysis and the planner passes it imports (issue 41)
    from veil.sql.workload import analyse_tree

    needs = analyse_tree(tree, design.plaintext_schema())
    # an order between two columns needs one OPE key, which per-column onions never share
    asked = [(ref, DET) for ref in sorted(needs.det)]
    asked += [(ref, OPE) for ref in sorted(needs.ope_alone)]
    found: list[Adjustment] = []
    for (table, column), scheme in asked:
        enc = design.tables[table].onion_of(column, scheme)
        if enc is not None and enc.outer is not None and policy.allows(table, column, scheme):
            found.append(Peel(table, column, scheme))
    for table, column in sorted(needs.search):  # words: no more than DET may reveal
        enc = design.tables[table].onion_of(column, SEARCH)
        if enc is not None and unbuilt(enc) and policy.allows(table, column, DET):
            found.append(Peel(table, column, SEARCH))
    _join_adjustments(design, policy, sorted(needs.joins), found)
    found += _sums_to_build(design, needs.sums)
    return found


def _sums_to_build(design: PhysicalDesign, summed: set[tuple[str, str]]) -> list[Adjustment]:
    """A build of each table's unbuilt ASHE sums (``veil.session.ashe_build``) that a
    SUM/AVG of the query reads; ASHE reveals nothing, so any policy allows it."""
    found: list[Adjustment] = []
    for table, source in sorted(summed):
        sums = unbuilt_sums(design.tables[table]) if table in design.tables else None
        if sums is None or source not in sums.sources or not _buildable(design, table):
            continue
        if all(not (isinstance(a, Peel) and a.table == table) for a in found):
            found.append(Peel(table, source, ASHE))
    return found


def _buildable(design: PhysicalDesign, table: str) -> bool:
    """Is every source of the table's sums a column the client can fetch?"""
    found = design.tables[table]
    sums = found.sums
    assert sums is not None
    try:
        return all(found.column(s) is not None and found.fetchable(s) for s in sums.sources)
    except DesignError:
        return False


def _join_adjustments(
    design: PhysicalDesign,
    policy: Policy,
    joins: list[tuple[tuple[str, str], tuple[str, str]]],
    found: list[Adjustment],
) -> None:
    """Peel both JOIN onions of each join and re-key the join class cheaper to move (fewer
    rows to rewrite: ``_moving_cost``) onto the other."""
    scopes = {
        (t.name, e.source): e.key_scope
        for t in design.tables.values()
        for e in t.encryptions
        if e.scheme == JOIN and e.onion
    }
    for a, b in joins:
        if a not in scopes or b not in scopes or _share_det(design, a, b):
            continue
        if not (policy.allows(*a, DET) and policy.allows(*b, DET)):
            continue
        for table, column in (a, b):
            enc = design.tables[table].onion_of(column, JOIN)
            peel = Peel(table, column, JOIN)
            if enc is not None and enc.outer is not None and peel not in found:
                found.append(peel)
        if scopes[a] == scopes[b]:
            continue
        members = {
            scope: [r for r, s in scopes.items() if s == scope] for scope in (scopes[a], scopes[b])
        }
        cost = {s: _moving_cost(design, refs) for s, refs in members.items()}
        moved, onto = (
            (members[scopes[b]], a)
            if cost[scopes[b]] <= cost[scopes[a]]
            else (members[scopes[a]], b)
        )
        target = scopes[onto]
        for ref in moved:
            found.append(Rekey(*ref, onto))
            scopes[ref] = target


def _moving_cost(design: PhysicalDesign, refs: list[tuple[str, str]]) -> tuple[int, int]:
    """What re-keying a join class costs: the rows of its built JOIN onions, which a re-key
    rewrites, then all its rows. An unbuilt onion (a class of its own) is written by its
    build anyway, under the key it moves onto (``_built_onto``): TPC-H Q8 joins the
    unbuilt l_partkey (600,000 rows) with p_partkey and ps_partkey (100,000, built by Q2),
    and re-keying those two onto lineitem's key took 11 of its first run's 24 s."""
    rows = [design.tables[t].row_count for t, _ in refs]
    built = [
        n
        for (t, c), n in zip(refs, rows, strict=True)
        if (enc := design.tables[t].onion_of(c, JOIN)) is not None and not unbuilt(enc)
    ]
    return sum(built), sum(rows)


def _share_det(design: PhysicalDesign, a: tuple[str, str], b: tuple[str, str]) -> bool:
    left, right = design.tables[a[0]].find(a[1], DET), design.tables[b[0]].find(b[1], DET)
    return left is not None and right is not None and left.key_scope == right.key_scope


def peeled_view(design: PhysicalDesign, adjustments: list[Adjustment]) -> PhysicalDesign:
    """A copy of ``design`` as it will be after ``adjustments`` (for ``veil explain``)."""
    view = PhysicalDesign.from_json(design.to_json())
    for adjustment in adjustments:
        _apply(view, adjustment)
    return view


def peel_layers(
    session: SessionContext, adjustments: list[Adjustment], reason: str
) -> list[dict[str, object]]:
    """Make the adjustments on the server, then record them in the design; returns log events.

    The peels of one table come off in one statement (PostgreSQL rewrites
    every row an UPDATE touches, whatever columns change: one rewrite, not
    one per layer), then the JOIN re-keys run in order. An unbuilt JOIN onion
    that a re-key then moves is built under the key it moves onto instead
    (``_built_onto``): what the peel and the re-key would leave, one rewrite of
    the table less.
    """
    events: list[dict[str, object]] = []
    rewritten: set[str] = set()  # server tables whose statistics are stale now
    onto = _built_onto(session.design, adjustments)
    points = JoinPoints()  # the JOIN onions built here share their values' points by key
    by_table: dict[str, list[Peel]] = {}
    for wanted in adjustments:
        if isinstance(wanted, Peel) and wanted.scheme == ASHE:
            events += _build_sums(session, wanted, reason)
        elif isinstance(wanted, Peel):
            by_table.setdefault(wanted.table, []).append(wanted)
    for name, peels in by_table.items():
        table = session.design.tables[name]
        pairs = [(p, table.onion_of(p.column, p.scheme)) for p in peels]
        wrapped = [
            (p, e) for p, e in pairs if e is not None and (e.outer is not None or unbuilt(e))
        ]
        if not wrapped:
            continue  # another session of this process peeled them meanwhile
        with peeling(session, table) as ours:
            if not ours:
                continue  # rebuilt meanwhile (a re-key's copy): its next query peels the copy
            events += _peel_table(session, table, wrapped, onto, points, reason, rewritten)
    for wanted in adjustments:
        if isinstance(wanted, Rekey):
            events += _rekey(session, wanted, reason, rewritten)
    for server_name in sorted(rewritten):
        session.backend.refresh_statistics(server_name)
    return events


def _peel_table(
    session: SessionContext,
    table: TableDesign,
    wrapped: list[tuple[Peel, Encryption]],
    onto: dict[str, tuple[Rekey, str]],
    points: JoinPoints,
    reason: str,
    rewritten: set[str],
) -> list[dict[str, object]]:
    """One table's peels on the server, then in the design (under its ``peeling`` mark)."""
    started = time.perf_counter()
    encs = [e for _, e in wrapped]
    with _indexes_set_aside(session, table, [e.name for e in encs]):
        stripped = _retry(partial(_peel_on_server, session, table, encs, onto, points))
    rewritten.update([table.server_name] if stripped else [])
    seconds = round(time.perf_counter() - started, 3)
    entries: list[tuple[Adjustment, dict[str, object]]] = []
    events: list[dict[str, object]] = []
    for peel, enc in wrapped:
        by = "this client" if enc.name in stripped else "another client (design repaired)"
        event = _event(peel.scheme, table, seconds, reason, by, len(wrapped))
        done: list[Adjustment] = [peel]
        if enc.name in stripped and enc.name in onto:
            done.append(onto[enc.name][0])
        entries += [(wanted, event) for wanted in done]
        events.append({**event, "table": peel.table, "column": peel.column})
    _record_all(session, entries)
    log.info("peeled %d layer(s) of %s in %.2f s", len(wrapped), table.name, seconds)
    return events


def _rekey(
    session: SessionContext, wanted: Rekey, reason: str, rewritten: set[str]
) -> list[dict[str, object]]:
    table = session.design.tables[wanted.table]
    enc = table.onion_of(wanted.column, JOIN)
    onto = session.design.tables[wanted.onto[0]].onion_of(wanted.onto[1], JOIN)
    if enc is None or onto is None or onto.key_scope == enc.key_scope:
        return []  # done meanwhile, by another session of this process
    started = time.perf_counter()
    with peeling(session, table) as ours:
        if not ours:
            return []  # rebuilt meanwhile: the copy's next join re-keys it
        with _indexes_set_aside(session, table, [enc.name]):
            done = _retry(partial(_rekey_on_server, session, table, enc, onto))
        if done:
            rewritten.add(table.server_name)
        by = "this client" if done else "another client (design repaired)"
        layer = f"JOIN with {'.'.join(wanted.onto)}"
        event = _event(layer, table, round(time.perf_counter() - started, 3), reason, by, 1)
        _record(session, [wanted], event)
    return [{**event, "table": wanted.table, "column": wanted.column}]


def _built_onto(
    design: PhysicalDesign, adjustments: list[Adjustment]
) -> dict[str, tuple[Rekey, str]]:
    """The unbuilt JOIN onions that ``adjustments`` build and then re-key, by server column:
    each one's first re-key and the key scope it moves onto, which its build uses instead.

    Only onto a column no re-key of the list moves (its key is the same when the re-key
    would run, and ``reconcile`` finds it by that key after a crash).
    """
    peeled = {(a.table, a.column) for a in adjustments if isinstance(a, Peel) and a.scheme == JOIN}
    rekeys = [a for a in adjustments if isinstance(a, Rekey)]
    moving = {(r.table, r.column) for r in rekeys}
    found: dict[str, tuple[Rekey, str]] = {}
    seen: set[tuple[str, str]] = set()
    for rekey in rekeys:
        ref = (rekey.table, rekey.column)
        if ref in seen:
            continue
        seen.add(ref)
        enc = design.tables[rekey.table].onion_of(rekey.column, JOIN)
        target = design.tables[rekey.onto[0]].onion_of(rekey.onto[1], JOIN)
        if (
            enc is not None
            and target is not None
            and unbuilt(enc)
            and ref in peeled
            and rekey.onto not in moving
        ):
            found[enc.name] = (rekey, target.key_scope)
    return found


def _event(
    layer: str, table: TableDesign, seconds: float, reason: str, by: str, columns: int
) -> dict[str, object]:
    """A peel log entry: ``seconds`` is its statement's, which took off ``columns`` layers."""
    return {
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "layer": layer,
        "rows": table.row_count,
        "columns": columns,
        "seconds": seconds,
        "query": reason,
        "by": by,
    }


def reconcile(session: SessionContext) -> list[Adjustment]:
    """Repair the design where the server has adjusted a layer the design has not recorded."""
    missed: list[Adjustment] = []
    for table in session.design.tables.values():
        onions = {e.name: e for e in table.encryptions if e.onion and e.scheme in TRACKED}
        sums = unbuilt_sums(table)
        if sums is not None:
            onions[ashe_layer(sums).name] = ashe_layer(sums)
        if not onions or not table.layers_table:
            continue
        states = run_remote(layer_states_statement(table), session.backend, FetchStats())
        for name, peeled, key in zip(
            *(states.column(i).to_pylist() for i in range(3)), strict=True
        ):
            if name.startswith(SET_ASIDE_INDEX):  # a peel that died left it dropped
                with contextlib.suppress(BackendError):  # a live peel's: it builds it itself
                    _rebuild_indexes(session, table, [(name[len(SET_ASIDE_INDEX) :], key)])
                continue
            enc = onions.get(name)
            if enc is None:
                continue
            if peeled and enc.scheme == ASHE:
                missed.append(Peel(table.name, sums.sources[0] if sums else "", ASHE))
            elif peeled and (enc.outer is not None or unbuilt(enc)):
                missed.append(Peel(table.name, enc.source, enc.scheme))
            if enc.scheme == JOIN and key and key != join_key_id(session.master, enc.key_scope):
                missed.append(Rekey(table.name, enc.source, _holder(session, key)))
    if missed:
        event = {"time": datetime.now(UTC).isoformat(timespec="seconds"), "query": None}
        _record(session, missed, {**event, "by": "an interrupted peel (design repaired)"})
    return missed


def _holder(session: SessionContext, key: str) -> tuple[str, str]:
    """A column whose JOIN onion is under the key with id ``key``."""
    for table in session.design.tables.values():
        for enc in table.encryptions:
            if enc.scheme == JOIN and join_key_id(session.master, enc.key_scope) == key:
                return table.name, enc.source
    raise BackendError(
        "a JOIN column on the server is under a key no column of the design has; the "
        "layers table is damaged: re-encrypt the table with `veil reencrypt`"
    )


def check_snapshot(session: SessionContext, before: PhysicalDesign, after: PhysicalDesign) -> None:
    """Inside a transaction reading one snapshot: fail (40001) if ``after`` records a peel,
    a sums build or a JOIN re-key that the snapshot does not hold (it began before)."""
    for name, table in after.tables.items():
        old = before.tables.get(name)
        if old is None or old.server_name != table.server_name or not table.layers_table:
            continue
        wanted = _adjusted(session.master, old, table)
        if not wanted:
            continue
        states = run_remote(layer_states_statement(table), session.backend, FetchStats())
        rows = zip(*(states.column(i).to_pylist() for i in range(3)), strict=True)
        behind = {
            n
            for n, peeled, key in rows
            if (n in wanted and not peeled) or wanted.get(n) not in (None, key)
        }
        if behind:
            raise SerializationError(
                f"another client peeled an onion layer of {name!r} after this transaction "
                "began, which reads the table as it was: roll the transaction back and run "
                "it again"
            )


def _adjusted(master: MasterKey, old: TableDesign, new: TableDesign) -> dict[str, str | None]:
    """The layers ``new`` records adjusted since ``old`` (same copy): layer name -> the key
    id the server's layers row must hold (None: any), its row peeled."""
    before = {e.name: e for e in old.encryptions}
    found: dict[str, str | None] = {}
    for enc in new.encryptions:
        was = before.get(enc.name)
        if was is None:
            continue
        if (was.outer is not None or unbuilt(was)) and not (enc.outer is not None or unbuilt(enc)):
            found[enc.name] = None
        if enc.scheme == JOIN and was.key_scope != enc.key_scope:
            found[enc.name] = join_key_id(master, enc.key_scope)
    if old.sums is not None and new.sums is not None and old.sums.lazy and not new.sums.lazy:
        found[ashe_layer(new.sums).name] = None
    return found


def join_key_id(master: MasterKey, scope: str) -> str:
    """An opaque name of a JOIN key, for the server's layers table (reveals nothing)."""
    return master.derive(KeyLabel("join-key-id-v1", scope), 8).hex()


def defer_layers(table: TableDesign) -> list[Encryption]:
    """Mark the wrapped JOIN-ADJ, OPE and DET onions and the SEARCH onions of ``table`` that
    the load need not build (``params["lazy"]``), and return them: those of a column with
    another built form of the same values (its DET onion, or for a DET onion a copy:
    ``_build_source``), from which their first peel builds them (``_build_on_server``).
    A SEARCH onion is never wrapped, but as unbuilt it reveals even less (NULLs); a
    load's layers table has a row for it (``layers_rows``)."""
    deferred = [
        e
        for e in table.encryptions
        if e.onion
        and (e.outer is not None or e.scheme == SEARCH)
        and e.scheme in DEFERRED
        and not e.is_expression
        and _build_source(table, e) is not None
    ]
    for enc in deferred:
        enc.params[LAZY] = True
    return deferred


def _build_source(table: TableDesign, enc: Encryption) -> Encryption | None:
    """The built column a first peel of ``enc`` decrypts its values from: the column's DET
    onion, or the copy it is fetched from instead, whose DET onion is deferred too
    (``veil.designer.onions``): a number's row-bound RND copy, text's sealed blocks (an
    RND copy in loads before them)."""
    forms = (DET, RND, BLOCKS)
    for form in (e for scheme in forms for e in table.encryptions_of(enc.source, scheme)):
        if form is not enc and not unbuilt(form) and not form.is_expression:
            return form
    return None


def unbuilt(enc: Encryption) -> bool:
    """Is ``enc`` a layer the load left unbuilt (NULL on the server until its first peel)?"""
    return bool(enc.params.get(LAZY))


def layers_rows(table: TableDesign, master: MasterKey) -> pa.Table:
    """The layers table at load: one row per onion layer, peeled where it is not wrapped
    (built, for a SEARCH onion)."""
    onions = [e for e in table.encryptions if e.onion and e.scheme in TRACKED]
    keys = [join_key_id(master, e.key_scope) if e.scheme == JOIN else None for e in onions]
    peeled = [e.outer is None and not unbuilt(e) for e in onions]
    sums = unbuilt_sums(table)
    if sums is not None:  # unbuilt ASHE words: a row of theirs, peeled once built
        onions, keys, peeled = [*onions, ashe_layer(sums)], [*keys, None], [*peeled, False]
    return pa.table(
        {
            LAYER_COLUMN: pa.array([e.name for e in onions], pa.string()),
            LAYER_PEELED: pa.array(peeled, pa.bool_()),
            LAYER_KEY: pa.array(keys, pa.string()),
        }
    )


@contextmanager
def _indexes_set_aside(
    session: SessionContext, table: TableDesign, columns: list[str]
) -> Iterator[None]:
    """Drop the indexes over ``columns`` that the server builds faster than it updates in
    place (``Backend.indexes_to_rebuild``: DuckDB's), and build them again after the ``with``
    block, whatever happened in it. Each dropped index has a row in the layers table until it
    is built again, so a client that dies meanwhile leaves it for ``reconcile``.
    """
    backend = session.backend
    indexes = backend.indexes_to_rebuild(table.server_name, columns)
    if not indexes:
        yield
        return

    def set_aside() -> None:
        with backend.transaction():
            for name, create in indexes:
                run_remote(set_aside_index_statement(table, name, create), backend, FetchStats())
                backend.execute(f"DROP INDEX {quote(name)}")

    _retry(set_aside)
    try:
        yield
    finally:
        _retry(partial(_rebuild_indexes, session, table, indexes))


def _rebuild_indexes(
    session: SessionContext, table: TableDesign, indexes: list[tuple[str, str]]
) -> None:
    backend = session.backend
    with backend.transaction():
        for name, create in indexes:
            backend.execute(create)  # IF NOT EXISTS: another client may have built it first
            run_remote(index_rebuilt_statement(table, name), backend, FetchStats())


def lock_layers(
    session: SessionContext, table: TableDesign, enc: Encryption | None = None
) -> pa.Table:
    """Lock the layers row of ``enc`` (every row: None) until the transaction ends, and
    return the rows (column, peeled, key). Every peel and re-key of a column, and every
    write to its table, takes it first: a write and a peel then never interleave (the
    later waits or, on DuckDB, fails with a write conflict and runs again)."""
    flip, flip_back = lock_layer_statements(table, enc)
    run_remote(flip, session.backend, FetchStats())
    return run_remote(flip_back, session.backend, FetchStats())


def _locked_state(
    session: SessionContext, table: TableDesign, enc: Encryption
) -> tuple[bool, str | None]:
    state = lock_layers(session, table, enc)
    if state.num_rows != 1:
        raise BackendError(
            f"the onion layers of table {table.name!r} are missing or damaged on the server "
            f"({state.num_rows} rows for one column); reload the table with `veil load`"
        )
    return bool(state.column(1)[0].as_py()), state.column(2)[0].as_py()


def _peel_on_server(
    session: SessionContext,
    table: TableDesign,
    encs: list[Encryption],
    onto: dict[str, tuple[Rekey, str]],
    points: JoinPoints,
) -> set[str]:
    """One transaction: the layers come off, but for those the server says are off already.

    ``onto``: the unbuilt JOIN onions to build under another column's key (``_built_onto``).
    Returns the server columns this call peeled.
    """
    backend = session.backend
    with backend.transaction():
        wrapped = [e for e in encs if not _locked_state(session, table, e)[0]]
        if not wrapped:
            return set()
        built = [e for e in wrapped if unbuilt(e)]
        if built:
            scopes = {e.name: onto[e.name][1] for e in built if e.name in onto}
            _build_on_server(session, table, built, scopes, points)
        layers = [
            (e, layer_form(e), layer_key(session.master, e, rnd_context(table, e)))
            for e in wrapped
            if not unbuilt(e)
        ]
        if layers:
            _rewrite(
                session,
                table,
                partial(peel_statement, table, layers),
                partial(peeled_rows_statement, table, layers),
            )
        for enc in wrapped:
            run_remote(mark_peeled_statement(table, enc), backend, FetchStats())
    return {e.name for e in wrapped}


def _build_on_server(
    session: SessionContext,
    table: TableDesign,
    encs: list[Encryption],
    scopes: dict[str, str] | None = None,
    points: JoinPoints | None = None,
) -> None:
    """Build the unbuilt layers ``encs`` (``defer_layers``), peeled, in every row of ``table``,
    inside the caller's transaction (which holds their layers rows' locks). ``scopes``: a
    JOIN onion to build under another column's key, by server column (``_built_onto``;
    its layers row then names that key, as a re-key would have left it).

    The values come from each column's DET onion (or copy, ``_build_source``):
    fetched with the row ids (ciphertexts only), decrypted and encrypted under the
    layer's scheme on the client; the server gets the layer's ciphertexts, as an XOR
    peel would have left them.
    """
    backend, master = session.backend, session.master
    onions = {e.source: _build_source(table, e) for e in encs}
    ids, values = _fetched_values(session, table, [d for d in onions.values() if d is not None])
    written: dict[str, pa.Array] = {OLD_KEY: ids}
    for enc in encs:
        form = onions[enc.source]
        assert form is not None  # defer_layers defers only columns with a built form
        encoded = values[form.name]
        peeled = {k: v for k, v in enc.params.items() if k not in ("outer", LAZY)}
        scope = (scopes or {}).get(enc.name, enc.key_scope)
        bare = dataclasses.replace(enc, params=peeled, key_scope=scope)
        cipher = column_cipher(master, bare)
        written[enc.name] = (
            points.encrypt(cipher, scope, encoded)
            if points is not None and isinstance(cipher, JoinCipher)
            else cipher.encrypt(encoded)
        )
        if scope != enc.key_scope:
            key = join_key_id(master, scope)
            run_remote(mark_rekeyed_statement(table, enc, key), backend, FetchStats())
    _write_built(session, table, pa.table(written))


def _fetched_values(
    session: SessionContext, table: TableDesign, forms: list[Encryption]
) -> tuple[pa.Array, dict[str, pa.Array]]:
    """Every row's id and its encoded value of each of ``forms`` (built server columns or
    sealed blocks), by server column: fetched as ciphertexts, decrypted on the client."""
    backend = session.backend
    by_name = {d.name: d for d in forms}
    fetched = [table.row_id, *(n for n, d in by_name.items() if d.scheme != BLOCKS)]
    stored = backend.execute(
        f"SELECT {', '.join(quote(c) for c in fetched)} FROM {quote(table.server_name)}"
    )
    ids = _plain_column(stored.column(0))
    rows = ids.to_numpy(zero_copy_only=False).astype(np.int64)
    sealed = [d for d in by_name.values() if d.scheme == BLOCKS]
    values = (
        BlockReader(backend, FetchStats()).read(table, sealed, rows, session.ciphers)
        if sealed
        else {}
    )
    for name, form in by_name.items():
        if form.scheme != BLOCKS:
            column = stored.column(fetched.index(name))
            values[name] = _opened(session.master, table, form, rows, column)
    return ids, values


def _build_sums(session: SessionContext, wanted: Peel, reason: str) -> list[dict[str, object]]:
    """Build the unbuilt ASHE words of ``wanted.table`` (``veil.session.ashe_build``) in
    every row, unless the server says another client has; record it; the log event."""
    table = session.design.tables[wanted.table]
    sums = unbuilt_sums(table)
    if sums is None:
        return []  # built meanwhile, by another session of this process
    started = time.perf_counter()
    built = _retry(partial(_sums_on_server, session, table, sums))
    by = "this client" if built else "another client (design repaired)"
    event = _event(ASHE, table, round(time.perf_counter() - started, 3), reason, by, 1)
    _record(session, [wanted], event)
    if built:
        session.backend.refresh_statistics(table.server_name)
    log.info("built the ASHE sums of %s in %.2f s", table.name, event["seconds"])
    return [{**event, "table": wanted.table, "column": wanted.column}]


def _sums_on_server(session: SessionContext, table: TableDesign, sums: AsheSums) -> bool:
    """One transaction: the words of every row, unless the layers table says built."""
    layer = ashe_layer(sums)
    with session.backend.transaction():
        if _locked_state(session, table, layer)[0]:
            return False
        forms = {s: table.fetchable(s) for s in sums.sources}
        ids, values = _fetched_values(session, table, list(forms.values()))
        plain = {s: (values[f.name], f.sql_type) for s, f in forms.items()}
        words = ashe_words(session.master, sums, plain, ids)
        _write_built(session, table, pa.table({OLD_KEY: ids, **words}))
        run_remote(mark_peeled_statement(table, layer), session.backend, FetchStats())
    return True


class JoinPoints:
    """The JOIN-ADJ ciphertexts (points) of the values one ``peel_layers`` has built, by key.

    A join's two onions, built in one peel under one key (``_built_onto``), hold
    the same values' points: TPC-H Q3's o_orderkey and l_orderkey, 150,000 values
    each at SF 0.1, a point multiplication (~40 us) per value. The second build
    takes the first's points for the values they share instead of computing
    them again. Client memory only; the ciphertexts are the same either way.
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[pa.Array, pa.Array]] = {}  # scope: (values, points)

    def encrypt(self, cipher: JoinCipher, scope: str, encoded: pa.Array) -> pa.Array:
        """``cipher.encrypt(encoded)``, its distinct values' points reused where known."""
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks()
        indexed = pc.dictionary_encode(encoded)
        distinct = indexed.dictionary
        values, points = self._known.get(scope, (distinct[:0], pa.array([], pa.binary())))
        if values.type != distinct.type:  # not the same encoding: nothing to share
            values, points = distinct[:0], pa.array([], pa.binary())
        fresh = distinct.filter(pc.is_null(pc.index_in(distinct, value_set=values)))
        if len(fresh):
            values = pa.concat_arrays([values, fresh])
            points = pa.concat_arrays([points, cipher.encrypt(fresh).cast(pa.binary())])
            self._known[scope] = (values, points)
        return points.take(pc.index_in(distinct, value_set=values)).take(indexed.indices)


def _opened(
    master: MasterKey,
    table: TableDesign,
    form: Encryption,
    rows: np.ndarray,
    column: pa.ChunkedArray,
) -> pa.Array:
    """The encoded values of a fetched DET onion or RND copy (``_build_source``)."""
    values = _plain_column(column)
    cipher = column_cipher(master, form, rnd_context(table, form))
    if isinstance(cipher, RowBoundCipher):
        return cipher.decrypt_rows(rows, values)
    return cipher.decrypt(values)


def _write_built(session: SessionContext, table: TableDesign, built: pa.Table) -> None:
    """Set the columns of ``built`` in the rows of ``table`` whose ids are its ``OLD_KEY``.

    Where the server rewrites a table faster by copying it and takes a table made in
    the transaction (PostgreSQL: an UPDATE of every row writes each again with its
    index entries and leaves the old ones to VACUUM), the values go to a staging table
    joined into the copy ``replace_rows`` swaps in; elsewhere one ``update_rows``.
    """
    backend = session.backend
    if not (backend.rewrites_by_copy and backend.updates_in_place):
        backend.update_rows(table.server_name, table.row_id, built)
        return
    staging = opaque_name("t")
    backend.bulk_load(staging, built)
    names = set(built.column_names) - {OLD_KEY}
    picked = ", ".join(
        f"s.{quote(c)} AS {quote(c)}" if c in names else f"t.{quote(c)}"
        for c in backend.column_names(table.server_name)
    )
    backend.replace_rows(
        table.server_name,
        f"SELECT {picked} FROM {quote(table.server_name)} AS t LEFT JOIN {quote(staging)} AS s "
        f"ON t.{quote(table.row_id)} = s.{quote(OLD_KEY)}",
    )
    backend.drop_table(staging)


def _plain_column(column: pa.ChunkedArray) -> pa.Array:
    """One Arrow array of a fetched column; DuckDB's binary views as plain binaries."""
    array = column.combine_chunks()
    return array.cast(pa.binary()) if pa.types.is_binary_view(array.type) else array


def _rekey_on_server(
    session: SessionContext, table: TableDesign, enc: Encryption, onto: Encryption
) -> bool:
    """One transaction: re-key ``enc`` onto ``onto``'s key unless the server says it is."""
    backend, master = session.backend, session.master
    target = join_key_id(master, onto.key_scope)
    with backend.transaction():
        peeled, key = _locked_state(session, table, enc)
        if key == target:
            return False
        if not peeled or key != join_key_id(master, enc.key_scope):
            raise BackendError(
                f"the JOIN onion of {table.name}.{enc.source} is not in the state the design "
                "says on the server; re-encrypt the table with `veil reencrypt`"
            )
        token = _join_cipher(session, enc).token_to(_join_cipher(session, onto))
        _rewrite(
            session,
            table,
            partial(rekey_statement, table, enc, token),
            partial(rekeyed_rows_statement, table, enc, token),
        )
        run_remote(mark_rekeyed_statement(table, enc, target), backend, FetchStats())
    return True


def _rewrite(
    session: SessionContext,
    table: TableDesign,
    update: Callable[[], exp.Update],
    copy: Callable[[list[str]], exp.Select],
) -> None:
    """Change every row of ``table`` in the current transaction: by ``update()``, or where
    the server rewrites a table faster by copying it (``Backend.rewrites_by_copy``), by
    swapping in the rows of ``copy(columns)``."""
    backend = session.backend
    if backend.rewrites_by_copy:
        rows = copy(backend.column_names(table.server_name))
        backend.replace_rows(table.server_name, *render(rows, backend))
    else:
        run_remote(update(), backend, FetchStats())


def _join_cipher(session: SessionContext, enc: Encryption) -> JoinCipher:
    cipher = column_cipher(session.master, dataclasses.replace(enc, params={}))
    assert isinstance(cipher, JoinCipher)
    return cipher


def _record(
    session: SessionContext, adjustments: list[Adjustment], event: dict[str, object]
) -> None:
    """Apply the adjustments to the design on disk (under the directory's lock), then log."""
    _record_all(session, [(wanted, event) for wanted in adjustments])


def _record_all(
    session: SessionContext, entries: list[tuple[Adjustment, dict[str, object]]]
) -> None:
    """``_record`` of several adjustments, each with its log event, in one save of the design.

    One save for all the layers one statement took off a table: a save per layer made
    the session read the design again in between, whose ``reconcile`` found the layers
    not recorded yet and logged them as an interrupted peel's (and each save wrote the
    whole design: 15 saves, 4.8 s of TPC-H Q3's first run under load average ~10).
    """
    client = session.client
    # the copies of the tables the adjustments were made on: a rebuild or a re-key that
    # swapped a new copy in meanwhile (still wrapped, or unbuilt) must not get them
    made_on = {w.table: session.design.tables.get(w.table) for w, _ in entries}
    with client.design_lock():
        # the design now, read with its own keys: a re-key's final switch may have made
        # the new key its base since this session read it (layers are the same either way)
        _, design = client.following(session.master)
        for wanted, _ in entries:
            current, made = design.tables.get(wanted.table), made_on[wanted.table]
            if current is not None and made is not None and current.server_name == made.server_name:
                _apply(design, wanted)
        for table in made_on.values():
            if table is not None and table.name in session.peeling:
                unmark(design, table)  # its layers recorded: readers may plan on them now
        design.save(client.design_path)
        for wanted, event in entries:
            layer = (
                wanted.scheme if isinstance(wanted, Peel) else f"JOIN with {'.'.join(wanted.onto)}"
            )
            # the adjustment's own layer: a re-key its build made names its join
            client.log_peel(
                {**event, "layer": layer, "table": wanted.table, "column": wanted.column}
            )
    session.reload_design()


def _apply(design: PhysicalDesign, wanted: Adjustment) -> None:
    table = design.tables.get(wanted.table)
    if table is None:
        return
    if isinstance(wanted, Peel) and wanted.scheme == ASHE:
        if table.sums is not None:
            table.sums.lazy = False
        return
    if isinstance(wanted, Peel):
        enc = table.onion_of(wanted.column, wanted.scheme)
        if enc is not None:
            enc.params.pop("outer", None)
            enc.params.pop(LAZY, None)  # a peel of an unbuilt layer builds it
        return
    enc = table.onion_of(wanted.column, JOIN)
    onto_table = design.tables.get(wanted.onto[0])
    onto = onto_table.onion_of(wanted.onto[1], JOIN) if onto_table is not None else None
    if enc is not None and onto is not None:
        enc.key_scope = onto.key_scope


def _retry(work: Callable[[], T]) -> T:
    for attempt in range(_ATTEMPTS):
        try:
            return work()
        except BackendError as exc:
            if _CONFLICT not in str(exc) or attempt == _ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0, 0.005 * (attempt + 1)))
    raise AssertionError("unreachable")
