"""The greedy designer: store every encryption the workload can use.

For each column it stores the encryptions the workload analysis asked for
(DET, OPE, SEARCH), if the crypto core offers them and the column's type
allows them, and makes sure every column stays fetchable: a column without a
DET encryption (which the client can decrypt) also gets RND, or, when no
query of the workload reads it at all, is stored in sealed blocks of rows
(``BLOCKS``: compressed, a fraction of RND's bytes, fetched whole). Equi-joined
columns of the same encoded type share one DET key scope (a key group) so the
server can join them. Last, what the analysis asked for but no plan of the
workload reads (ASHE sums, OPE copies, precomputed expressions) is left out
(``veil.designer.prune``).

OPE widths and HOM slot widths come from value domains (the column's type, or
the domain the user declared; ``veil.design.domains``), never from the data,
so every value the type admits can be inserted later.

A cost-based designer (MONOMI §6) will replace this; it produces the same
``PhysicalDesign`` and marks its choices with ``origin``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import duckdb
import sqlglot
from sqlglot import exp

from veil.crypto.ashe import BLOCK_ROWS, sum_fits, word_bits
from veil.design import SUM_SCHEMES
from veil.design.domains import (
    ExpressionDomain,
    column_domain,
    expression_domain,
    rnd_bits,
    sentinels,
    signed_bits,
)
from veil.design.model import (
    ASHE,
    BLOCKS,
    DET,
    FETCH_COPY,
    FLAG_FIELD_BITS,
    HOM,
    MAX_NULL_FIELDS,
    OPE,
    RND,
    RND_BITS,
    SEARCH,
    AsheSums,
    Column,
    Encryption,
    HomGroup,
    PhysicalDesign,
    TableDesign,
    opaque_name,
)
from veil.design.policy import Policy
from veil.designer.ordered_keys import ordered_keys, with_ordered_keys
from veil.designer.prune import Pruned, unread_encryptions
from veil.encoding import (
    DECIMAL_KIND,
    FLOAT_KIND,
    INT_KIND,
    STRING_KIND,
    SqlType,
)
from veil.sql.parse import parse_statement
from veil.sql.workload import ColumnRef, WorkloadNeeds, analyse_tree

DET_INT_BITS = 64


def greedy_design(
    schema: dict[str, list[Column]],
    workload: list[str],
    schemes: frozenset[str],
    key_fingerprint: str,
    *,
    sums: str = "ashe",
    policy: Policy | None = None,
    prune: bool = True,
) -> PhysicalDesign:
    """The design serving ``workload``, within ``policy`` (``veil.design.policy``).

    ``sums`` says how the server adds the workload's SUM/AVG arguments: under
    ASHE (the default), in packed Paillier groups, or not at all ("none").
    What a column's policy forbids is not stored: queries needing it run
    that part on the client. ``prune``: leave out what the analysis asked
    for but no plan of the workload reads (``veil.designer.prune``).
    """
    if sums not in SUM_SCHEMES:
        raise ValueError(f"sums={sums!r} is not one of {', '.join(SUM_SCHEMES)}")
    plain = {t: {c.name: c.type for c in cols} for t, cols in schema.items()}
    policy = policy or Policy()
    # each query parsed once, for its analysis and its planning (``prune``), and analysed
    # once: ``ordered_keys`` weighs them one by one (parsing and qualifying them twice
    # was a sixth of designing TPC-DS's 79)
    trees = [parse_statement(sql) for sql in workload]
    per_query = [analyse_tree(tree, plain) for tree in trees]
    needs = within_policy(merged_needs(per_query), policy)
    # a fact table's date key under OPE, its rows loaded in its order (``ordered_keys``)
    needs = with_ordered_keys(needs, ordered_keys(per_query, plain, needs, policy))
    with _Domains() as domains:
        built = _design(schema, needs, schemes, key_fingerprint, sums, frozenset(), domains)
        if not prune or not workload:
            return built
        # what the analysis asked for but no plan reads (``veil.designer.prune``)
        pruned = unread_encryptions(built, trees)
        if not pruned:
            return built
        return _design(schema, needs, schemes, key_fingerprint, sums, pruned, domains)


def _design(
    schema: dict[str, list[Column]],
    needs: WorkloadNeeds,
    schemes: frozenset[str],
    key_fingerprint: str,
    sums: str,
    pruned: Pruned,
    domains: _Domains,
) -> PhysicalDesign:
    """The design storing what ``needs`` asks, less the ``pruned`` encryptions."""
    plain = {t: {c.name: c.type for c in cols} for t, cols in schema.items()}
    groups = _key_groups(needs.joins, plain)
    ope_groups = _key_groups(needs.ope_pairs, plain)
    design = PhysicalDesign(key_fingerprint=key_fingerprint)
    for table, columns in schema.items():
        summed = _summed(table, columns, needs, pruned, domains)
        ashe = _ashe_sums(summed) if sums == "ashe" else None
        counted = [s for i, s in enumerate(ashe.sources) if ashe.null_field(i)] if ashe else []
        table_needs = _with_summed_reads(needs, set(counted))
        encryptions: list[Encryption] = []
        for column in columns:
            encryptions += _column_encryptions(
                table, column, table_needs, (groups, ope_groups), schemes
            )
        encryptions += _row_encryptions(table, columns, needs, schemes, domains)
        encryptions = [e for e in encryptions if (table, e.scheme, e.source) not in pruned]
        row_id = opaque_name("c")
        design.tables[table] = TableDesign(
            name=table,
            server_name=opaque_name("t"),
            row_id=row_id,
            columns=list(columns),
            encryptions=encryptions,
            hom=_hom_group(summed, row_id) if sums == "paillier" and HOM in schemes else None,
            sums=ashe,
            id_counter=opaque_name("t"),
            blocks_table=opaque_name("t") if any(e.scheme == BLOCKS for e in encryptions) else "",
            cluster_candidates=_cluster_keys(table, encryptions, needs) if ashe else [],
            sort_candidates=_sort_keys(table, encryptions, needs),
        )
    _share_ope_widths(design)
    return design


def merged_needs(parts: list[WorkloadNeeds]) -> WorkloadNeeds:
    """The needs of a workload from its queries' (``analyse_workload`` of them all at once)."""
    needs = WorkloadNeeds()
    for part in parts:
        for f in fields(WorkloadNeeds):  # every field, so a new one is merged too
            mine, theirs = getattr(needs, f.name), getattr(part, f.name)
            if isinstance(mine, set):
                mine.update(theirs)
            elif isinstance(mine, dict):  # counts per column
                for ref, count in theirs.items():
                    mine[ref] = mine.get(ref, 0) + count
            elif isinstance(mine, int):
                setattr(needs, f.name, mine + theirs)
            else:
                raise TypeError(f"no rule merges WorkloadNeeds.{f.name}")
    return needs


