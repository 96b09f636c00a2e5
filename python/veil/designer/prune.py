"""Pruning the greedy design: leave out the encryptions no plan of the workload reads.

The workload analysis (``veil.sql.workload``) asks for every encryption an
operation of a query could use: an OPE copy of each column compared with a
constant, ASHE words of each summed expression, DET or OPE of each per-row
expression. The planner uses fewer: a SUM over a star join whose keys are not
distinct at load stays on the client (``veil.sql.join_sums``), a range on a
measure column of a scan the plan fetches whole for another reason runs
locally. On TPC-DS SF 0.1, 30% of the greedy design's server bytes were
ASHE words and OPE copies that none of the 79 queries' plans read.

So the greedy designer plans each workload query with the real planner
(``veil.sql.planner.plan_query``) against the full greedy design and keeps
only the optional encryptions some plan's RemoteSQL reads
(``server_columns``). The design has no statistics yet (it is made before the
load), and the planner's choices lean on them, so the planning sees them at
their most favourable: every DET column distinct (a key, so every server join
may add ASHE sums), server sums always worth it, constants always encryptable
and every server capability present. What that planning does not read, no
plan under the loaded design's real statistics reads either: a pruned
encryption only ever costs speed if an estimate goes another way, never an
answer (the planner fetches and runs the part on the client).

What is never pruned: a column's DET (its fetch form, also what joins and
groups use), RND, BLOCKS, row ids, and the OPE of the key the load orders
a table's rows by (which plans read only where the loaded row counts say so). A column whose ASHE sum is pruned and
that was sealed in blocks (read only inside that sum) is stored fetchable
again by the greedy designer (``veil.designer.greedy``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
from sqlglot import exp

from veil.cost.model import plan_steps
from veil.design.model import ASHE, DET, OPE, SEARCH, Encryption, PhysicalDesign, TableDesign
from veil.sql.parse import parse_statement
from veil.sql.plan import JoinedFetch, SplitPlan
from veil.sql.planner import plan_query
from veil.sql.remote import joined_statement, scan_statement

# (table, scheme, source): an encryption as the greedy designer builds it
Pruned = frozenset[tuple[str, str, str]]


def server_columns(plan: SplitPlan) -> set[str]:
    """Every server name the plan's statements read (filters, keys, sums, fetched columns)."""
    names: set[str] = set()
    for _, _, step in plan_steps(plan):
        statement = (
            joined_statement(step) if isinstance(step, JoinedFetch) else scan_statement(step)
        )
        names.update(i.name for i in statement.find_all(exp.Identifier))
    names.update(b.target_enc.name for scan in plan.scans for b in scan.binds)
    return names


def unread_encryptions(design: PhysicalDesign, workload: Sequence[str | exp.Expr]) -> Pruned:
    """The optional encryptions of ``design`` that no plan of ``workload`` reads (its
    queries as text, or parsed: ``parse_statement``'s trees, which planning leaves as
    they are).

    Optional: OPE and SEARCH of columns, DET and OPE of per-row expressions,
    ASHE sums (``_optional``). A query that cannot be parsed or planned keeps
    everything of the tables it names: nothing is pruned on a guess.
    """
    optional = _optional(design)
    if not optional:
        return frozenset()
    planning = _favourable(design)
    read: set[str] = set()
    context = _PlanningContext(design)
    try:
        for sql in workload:
            read |= _read_by(sql, planning, context)
    finally:
        context.close()
    return frozenset(key for name, key in optional.items() if name not in read)


def _read_by(sql: str | exp.Expr, design: PhysicalDesign, context: _PlanningContext) -> set[str]:
    """The server names ``sql``'s plan reads; every name of its tables if it has no plan."""
    try:
        tree = parse_statement(sql) if isinstance(sql, str) else sql
        plan = plan_query(tree, design, context)
    except Exception:  # a query the session would refuse or fail on: keep what it names
        return _every_name(design)
    if plan.fallback is not None or not plan.pushdown:
        tables = {t.name.lower() for t in tree.find_all(exp.Table)}
        return _every_name(design, tables)
    return server_columns(plan)


