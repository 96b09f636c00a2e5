"""Peeling onions at run time: a layer comes off when a query first needs what is beneath.

A column loaded adaptively (``veil.designer.onions``) is stored as DET and OPE
ciphertexts wrapped in row-bound RND (``Encryption.outer``): the server can
compare nothing. Before a query is planned, ``wanted_peels`` asks the
workload analysis which server operations it would use (equality, grouping,
joins: DET; ranges, ORDER BY, MIN/MAX: OPE) and keeps the wrapped layers the
column's policy allows to come off. ``peel`` then, per layer:

1. in one server transaction: locks the column's row of the table's layers
   table (``lock_layer_statement``), and unless it already says peeled, sends
   the layer key and lets the server XOR the column with its keystream
   (``veil_layer_xor_*``) and marks the row peeled;
2. after the commit, under the client directory's lock, drops the layer
   from the design (read fresh from disk), saves it and logs the peel.

A crash between 1 and 2 leaves the server peeled and the design wrapped;
``reconcile`` (run whenever a session reads the design) repairs the design
from the layers table. Peeling is idempotent: a layer already off is not
XORed again (the XOR is its own inverse), whichever client got there first.
The layer key reveals that one layer of that one column, nothing else.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlglot import exp

from veil.backends.base import BackendError
from veil.design.model import DET, OPE, RND, Encryption, PhysicalDesign, TableDesign
from veil.design.policy import Policy, PolicyError, checked_layer, rank
from veil.designer.workload import analyse_tree
from veil.exec.ciphers import layer_form, layer_key
from veil.exec.clientdir import open_client_dir
from veil.exec.encrypt import rnd_context
from veil.exec.fetch import FetchStats, run_remote
from veil.sql.remote import (
    layer_states_statement,
    lock_layer_statement,
    mark_peeled_statement,
    peel_statement,
)

if TYPE_CHECKING:
    from veil.exec.session import Session

log = logging.getLogger(__name__)

# what each layer lets the server learn, once peeled (``veil leakage``, ``veil explain``)
REVEALS = {DET: "which rows hold equal values", OPE: "the order of values"}
_CONFLICT = "onflict"  # DuckDB: another transaction wrote the layers row first
_ATTEMPTS = 100


@dataclass(frozen=True)
class Peel:
    """Take the RND layer off ``table.column``'s onion of ``scheme`` (DET or OPE)."""

    table: str
    column: str
    scheme: str

    def __str__(self) -> str:
        return f"{self.table}.{self.column} to {self.scheme} ({REVEALS[self.scheme]})"


def has_wrapped(design: PhysicalDesign) -> bool:
    return any(e.outer for t in design.tables.values() for e in t.encryptions)


def wanted_peels(design: PhysicalDesign, policy: Policy, tree: exp.Expr) -> list[Peel]:
    """The wrapped layers ``tree`` would compute on, that ``policy`` lets come off."""
    needs = analyse_tree(tree, design.plaintext_schema())
    asked = [(ref, DET) for ref in sorted(needs.det)] + [(ref, OPE) for ref in sorted(needs.ope)]
    found: list[Peel] = []
    for (table, column), scheme in asked:
        enc = design.tables[table].onion_of(column, scheme)
        if enc is not None and enc.outer is not None and policy.allows(table, column, scheme):
            found.append(Peel(table, column, scheme))
    return found


def peeled_view(design: PhysicalDesign, peels: list[Peel]) -> PhysicalDesign:
    """A copy of ``design`` as it will be after ``peels`` (for ``veil explain``)."""
    view = PhysicalDesign.from_json(design.to_json())
    for peel in peels:
        _strip(view, peel)
    return view


def peel_layers(session: Session, peels: list[Peel], reason: str) -> list[dict[str, object]]:
    """Peel each layer on the server, then record it in the design; returns the log events."""
    events = []
    for wanted in peels:
        table = session.design.tables[wanted.table]
        enc = table.onion_of(wanted.column, wanted.scheme)
        if enc is None or enc.outer is None:
            continue  # another session of this process peeled it meanwhile
        started = time.perf_counter()
        stripped = _retry(lambda t=table, e=enc: _peel_on_server(session, t, e))  # type: ignore[misc]
        event: dict[str, object] = {
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
            "table": wanted.table,
            "column": wanted.column,
            "layer": wanted.scheme,
            "rows": table.row_count,
            "seconds": round(time.perf_counter() - started, 3),
            "query": reason,
            "by": "this client" if stripped else "another client (design repaired)",
        }
        _record(session, [wanted], event)
        events.append(event)
        log.info("peeled %s in %.2f s", wanted, event["seconds"])
    return events


def reconcile(session: Session) -> list[Peel]:
    """Repair the design where the server has peeled a layer the design still wraps."""
    missed: list[Peel] = []
    for table in session.design.tables.values():
        wrapped = {e.name: e for e in table.encryptions if e.outer is not None}
        if not wrapped or not table.layers_table:
            continue
        states = run_remote(layer_states_statement(table), session.backend, FetchStats())
        for name, peeled in zip(*(states.column(i).to_pylist() for i in (0, 1)), strict=True):
            if peeled and name in wrapped:
                missed.append(Peel(table.name, wrapped[name].source, wrapped[name].scheme))
    if missed:
        event = {"time": datetime.now(UTC).isoformat(timespec="seconds"), "query": None}
        _record(session, missed, {**event, "by": "an interrupted peel (design repaired)"})
    return missed