def _with_summed_reads(needs: WorkloadNeeds, server_sums: set[str]) -> WorkloadNeeds:
    """``needs`` whose ``read`` has the columns of the sums the server cannot add alone.

    ``server_sums``: the ASHE sources whose NULLs the server counts in the
    flags word (``AsheSums.null_fields``), so it never tests their columns.

    A column read only inside expressions the server sums under ASHE
    (TPC-H's l_tax) never comes back per row but in the fetch-everything
    plan, which reads sealed blocks as well: it is stored in blocks.
    """
    fetched = {ref for ref, source in needs.summed_reads if source not in server_sums}
    return replace(needs, read=needs.read | fetched)


def _cluster_keys(
    table: str, encryptions: list[Encryption], needs: WorkloadNeeds
) -> list[list[str]]:
    """The keys ``table``'s rows could be clustered by: its one-table GROUP BYs under DET.

    ASHE sums per group are cheap when a group's rows have consecutive ids
    (``TableDesign.cluster_by``); the loader picks the candidate with the
    fewest groups, if they are few enough (``veil.load.clusters``).
    """
    det = {e.source for e in encryptions if e.scheme == DET and not e.is_expression}
    return sorted(
        list(cols) for t, cols in needs.group_keys if t == table and all(c in det for c in cols)
    )


def _sort_keys(table: str, encryptions: list[Encryption], needs: WorkloadNeeds) -> list[str]:
    """The OPE columns ``table``'s rows could be loaded in order of, most range-filtered first.

    Rows in the order of a column the workload filters by ranges let the
    server skip whole blocks of rows by their stored min/max (DuckDB's row
    groups, Parquet's); the loader takes the first whose OPE is not wrapped
    (``veil.load.clusters``).
    """
    ope = {e.source for e in encryptions if e.scheme == OPE and not e.is_expression}
    counted = [(n, c) for (t, c), n in needs.range_filters.items() if t == table and c in ope]
    return [c for _, c in sorted(counted, key=lambda item: (-item[0], item[1]))]