def _every_name(design: PhysicalDesign, tables: set[str] | None = None) -> set[str]:
    return {
        n for t in design.tables.values() if tables is None or t.name in tables for n in _names(t)
    }


def _names(table: TableDesign) -> list[str]:
    names = [e.name for e in table.encryptions]
    for words in table.sums.columns if table.sums is not None else []:
        names += words
    return names


def _optional(design: PhysicalDesign) -> dict[str, tuple[str, str, str]]:
    """Server name -> (table, scheme, source) of each encryption pruning may leave out."""
    found: dict[str, tuple[str, str, str]] = {}
    for table in design.tables.values():
        # the key the load orders the rows by (``veil.load.clusters``): ranges of it skip
        # blocks of rows where the loaded row counts say a dimension is small beside it
        # (``plan_key_ranges``), which the design's planning cannot tell yet
        ordered = next((c for c in table.sort_candidates if table.find(c, OPE)), None)
        for enc in table.encryptions:
            if _prunable(enc) and not (enc.scheme == OPE and enc.source == ordered):
                found[enc.name] = (table.name, enc.scheme, enc.source)
        sums = table.sums
        for source, words in zip(sums.sources, sums.columns, strict=True) if sums else []:
            for word in words:
                found[word] = (table.name, ASHE, source)
    return found


def _prunable(enc: Encryption) -> bool:
    return enc.scheme in (OPE, SEARCH) or (enc.scheme == DET and enc.is_expression)


def _favourable(design: PhysicalDesign) -> PhysicalDesign:
    """``design`` with the statistics that let the planner use the most (see the module)."""
    planning = copy.deepcopy(design)
    for table in planning.tables.values():
        for enc in table.encryptions:
            if enc.scheme == DET and not enc.is_expression:
                enc.params["unique"] = True  # a key: joins on it repeat no row
    return planning


@dataclass
class _PlanningContext:
    """The ``ServerContext`` of planning without keys or a server (nothing is run).

    Constants encrypt to placeholders, every server capability is present and
    server sums always pay: the planner pushes all it can.
    """

    design: PhysicalDesign
    hom_pushdown: str = "always"
    join_sums: bool = True

    def __post_init__(self) -> None:
        self.catalog = duckdb.connect()
        for table in self.design.tables.values():
            body = ", ".join(f'"{c.name}" {c.type}' for c in table.columns)
            self.catalog.execute(f'CREATE TABLE "{table.name}" ({body})')

    def close(self) -> None:
        self.catalog.close()

    def hashes_not_in(self) -> bool:
        return True

    def correlates_deeply(self) -> bool:
        return True

    def semi_joins_by_exists(self) -> bool:
        return False

    def scanned_rows_per_byte(self) -> float:
        return 2.0

    def encrypt_constant(self, node: exp.Expr, enc: Encryption) -> object | None:
        return 0

    def encoded_constant(self, node: exp.Expr, enc: Encryption) -> int | bytes | None:
        return 0

    def search_token(self, word: str, enc: Encryption) -> bytes:
        return b""

    def expression_type(self, node: exp.Expr, table: str, alias: str) -> str | None:
        select = f'SELECT {node.sql(dialect="duckdb")} FROM "{table}" AS "{alias}"'
        try:
            return str(self.catalog.sql(select).types[0])  # bound, never run
        except duckdb.Error:
            return None

    def search_match(self, ciphertexts: exp.Expr, token: exp.Expr) -> exp.Expr:
        return exp.Anonymous(this="search_match", expressions=[ciphertexts, token])

    def hom_product(self, ciphertexts: exp.Expr, table: TableDesign) -> exp.Expr:
        return exp.Anonymous(this="hom_product", expressions=[ciphertexts])

    def id_bit(self, position: exp.Expr) -> exp.Expr:
        return exp.Anonymous(this="id_bit", expressions=[position])

    def wrapping_sum(self, value: exp.Expr) -> exp.Expr:
        return exp.Anonymous(this="wrapping_sum", expressions=[value])

    def extreme(self, kind: str, value: exp.Expr, enc: Encryption) -> exp.Expr:
        return exp.Anonymous(this=kind, expressions=[value])
