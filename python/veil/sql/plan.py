"""The split plan: RemoteSQL fragments for the server and a local plan for the client.

A ``Scan`` is one reference to a base table in the query. The server answers
it with one RemoteSQL statement over opaque names (the columns the query needs,
filtered by every predicate the server can evaluate exactly), the client
decrypts the result into a local table, and the local plan (the rest of the
query, rewritten to read those local tables) runs in an in-process DuckDB.

Every predicate pushed to the server is also kept in the local plan: the
server's filter is exact, so re-checking it costs a little client time and
keeps correctness independent of the push-down rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from veil.design.model import Encryption, TableDesign

ROW_ID = "__veil_row_id"  # the local name of a scan's row-id column (DML only)


@dataclass
class ServerPredicate:
    """A predicate the server evaluates, with what it reveals."""

    original: str  # the client-side predicate (plaintext, never sent)
    server: exp.Expr  # over opaque names, constants as placeholders
    schemes: list[str]


@dataclass
class Scan:
    table: TableDesign
    alias: str
    local_name: str
    columns: set[str] = field(default_factory=set)
    node: exp.Table | None = None  # the reference in the local plan
    predicates: list[ServerPredicate] = field(default_factory=list)
    params: list[object] = field(default_factory=list)
    with_row_id: bool = False  # DML fetches the row ids of the rows it changes

    def placeholder(self, value: object) -> exp.Placeholder:
        """A query parameter carrying ``value`` (always a ciphertext)."""
        self.params.append(value)
        return exp.Placeholder(this=str(len(self.params)))

    def fetched(self) -> list[tuple[str, Encryption | None]]:
        """``(plaintext column, server column)`` pairs to fetch; the row id when none."""
        wanted: list[tuple[str, Encryption | None]]
        wanted = [(c, self.table.fetchable(c)) for c in sorted(self.columns)]
        if self.with_row_id or not wanted:
            wanted.append((ROW_ID, None))
        return wanted

    def remote_sql(self) -> exp.Select:
        names = [enc.name if enc else self.table.row_id for _, enc in self.fetched()]
        select = exp.select(*[exp.column(n) for n in names]).from_(self.table.server_name)
        for predicate in self.predicates:
            select = select.where(predicate.server.copy(), copy=False)
        return select


@dataclass
class SplitPlan:
    scans: list[Scan]
    local: exp.Expr  # runs on the client over the scans' local tables
    pushdown: bool  # False when the query could not be qualified (fetch-and-run locally)