def within_policy(needs: WorkloadNeeds, policy: Policy) -> WorkloadNeeds:
    """``needs`` without what ``policy`` forbids (an expression: any column it reads)."""

    def allowed(ref: ColumnRef, layer: str) -> bool:
        return policy.allows(ref[0], ref[1], layer)

    def row_allowed(item: tuple[str, str], layer: str) -> bool:
        table, source = item
        return all(allowed((table, c), layer) for c in summed_columns(source))

    return WorkloadNeeds(
        det={r for r in needs.det if allowed(r, DET)},
        ope={r for r in needs.ope if allowed(r, OPE)},
        search={r for r in needs.search if allowed(r, DET)},
        joins={(a, b) for a, b in needs.joins if allowed(a, DET) and allowed(b, DET)},
        ope_pairs={(a, b) for a, b in needs.ope_pairs if allowed(a, OPE) and allowed(b, OPE)},
        sums=set(needs.sums),
        det_rows={r for r in needs.det_rows if row_allowed(r, DET)},
        ope_rows={r for r in needs.ope_rows if row_allowed(r, OPE)},
        ope_alone={r for r in needs.ope_alone if allowed(r, OPE)},
        range_filters={r: n for r, n in needs.range_filters.items() if allowed(r, OPE)},
        # rows clustered on keys reveal which rows hold equal keys: DET's leakage
        group_keys={
            (t, cols) for t, cols in needs.group_keys if all(allowed((t, c), DET) for c in cols)
        },
        read=set(needs.read),
        summed_reads=set(needs.summed_reads),
        queries=needs.queries,
    )


def table_design(table: str, columns: list[Column], schemes: frozenset[str]) -> TableDesign:
    """The design of a table outside any workload: fetchable columns only."""
    design = greedy_design({table: columns}, [], schemes, "")
    return design.tables[table]


def _column_encryptions(
    table: str,
    column: Column,
    needs: WorkloadNeeds,
    key_groups: tuple[dict[ColumnRef, str], dict[ColumnRef, str]],
    schemes: frozenset[str],
) -> list[Encryption]:
    groups, ope_groups = key_groups
    ref = (table, column.name)
    kind = SqlType(column.type).kind
    chosen: list[Encryption] = []

    def add(scheme: str, scope: str, **params: object) -> None:
        if not column.name.isidentifier():
            params["column"] = True  # a name, not an expression (Encryption.is_expression)
        chosen.append(
            Encryption(opaque_name("c"), column.name, scheme, column.type, scope, dict(params))
        )

    sql_type = SqlType(column.type)
    wants_ope = ref in needs.ope and OPE in schemes and sql_type.is_integral
    # OPE of the whole value already shows which values are equal, so a DET
    # copy reveals nothing more; it is what the client fetches (fast to decrypt,
    # its distinct values once; narrow DET is no wider than the type's RND). Marked as
    # only that, a load may leave it out where OPE's values are few (``load.fetch_copies``).
    if (ref in needs.det or wants_ope) and DET in schemes and sql_type.has_equality:
        only_fetched = wants_ope and ref not in needs.det and ref not in groups
        marks = {FETCH_COPY: True} if only_fetched else {}
        add(DET, f"det:{groups.get(ref, f'{table}.{column.name}')}", **marks)
    elif needs.queries and ref not in needs.read:
        # no query of the workload reads it: it only comes back whole, in blocks
        add(BLOCKS, f"blocks:{table}.{column.name}")
    else:
        bits = rnd_bits(sql_type, column.bounds)  # a number's RND: its domain's bits, not 64
        add(RND, f"rnd:{table}.{column.name}", **({RND_BITS: bits} if bits else {}))
    if wants_ope:
        domain = column_domain(column)
        assert domain is not None
        scope = f"ope:{ope_groups.get(ref, f'{table}.{column.name}')}"
        add(OPE, scope, bits=signed_bits(*domain))
    if ref in needs.search and SEARCH in schemes and kind == STRING_KIND:
        add(SEARCH, f"search:{table}.{column.name}")
    return chosen