def _peel_on_server(session: Session, table: TableDesign, enc: Encryption) -> bool:
    """One transaction: the layer comes off unless the server says it is off already."""
    backend = session.backend
    context = rnd_context(table, enc)
    with backend.transaction():
        state = run_remote(lock_layer_statement(table, enc), backend, FetchStats())
        if state.num_rows != 1:
            raise BackendError(
                f"the onion layers of table {table.name!r} are missing or damaged on the server "
                f"({state.num_rows} rows for one column); reload the table with `veil load`"
            )
        if state.column(1)[0].as_py():
            return False
        key = layer_key(session.master, enc, context)
        run_remote(peel_statement(table, enc, layer_form(enc), key), backend, FetchStats())
        run_remote(mark_peeled_statement(table, enc), backend, FetchStats())
    return True


def _record(session: Session, peels: list[Peel], event: dict[str, object]) -> None:
    """Drop the layers from the design on disk (under the directory's lock), then log."""
    client = session.client
    with client.design_lock():
        design = client.design(session.master)
        for wanted in peels:
            _strip(design, wanted)
        design.save(client.design_path)
        for wanted in peels:
            client.log_peel(
                {**event, "table": wanted.table, "column": wanted.column, "layer": wanted.scheme}
            )
    session.reload_design()


def _strip(design: PhysicalDesign, wanted: Peel) -> None:
    table = design.tables.get(wanted.table)
    enc = table.onion_of(wanted.column, wanted.scheme) if table is not None else None
    if enc is not None:
        enc.params.pop("outer", None)


def _retry(work: Callable[[], bool]) -> bool:
    for attempt in range(_ATTEMPTS):
        try:
            return work()
        except BackendError as exc:
            if _CONFLICT not in str(exc) or attempt == _ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0, 0.005 * (attempt + 1)))
    raise AssertionError("unreachable")


def manual_peel(session: Session, table: str, column: str, scheme: str) -> dict[str, object] | None:
    """``veil peel``: take ``table.column``'s layer off ahead of time; None if already off."""
    found = session.design.table(table)
    if found.column(column) is None:
        raise PolicyError(
            f"table {table} has no column {column!r}; its columns: "
            f"{', '.join(c.name for c in found.columns)}"
        )
    enc = found.onion_of(column, scheme)
    if enc is None:
        held = ", ".join(e.scheme for e in found.encryptions_of(column)) or "nothing"
        raise PolicyError(
            f"{table}.{column} has no {scheme} onion (it holds {held}): it was loaded with a "
            "workload, or its policy kept that onion out; `veil reencrypt` rebuilds it as onions"
        )
    if enc.outer is None:
        return None
    policy = session.client.policy()
    if not policy.allows(table, column, scheme):
        raise PolicyError(
            f"the policy of {table}.{column} is {policy.layer(table, column)}: its {scheme} "
            f"layer ({REVEALS[scheme]}) may not come off"
        )
    events = peel_layers(
        session, [Peel(table, column, scheme)], f"veil peel {table}.{column} {scheme}"
    )
    return events[0] if events else None


def set_policy(
    client_dir: str,
    layers: dict[tuple[str, str], str],
    *,
    allow_plaintext: bool = False,
    reencrypt: bool = False,
) -> list[str]:
    """Set columns' policies; returns the tables whose data must be re-encrypted for them.

    A policy below what a column's data already reveals on the server is
    refused, unless ``reencrypt``: then it is saved, and the caller
    re-encrypts the returned tables (``veil.load.ddl.reencrypt``).
    """
    client = open_client_dir(client_dir)
    design = client.design(client.master_key())
    stale: list[str] = []
    with client.design_lock():
        policy = client.policy()
        for (table, column), layer in layers.items():
            found = design.table(table)
            if found.column(column) is None:
                raise PolicyError(
                    f"unknown column {table}.{column} in the policy; {table}'s columns: "
                    f"{', '.join(c.name for c in found.columns)}"
                )
            checked = checked_layer(layer, allow_plaintext)
            revealed = revealed_layer(found, column)
            if rank(revealed) > rank(checked) and not reencrypt:
                raise PolicyError(
                    f"{table}.{column} already reveals {REVEALS[revealed]} ({revealed}) on the "
                    f"server, more than {checked} allows: its data must be re-encrypted. Run "
                    f"`veil policy set {client_dir} {table}.{column} {checked} --reencrypt` "
                    f"(sets the policy, then `veil reencrypt {client_dir} {table}` re-encrypts "
                    "the table under fresh keys within it)"
                )
            if rank(revealed) > rank(checked) and found.name not in stale:
                stale.append(found.name)
            policy.set(table, column, checked, allow_plaintext=allow_plaintext)
        policy.save(client.policy_path)
    return stale


def revealed_layer(table: TableDesign, column: str) -> str:
    """The most the server's current layers of ``column`` reveal: RND, DET or OPE."""
    exposed = {e.scheme for e in table.encryptions_of(column) if e.outer is None}
    if OPE in exposed:
        return OPE
    return DET if DET in exposed else RND
