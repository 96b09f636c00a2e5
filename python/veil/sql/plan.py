"""The split plan: RemoteSQL fragments for the server and a local plan for the client.

A ``Scan`` is one reference to a base table in the query. The server answers
it with one RemoteSQL statement over opaque names (the columns the query needs,
filtered by every predicate the server can evaluate exactly), the client
decrypts the result into a local table, and the local plan (the rest of the
query, rewritten to read those local tables) runs in an in-process DuckDB.

A predicate the server evaluates exactly leaves the local plan
(``drop_pushed``), so the columns only it reads are not fetched; pre-filters
(LIKE through SEARCH) stay, and the client finishes them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlglot import exp

from veil.design.model import Encryption, TableDesign

if TYPE_CHECKING:
    from veil.sql.fallbacks import Fallback

ROW_ID = "__veil_row_id"  # the local name of a scan's row-id column (DML only)
RND_ROW_ID = "__veil_rnd_row_id"  # the row ids fetched to decrypt RND columns (then dropped)
HOM_MASK = "__veil_hom_mask"  # which row positions of its packs a HOM product sums
HOM_PRODUCT = "__veil_hom_product"  # the product of a (group, mask)'s packs
ASHE_BLOCK = "__veil_ashe_block"  # a block of 64 row ids an ASHE sum covers
ASHE_MASK = "__veil_ashe_mask"  # which ids of the block it summed
ASHE_WORD = "__veil_ashe_word"  # stands for the word column in ``Aggregation.word_sum``


@dataclass
class ServerPredicate:
    """A predicate the server evaluates, with what it reveals."""

    original: str  # the client-side predicate (plaintext, never sent)
    server: exp.Expr  # over opaque names, constants as placeholders
    schemes: list[str]
    node: exp.Expr | None = None  # the conjunct in the local plan
    exact: bool = True  # False for pre-filters (LIKE via SEARCH) the client must finish


@dataclass
class Scan:
    table: TableDesign
    alias: str
    local_name: str
    columns: set[str] = field(default_factory=set)
    node: exp.Table | None = None  # the reference in the local plan
    predicates: list[ServerPredicate] = field(default_factory=list)
    with_row_id: bool = False  # DML fetches the row ids of the rows it changes
    reduction: Reduction | None = None  # semi-join with other scans on the server
    aggregation: Aggregation | None = None  # GROUP BY and aggregates run on the server
    joined: JoinedFetch | None = None  # fetched as part of one server-side join
    residuals: list[exp.Expr] = field(default_factory=list)  # its filters the client runs
    binds: list[BindFilter] = field(default_factory=list)  # key filters from other scans
    # rows its statement returns, from the load's statistics (``estimate_rows``); None: unknown
    estimated_rows: float | None = None
    # an aggregated scan's: the rows its filters keep, before grouping (``estimate_rows``)
    kept_rows: float | None = None
    # the rows its own exact server filters keep (those with a subquery aside: a join on
    # the server), as its table's scan in any statement returns them (``estimate_rows``;
    # the cost model's, ``veil.cost.server_time``)
    filtered_rows: float | None = None
    # the share of its table's rows its range filters on the column that orders the
    # table's rows (``TableDesign.sort_by``) keep: all the server need read of a table
    # it reads in blocks with min/max (``estimate_rows``, ``veil.cost.model``); None: all
    read_share: float | None = None
    # the share of its table's zones (blocks of rows as loaded, ``veil.load.zones``) its
    # range filters can match: what a server skipping blocks by min/max reads; None: all
    zone_share: float | None = None
    # columns fetched as their DET / OPE ciphertexts and left so (``decrypt_late``,
    # ``compare_ciphertexts``)
    ciphertext: set[str] = field(default_factory=set)
    late: list[LateKeys] = field(default_factory=list)  # run once this scan is fetched
    same_rows: Scan | None = None  # not fetched: reads that scan's local table (``share_fetches``)
    unread: bool = False  # a server join's member the local plan does not name (not registered)
    # fetched as its distinct rows with their counts, expanded by the client (``count_repeats``)
    counted: bool = False
    # its statement with run-time filters, rendered once per shape of them, by the executor
    # (``veil.exec.server.run_filtered``)
    shaped: dict[Hashable, tuple[str, list[object]] | None] = field(
        default_factory=dict, repr=False, compare=False
    )

    def fetched(self) -> list[tuple[str, Encryption | None]]:
        """``(plaintext column, server column)`` pairs to fetch; the row id when none."""
        if self.aggregation is not None:
            return self.aggregation.fetched(self.table)
        if self.joined is not None and self.joined.groups is not None:
            return self.joined.groups.fetched(self)
        wanted: list[tuple[str, Encryption | None]]
        ordered = [c.name for c in self.table.columns if c.name in self.columns]  # table order
        # then stored per-row expressions the local plan reads (``fetch_expressions``)
        ordered += sorted(self.columns - {c.name for c in self.table.columns})
        wanted = [(c, self.table.fetchable(c)) for c in ordered]
        if self.with_row_id or (not wanted and self.joined is None):
            wanted.append((ROW_ID, None))
        elif any(enc is not None and enc.row_bound for _, enc in wanted):
            wanted.append((RND_ROW_ID, None))  # RND (or a wrapped onion) decrypts under the row id
        return wanted


@dataclass
class BindFilter:
    """Filter this scan's ``target_enc`` column by keys the client computes.

    ``keys`` is a local query (over the ``sources``' local tables, once they
    are fetched) whose first column gives the plaintext keys; they are sent
    as DET ciphertexts under ``target_enc``
    (``veil.sql.passes.plan_bind_filters``), or, when ``target_enc`` is OPE,
    as the range of their lowest and highest (``veil.sql.passes.plan_key_ranges``).
    """

    sources: list[Scan]
    target_enc: Encryption  # DET of this scan's column (its keys), or OPE (their range)
    keys: exp.Query
    description: str  # where the keys come from, for explain
    # worth sending only if there are at most half as many keys as this scan's rows
    shrinks: Scan | None = None
    sql: str = field(default="", repr=False, compare=False)  # ``keys``' text, made at its first run


@dataclass
class LateKeys:
    """An IN-subquery (or grouped derived table) run on the client over ciphertexts,
    its keys then decrypted.

    ``query`` reads its scan's local table, where ``column`` holds the
    ciphertexts of ``enc``; its distinct results, decrypted, become the local
    table ``local_name`` (one column, ``output``) that the local plan's
    IN-subquery and its bind filters read. See ``veil.sql.passes.decrypt_late``.
    """

    query: exp.Select
    column: str
    enc: Encryption
    local_name: str
    output: str
    # a grouped derived table or CTE: ``local_name`` holds all of ``query``'s rows
    # and columns, only ``output`` decrypted (not just its distinct keys)
    groups: bool = False
    # ``query`` rendered, by the executor's first run (the plan's other SQL is kept too)
    sql: str = field(default="", repr=False, compare=False)


@dataclass
class AggregateItem:
    key: int  # identifies the client aggregate it serves
    kind: str  # COUNT, MIN, MAX or SUM (a HOM group's or ASHE sum of one expression)
    enc: Encryption | None  # None for COUNT(*) and SUM
    server: exp.Expr | None = None  # prebuilt server expression (counts of expressions)
    hom_index: int | None = None  # SUM: the expression's place in the HOM group
    ashe_index: int | None = None  # SUM: the expression's place in the table's ASHE sums
    count_key: int | None = None  # SUM: the item counting the expression's non-NULL rows
    # COUNT(*) less the NULLs the ASHE flags word counts in this field (``AsheSums.null_fields``)
    null_field: int | None = None


def ashe_sources(items: list[AggregateItem]) -> list[int]:
    """The ASHE sources the SUM items read, each once, in order of first use."""
    found: list[int] = []
    for item in items:
        if item.ashe_index is not None and item.ashe_index not in found:
            found.append(item.ashe_index)
    return found


@dataclass
class Aggregation:
    """The server groups a scan by DET keys: COUNT, MIN / MAX (OPE), SUM (ASHE or Paillier).

    With Paillier sums the statement is two-level (``packed_sums_select``) and
    the client re-aggregates its (group, pack mask) rows (``veil.exec.hom_fetch``);
    with ASHE sums the server groups by (keys, block of row ids) and the client
    unpads and re-aggregates those rows (``veil.ciphers.ashe_sums``).
    """

    keys: list[str]  # plaintext key columns
    items: list[AggregateItem] = field(default_factory=list)
    hom_product: exp.Expr | None = None  # server product of a (group, mask)'s HOM packs
    id_bit: exp.Expr | None = None  # ASHE: the server's 64-bit ``1 << (row id % 64)``
    # ASHE: the server's sum mod 2**64 of the column named ``ASHE_WORD``
    word_sum: exp.Expr | None = None

    def ashe_sources(self) -> list[int]:
        return ashe_sources(self.items)

    def add(
        self, key: int, kind: str, enc: Encryption | None, server: exp.Expr | None = None
    ) -> AggregateItem:
        item = AggregateItem(key, kind, enc, server)
        self.items.append(item)
        return item

    def local_name(self, key: int) -> str:
        index = next(i for i, item in enumerate(self.items) if item.key == key)
        return f"__veil_agg_{index}"

    def server_items(self) -> list[tuple[int, AggregateItem]]:
        """The items the server computes column by column (all but the HOM sums)."""
        return [(i, item) for i, item in enumerate(self.items) if item.kind != "SUM"]

    def fetched(self, table: TableDesign) -> list[tuple[str, Encryption | None]]:
        keys: list[tuple[str, Encryption | None]] = [(k, table.find(k, "DET")) for k in self.keys]
        values: list[tuple[str, Encryption | None]] = [
            (f"__veil_agg_{i}", item.enc if item.kind != "COUNT" else None)
            for i, item in self.server_items()
        ]
        sums: list[tuple[str, Encryption | None]] = []
        if self.hom_product is not None:
            sums = [(HOM_MASK, None), (HOM_PRODUCT, None)]
        if self.id_bit is not None:
            assert table.sums is not None
            sums = [(ASHE_BLOCK, None), (ASHE_MASK, None)]
            # the word columns' sums, then the overflow flags' sum, under their server names
            sums += [(name, None) for name in table.sums.summed_columns(self.ashe_sources())]
        return keys + values + sums


@dataclass
class JoinEdge:
    """An equi-join the server can evaluate: DET columns under one key scope."""

    left: Scan
    left_column: str  # server column names
    right: Scan
    right_column: str
    original: str
    correlated: bool = False  # right is a scan of an outer scope
    node: exp.Expr | None = None  # the conjunct in the local plan


@dataclass
class Reduction:
    """Semi-join reduction (a server-side pre-filter of a scan by its join partners).

    In a scope whose scans are inner-joined, a row of one scan can appear in
    the result only if it joins with rows of the others that pass their own
    pushed predicates. The server keeps just those rows::

        SELECT c_a, c_b FROM t_orders WHERE c_date < $1
          AND c_custkey IN (SELECT r1.c_custkey FROM t_customer AS r1 WHERE r1.c_seg = $2)

    The local plan is unchanged and still joins and filters exactly.
    """

    scans: list[Scan]
    edges: list[JoinEdge]
    # a branch joined on several of the target's columns, when the target is its largest
    # table, as a correlated EXISTS (``Backend.semi_joins_by_exists``) rather than by row ids
    by_exists: bool = False

    def part(self, start: Scan, edges: list[JoinEdge]) -> Reduction:
        """The scans ``edges`` connect to ``start``, with the edges among them."""
        reached, frontier = {id(start): start}, [start]
        while frontier:
            scan = frontier.pop()
            for edge in edges:
                for a, b in ((edge.left, edge.right), (edge.right, edge.left)):
                    if a is scan and id(b) not in reached:
                        reached[id(b)] = b
                        frontier.append(b)
        kept = [e for e in self.edges if id(e.left) in reached and id(e.right) in reached]
        return Reduction([s for s in self.scans if id(s) in reached], kept, self.by_exists)


JOIN_ROW = "__veil_join_row"  # local column pairing the parts of one joined row
REPEATS = "__veil_repeats"  # a counted fetch's last column: how many rows each row stands for


@dataclass
class JoinGroup:
    """GROUP BY DET keys with COUNT / MIN / MAX / SUM over a server join
    (``pushdown_join_aggregates``).

    Each of ``keys`` and ``items`` belongs to the scan whose column it reads
    (COUNT(*) to the first); each scan's local table gets its own part of
    every group's row, all parts of a group under one ``JOIN_ROW``.

    With ASHE sums of one scan's expressions (``summed``) the server groups by
    (keys, block of that scan's row ids), as for one table (``Aggregation``),
    and counts the joined rows of each: the client checks that no id was summed
    twice (``veil.exec.joined_sums``). The SUM items are not among any scan's
    ``fetched``: their words follow the block columns.
    """

    keys: list[tuple[Scan, str, Encryption]]  # (scan, plaintext column, its DET or OPE)
    items: list[tuple[Scan, AggregateItem]]  # ``server``: the aggregate over ``j<n>`` names
    summed: Scan | None = None  # the scan whose ASHE sums the SUM items read
    id_bit: exp.Expr | None = None  # ASHE: ``1 << (row id % 64)`` of ``summed``, unqualified
    word_sum: exp.Expr | None = None  # ASHE: the server's wrapping sum of ``ASHE_WORD``
    estimated_rows: float | None = None  # ASHE: the (group, block) rows, from the statistics
    estimated_runs: float | None = None  # ASHE: their runs of summed ids (``ashe_runs``)

    def fetched(self, scan: Scan) -> list[tuple[str, Encryption | None]]:
        keys: list[tuple[str, Encryption | None]] = [(c, e) for s, c, e in self.keys if s is scan]
        values: list[tuple[str, Encryption | None]] = [
            (self.local_name(item.key), item.enc if item.kind != "COUNT" else None)
            for s, item in self.items
            if s is scan and item.kind != "SUM"
        ]
        return keys + values

    def ashe_sources(self) -> list[int]:
        return ashe_sources([item for _, item in self.items])

    def ashe_words(self) -> list[str]:
        """The server names of the summed scan's word columns the SUM items read, then its
        overflow flags'."""
        sums = self.summed.table.sums if self.summed is not None else None
        return sums.summed_columns(self.ashe_sources()) if sums is not None else []

    def local_name(self, key: int) -> str:
        index = next(i for i, (_, item) in enumerate(self.items) if item.key == key)
        return f"__veil_agg_{index}"


@dataclass
class JoinedFetch:
    """Inner-joined scans fetched by ONE server statement (see ``pushdown_joins``)::

        SELECT j1.c_date, j2.c_price FROM t_cust AS j0, t_ord AS j1, t_line AS j2
         WHERE j0.c_ck = j1.c_ok AND j1.c_okey = j2.c_lkey AND j0.c_seg = $1

    The client splits each joined row into one row per scan's local table,
    all carrying the same ``JOIN_ROW`` number, and the local plan joins the
    tables on that number instead of the (now unfetched) join keys.
    """

    scans: list[Scan]
    edges: list[JoinEdge]
    groups: JoinGroup | None = None  # grouped and counted on the server too
    # joined rows (with ``groups``: the groups), from the load's statistics
    estimated_rows: float | None = None
    # the rows joined, before any grouping (the cost model's: its join's output)
    joined_rows: float | None = None
    # fetched as its distinct rows with their counts, expanded by the client (``count_repeats``)
    counted: bool = False
    # its statement with run-time filters, rendered once per shape of them, by the executor
    # (``veil.exec.server.run_filtered``)
    shaped: dict[Hashable, tuple[str, list[object]] | None] = field(
        default_factory=dict, repr=False, compare=False
    )

    def fetched(self) -> list[tuple[Scan, str, Encryption | None]]:
        wanted = [(scan, column, enc) for scan in self.scans for column, enc in scan.fetched()]
        return wanted or [(self.scans[0], ROW_ID, None)]


@dataclass
class LateOutput:
    """A column of the query's result left as DET ciphertexts by the local plan, and
    decrypted in the result's rows only (``decrypt_outputs``)."""

    position: int  # in the result
    scan: Scan
    column: str
    enc: Encryption


@dataclass
class SplitPlan:
    scans: list[Scan]
    local: exp.Expr  # runs on the client over the scans' local tables
    pushdown: bool  # False when the query could not be qualified (fetch-and-run locally)
    # filled by the executor, for the next run of a cached plan: the statements
    # that take no run-time filter, rendered (text, parameters), and the local SQL
    rendered: dict[int, tuple[str, list[object]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    local_sql: str = field(default="", repr=False, compare=False)
    # whether the local SQL's result has only columns Arrow holds exactly, so it runs
    # bound once (``veil.exec.local_run``); None until its first run says
    local_exact: bool | None = field(default=None, repr=False, compare=False)
    # server joins' members the local SQL reads only through their joined table
    # (``veil.exec.one_table.unread_members``): fetched, never registered on their own
    unregistered: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    late_outputs: list[LateOutput] = field(default_factory=list)
    # the onion layers peeled for this plan (``veil.session.onions``), in words, for explain
    peels: list[str] = field(default_factory=list, repr=False, compare=False)
    # the candidate plans it was chosen from and their estimates (``veil.cost.choice``)
    choice: list[str] = field(default_factory=list, repr=False, compare=False)
    # why this plan fetches everything although the query asked for a split (a pass
    # failed, or the split plan failed when it ran): explain shows it, the session counts it
    fallback: Fallback | None = field(default=None, repr=False, compare=False)