def _row_encryptions(
    table: str,
    columns: list[Column],
    needs: WorkloadNeeds,
    schemes: frozenset[str],
    domains: _Domains,
) -> list[Encryption]:
    """Per-row precomputed expressions: DET / OPE for filters (MONOMI §5.1)."""
    wanted = [(DET, s) for t, s in needs.det_rows if t == table and DET in schemes]
    wanted += [(OPE, s) for t, s in needs.ope_rows if t == table and OPE in schemes]
    chosen = []
    for scheme, source in sorted(wanted):
        domain = domains.of(table, source, columns)
        if domain is None or (
            scheme != DET and SqlType(domain.type).kind in (STRING_KIND, FLOAT_KIND)
        ):
            continue  # OPE takes numbers and dates
        if source not in {c.name for c in columns}:
            params = _expression_params(domain, scheme)
            scope = f"{scheme.lower()}:{table}.{source}"
            chosen.append(Encryption(opaque_name("c"), source, scheme, domain.type, scope, params))
    return chosen


def _expression_params(domain: ExpressionDomain, scheme: str) -> dict[str, object]:
    """A precomputed column's domain; with room for the marks of overflowed rows.

    A row whose expression DuckDB cannot compute (its value lies beyond the
    type) is stored with the mark just beyond the domain on its side
    (``veil.ciphers.encrypt``), so order and equality with every value of the
    type stay right; where int64 has no room for the marks, such a row's
    value is NULL.
    """
    params: dict[str, object] = {"domain": [domain.low, domain.high], "overflow": domain.overflow}
    if scheme == OPE:
        marks = sentinels(domain.low, domain.high) if domain.overflow else None
        params["bits"] = signed_bits(*(marks or (domain.low, domain.high)))
    return params


def _share_ope_widths(design: PhysicalDesign) -> None:
    """Columns sharing an OPE key scope (compared together) share one width."""
    widths: dict[str, int] = {}
    encryptions = [e for t in design.tables.values() for e in t.encryptions if e.scheme == OPE]
    for enc in encryptions:
        widths[enc.key_scope] = max(int(str(enc.params["bits"])), widths.get(enc.key_scope, 1))
    for enc in encryptions:
        enc.params["bits"] = widths[enc.key_scope]


@dataclass
class _Summed:
    """The exact-number expressions of a table the workload sums, with their domains."""

    table: str
    sources: list[str]
    domains: list[ExpressionDomain]


def _summed(
    table: str,
    columns: list[Column],
    needs: WorkloadNeeds,
    pruned: Pruned = frozenset(),
    domains: _Domains | None = None,
) -> _Summed:
    """The table's summed expressions the server can add (MONOMI §5.3).

    Only exact numbers (integers, decimals), and only expressions that are
    NULL exactly when one of their columns is NULL (arithmetic over columns
    and constants): the server counts an expression's non-NULL rows (for AVG
    and for telling an empty SUM from 0) from its columns' other encryptions.
    The rest is summed by the client.
    """
    found = _Summed(table, [], [])
    mine = sorted(source for t, source in needs.sums if t == table)
    if not mine:
        return found
    typed = domains or _Domains()  # onion designs type their sums alone
    try:
        for source in mine:
            domain = typed.of(table, source, columns)
            exact = domain is not None and SqlType(domain.type).kind in (INT_KIND, DECIMAL_KIND)
            if domain is None or not exact or not null_follows_columns(source):
                continue
            if (table, ASHE, source) in pruned:
                continue
            found.sources.append(source)
            found.domains.append(domain)
    finally:
        if domains is None:
            typed.close()
    return found


def _hom_group(summed: _Summed, row_id: str) -> HomGroup | None:
    """One packed Paillier group of the summed expressions; its slot is the row id."""
    if not summed.sources:
        return None
    bits = max(signed_bits(d.low, d.high) for d in summed.domains)
    return HomGroup(
        server_name=opaque_name("t"),
        slot_column=row_id,
        sources=summed.sources,
        types=[d.type for d in summed.domains],
        key_scope=f"hom:{summed.table}",
        value_bits=max(bits, 2),
        overflow_flags=any(d.overflow for d in summed.domains),
    )


