"""What the server can learn now, column by column (SEEED Figure 7): ``veil leakage``'s data.

For each plaintext column: the layers the server holds (a wrapped onion
reveals nothing; a peeled DET reveals equality; OPE order; SEARCH a searched
word's matches; a DET key shared with other columns their join class), its
policy, and which queries peeled what and when (``peels.jsonl``). The totals
class each column by the most it reveals: RND (nothing), DET (equality), OPE
(order); HOM counts the columns the server can also sum blind (additive
onion or workload sums), which reveals nothing more.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from sqlglot import exp

from veil.design.model import (
    BLOCKS,
    DET,
    HOM,
    JOIN,
    OPE,
    RND,
    PhysicalDesign,
    TableDesign,
)
from veil.design.policy import Policy
from veil.session.onions import REVEALS, Peel, wanted_peels
from veil.session.session import Session
from veil.sql.parse import parse_statement

CLASSES = (RND, DET, OPE)


@dataclass
class ColumnLeakage:
    table: str
    column: str
    policy: str
    layers: list[str]  # what the server holds, e.g. "DET", "OPE under RND", "SEARCH"
    reveals: str  # RND / DET / OPE: the most it reveals now
    summed: bool  # the server can add it blind (ASHE or Paillier)
    join_class: list[str] = field(default_factory=list)  # other columns sharing its DET key
    peels: list[dict[str, object]] = field(default_factory=list)


@dataclass
class Leakage:
    columns: list[ColumnLeakage]

    def totals(self) -> dict[str, float]:
        """Percent of columns revealing at most RND / DET / OPE, and percent summable (HOM)."""
        count = max(len(self.columns), 1)
        shares = {c: 100 * sum(x.reveals == c for x in self.columns) / count for c in CLASSES}
        return {**shares, HOM: 100 * sum(x.summed for x in self.columns) / count}

    def to_json(self) -> str:
        document = {"columns": [asdict(c) for c in self.columns], "totals": self.totals()}
        return json.dumps(document, indent=1)


def leakage(session: Session) -> Leakage:
    design, policy = session.design, session.client.policy()
    log = session.client.peel_log()
    scopes = _det_scopes(design)
    found = []
    for table in design.tables.values():
        summed = set(table.sums.sources if table.sums else [])
        summed |= set(table.hom.sources if table.hom else [])
        for column in table.columns:
            layers, reveals = _layers(table, column.name)
            keyed = [table.find(column.name, s) for s in (DET, JOIN)]
            scope = set().union(*(scopes.get(e.key_scope, set()) for e in keyed if e is not None))
            mates = sorted(scope - {f"{table.name}.{column.name}"})
            found.append(
                ColumnLeakage(
                    table=table.name,
                    column=column.name,
                    policy=policy.layer(table.name, column.name),
                    layers=layers,
                    reveals=reveals,
                    summed=column.name in summed,
                    join_class=mates,
                    peels=[
                        e
                        for e in log
                        if e.get("table") == table.name and e.get("column") == column.name
                    ],
                )
            )
    return Leakage(found)


def what_if(session: Session, sql: str) -> list[str]:
    """What running ``sql`` would reveal beyond what the server knows now, in words."""
    tree = parse_statement(sql)
    if not isinstance(tree, exp.Query):
        return ["only queries peel layers: this statement reveals nothing new"]
    session.describe(tree)  # a clear error for unknown names
    policy = session.client.policy()
    allowed = wanted_peels(session.design, policy, tree)
    blocked = [
        p for p in wanted_peels(session.design, Policy(default="PLAIN"), tree) if p not in allowed
    ]
    lines = [f"peels {p}" if isinstance(p, Peel) else str(p) for p in allowed]
    lines += [
        f"{p.table}.{p.column}: policy forbids "
        f"{p.scheme if isinstance(p, Peel) else 'its join'}; that part runs on the client"
        for p in blocked
    ]
    return lines or ["nothing new: the server already holds every layer this query uses"]


def _layers(table: TableDesign, column: str) -> tuple[list[str], str]:
    # SWP (SEARCH) reveals nothing until a word is searched, then that word's matches
    held, reveals = [], RND
    for enc in table.encryptions_of(column):
        if enc.scheme == BLOCKS:
            held.append("RND (blocks)")
            continue
        held.append(f"{enc.scheme} under RND" if enc.outer else enc.scheme)
        if enc.outer is None and enc.scheme == OPE:
            reveals = OPE
        elif enc.outer is None and enc.scheme in (DET, JOIN) and reveals == RND:
            reveals = DET
    return held, reveals


def _det_scopes(design: PhysicalDesign) -> dict[str, set[str]]:
    """DET key scope -> the columns under it (a join class)."""
    scopes: dict[str, set[str]] = {}
    for table in design.tables.values():
        for enc in table.encryptions:
            if enc.scheme in (DET, JOIN) and enc.outer is None and not enc.is_expression:
                scopes.setdefault(enc.key_scope, set()).add(f"{table.name}.{enc.source}")
    return scopes


def words(reveals: str) -> str:
    return REVEALS.get(reveals, "nothing but lengths and NULLs")
