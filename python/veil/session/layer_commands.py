"""The commands around onion layers: ``veil peel`` ahead of time, and ``veil policy set``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from veil.design.model import DET, JOIN, OPE, RND, TableDesign
from veil.design.policy import PolicyError, checked_layer, rank
from veil.session.clientdir import open_client_dir
from veil.session.onions import REVEALS, Peel, peel_layers

if TYPE_CHECKING:
    from veil.session.session import Session


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
    return DET if exposed & {DET, JOIN} else RND