def _ashe_sums(summed: _Summed) -> AsheSums | None:
    """ASHE columns of the summed expressions: one word each where a block sum fits int64.

    The server sums blocks of ``BLOCK_ROWS`` consecutive row ids
    (``veil.ciphers.ashe_sums``); a block's sum is recovered mod 2**64, so a
    source whose domain could make it leave int64 is split into two words.
    """
    if not summed.sources:
        return None
    largest = [max(abs(d.low), abs(d.high)) for d in summed.domains]
    words = [1 if sum_fits(BLOCK_ROWS, m) else 2 for m in largest]
    # one word of 7-bit counters: the overflow flags, then each source's NULLs
    fields = [i + 1 if i < MAX_NULL_FIELDS else None for i in range(len(words))]
    return AsheSums(
        sources=summed.sources,
        types=[d.type for d in summed.domains],
        columns=[[opaque_name("c") for _ in range(n)] for n in words],
        key_scope=f"ashe:{opaque_name('s')}",  # fresh per load: ids restart, keys must too
        overflow_column=opaque_name("c"),
        word_bits=[word_bits(m, n, None) for m, n in zip(largest, words, strict=True)],
        null_fields=fields,
        overflow_bits=FLAG_FIELD_BITS * (1 + max((f for f in fields if f), default=0)),
    )


def null_follows_columns(source: str) -> bool:
    """Is ``source`` arithmetic over columns and constants (NULL iff a column is NULL)?"""
    try:
        tree = sqlglot.parse_one(source, read="duckdb")
    except sqlglot.errors.ParseError:
        return False
    allowed: tuple[type[exp.Expr], ...] = (exp.Column, exp.Identifier, exp.Literal, exp.Paren)
    allowed += (exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Cast, exp.DataType)
    return all(isinstance(node, allowed) for node in tree.walk())


def summed_columns(source: str) -> list[str]:
    """The columns an expression reads (for the server's count of non-NULL rows)."""
    tree = sqlglot.parse_one(source, read="duckdb")
    return sorted({c.name.lower() for c in tree.find_all(exp.Column)})


class _Domains:
    """How a server column stores each table's column or expression (``of``), worked out
    once for a design and its pruned version, expressions typed by one DuckDB catalog
    of the tables (a connection per table and design was 1.5 s of designing TPC-DS)."""

    def __init__(self) -> None:
        self._catalog: duckdb.DuckDBPyConnection | None = None
        self._tables: set[str] = set()
        self._found: dict[tuple[str, str], ExpressionDomain | None] = {}

    def __enter__(self) -> _Domains:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()

    def of(self, table: str, source: str, columns: list[Column]) -> ExpressionDomain | None:
        """How ``source`` (a column or expression of ``table``) is stored, or None if it
        cannot be."""
        key = (table, source)
        if key not in self._found:
            self._found[key] = self._domain(table, source, columns)
        return self._found[key]

    def _domain(self, table: str, source: str, columns: list[Column]) -> ExpressionDomain | None:
        by_name = {c.name: c for c in columns}
        if source in by_name:
            column = by_name[source]
            domain = column_domain(column)
            low, high = domain if domain is not None else (0, 0)
            return ExpressionDomain(column.type, low, high, overflow=False)
        select = f'DESCRIBE SELECT {source} FROM "{table}"'
        try:
            found = str(self._catalog_of(table, columns).execute(select).fetchall()[0][1])
        except duckdb.Error:
            return None
        return expression_domain(source, found, by_name)

    def _catalog_of(self, table: str, columns: list[Column]) -> duckdb.DuckDBPyConnection:
        if self._catalog is None:
            self._catalog = duckdb.connect()
        if table not in self._tables:
            body = ", ".join(f'"{c.name}" {c.type}' for c in columns)
            self._catalog.execute(f'CREATE TABLE "{table}" ({body})')
            self._tables.add(table)
        return self._catalog


def _key_groups(
    pairs: set[tuple[ColumnRef, ColumnRef]], schema: dict[str, dict[str, str]]
) -> dict[ColumnRef, str]:
    """Union-find over compared column pairs whose encodings are comparable."""
    parent: dict[ColumnRef, ColumnRef] = {}

    def find(ref: ColumnRef) -> ColumnRef:
        while parent.get(ref, ref) != ref:
            ref = parent[ref]
        return ref

    for left, right in sorted(pairs):
        if _encoding_of(left, schema) == _encoding_of(right, schema):
            a, b = sorted((find(left), find(right)))
            parent[b] = a
    return {ref: "{}.{}".format(*find(ref)) for ref in parent} | {
        root: "{}.{}".format(*root) for root in map(find, list(parent))
    }


def _encoding_of(ref: ColumnRef, schema: dict[str, dict[str, str]]) -> tuple[str, int]:
    sql_type = SqlType(schema[ref[0]][ref[1]])
    return (sql_type.kind, sql_type.scale)
