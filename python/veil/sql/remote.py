"""RemoteSQL: every statement the server receives is built and rendered here.

The planner leaves a ``SplitPlan`` of data (scans, their server predicates,
joins, reductions, aggregations); this module turns it into statements over
opaque names, and ``render`` turns a statement into text in the backend's
dialect plus its parameters. Nothing else in Veil writes server SQL (the
backends' own DDL for loading aside).

Parameters are ciphertexts (or public values such as n^2) carried *inside*
the tree: ``param(value)`` is a placeholder node that holds its value, and
``render`` numbers them ``$1``, ``$2`` ... as it meets them. So a rewrite that
is abandoned halfway leaves no parameter behind, and statements that combine
other statements' predicates (semi-joins, server joins) need no offsets.

Statement shapes (names shortened)::

    scan         SELECT c_a, c_b FROM t_x WHERE <server predicates>
                   [AND c_k IN (<reduction>)] [AND c_k IN (SELECT UNNEST($n))]
    reduction    SELECT r1.c_k FROM t_y AS r1 WHERE <t_y's predicates>
                   (or, when several key columns join: rid IN (SELECT r0.rid FROM <the join>))
    joined       SELECT j0.c_a, j1.c_b FROM t_x AS j0, t_y AS j1 WHERE j0.c_k = j1.c_k AND ...
    aggregate    SELECT c_k, COUNT(*), MIN(c_ope) FROM t_x WHERE ... GROUP BY c_k
    HOM sums     two levels, per (keys, pack) then per (keys, mask, chunk) (``_packed_sums``)
    ASHE sums    SELECT c_k, rid >> 6, BIT_OR(1 << (rid & 63)), SUM(c_w) ... GROUP BY c_k, rid >> 6
    DML          DELETE FROM t_x WHERE rid IN (...);
                 UPDATE t_ids SET next_id = next_id + $1 RETURNING next_id - $1
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlglot import exp

from veil.crypto.ashe import BLOCK_ROWS
from veil.design.model import Encryption, TableDesign
from veil.sql.plan import ASHE_WORD, REPEATS, Reduction
from veil.sql.slots import filled

if TYPE_CHECKING:
    from veil.backends.base import Backend
    from veil.sql.plan import Aggregation, JoinedFetch, JoinEdge, Scan

_VALUE = "veil_param"  # meta key of a placeholder's value
OUTER = "__veil_outer"  # in a pushed subquery, qualifies the columns of the scan it filters
_TARGET_ALIAS = "r0"  # the target scan in a reduction's row-id form
_INNER, _SIDE = "g", "h"
HOM_PACK_COLUMN = "pack"  # the HOM side table's pack number column
HOM_CT_COLUMN = "ct"  # ... and its ciphertext column
ID_COUNTER_COLUMN = "next_id"  # the row-id counter table's one column
# the layers table's columns: an onion's server column name, whether its RND layer is
# off, and (JOIN onions) an opaque id of the key its ciphertexts are under now
LAYER_COLUMN, LAYER_PEELED, LAYER_KEY = "c", "peeled", "k"
# a row of the layers table whose ``c`` starts so keeps an index set aside during a peel
# (its CREATE statement in ``k``) until it is built again, so a crash cannot lose it
SET_ASIDE_INDEX = "index "
JOINADJ_REKEY = "veil_joinadj_rekey"  # server function: re-key JOIN-ADJ ciphertexts by a token
# the server functions that XOR a column with its RND layer's keystream (peel)
LAYER_XOR = {"int": "veil_layer_xor_int", "bytes": "veil_layer_xor_bytes"}

# Extra predicates per scan, found at execution time (bind filters), keyed by id(scan).
Extras = dict[int, list[exp.Expr]]


def param(value: object) -> exp.Placeholder:
    """A query parameter carrying ``value`` (always a ciphertext or a public value)."""
    node = exp.Placeholder()
    node.meta[_VALUE] = _Held(value)
    return node


class _Held:
    """A parameter's value, shared by every copy of its placeholder.

    sqlglot deep-copies a node's meta with the node; a bind filter's key list
    (thousands of ciphertexts) was copied at every ``qualified`` and ``isin``,
    ~350,000 calls a run of TPC-H Q20. Values are never changed in place.
    """

    __slots__ = ("value",)

    def __init__(self, value: object):
        self.value = value

    def __deepcopy__(self, memo: object) -> _Held:
        return self


def _is_param(node: exp.Expr) -> bool:
    return isinstance(node, exp.Placeholder) and _VALUE in node.meta


class Marker:
    """Stands for the ``index``-th parameter value of a run's filters in a statement
    rendered once for every run whose filters have the same shape (``marked``)."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def marked(filters: Sequence[exp.Expr]) -> tuple[tuple[str, ...], list[object], list[exp.Expr]]:
    """Run-time filters as (their shape, their parameters' values, copies of them whose
    parameters hold ``Marker`` s): filters of one shape differ in their values only.

    ``col IN (SELECT UNNEST($k))`` with this run's key list -> shape
    ``('col IN (SELECT UNNEST(?))',)``, values ``[keys]``, ``col IN (SELECT UNNEST(Marker(0)))``.
    """
    values: list[object] = []
    copies = []
    for predicate in filters:
        copy = predicate.copy()
        for node in copy.walk():
            if _is_param(node):
                values.append(node.meta[_VALUE].value)
                node.meta[_VALUE] = _Held(Marker(len(values) - 1))
        copies.append(copy)
    return tuple(p.sql() for p in filters), values, copies


def render(statement: exp.Expression, backend: Backend) -> tuple[str, list[object]]:
    """SQL text in ``backend``'s dialect (parameters ``$1``, ``$2`` ...) and the values.

    Works in place: every statement here is built fresh for one use, and a
    bind filter's key list can make it large (TPC-H Q9: 21,000 nodes), so it
    is not copied again on the way to text.
    """
    from veil.backends.base import render as render_text

    sent, left = backend.inline_parameters(*numbered(statement))
    return render_text(sent, backend.dialect, copy=False), left


def render_sent(statement: exp.Expression, backend: Backend) -> tuple[str, list[object], bool]:
    """``render``'s text and values, and whether ``backend`` sent every parameter as one
    (wrote none of their values into the text)."""
    from veil.backends.base import render as render_text

    done, values = numbered(statement)
    sent, left = backend.inline_parameters(done, values)
    return render_text(sent, backend.dialect, copy=False), left, len(left) == len(values)


def numbered(statement: exp.Expression) -> tuple[exp.Expression, list[object]]:
    """The statement (changed in place) with its parameters numbered, and their values."""
    values: list[object] = []

    def number(node: exp.Expr) -> exp.Expr:
        if _is_param(node):
            values.append(filled(node.meta[_VALUE].value))  # a parameter's slot: this run's
            return exp.Placeholder(this=str(len(values)))
        return node

    done = statement.transform(number, copy=False)
    assert isinstance(done, exp.Expression)
    return done, values


# -- scans ------------------------------------------------------------------------


def scan_statement(scan: Scan, extras: Extras | None = None) -> exp.Select:
    """The RemoteSQL of a scan fetched by its own statement (``extras``: run-time filters)."""
    extras = extras or {}
    if scan.aggregation is not None:
        return _aggregate_statement(scan, extras)
    columns = [exp.column(scan.table.stored_column(enc)) for _, enc in scan.fetched()]
    select = exp.select(*columns).from_(scan.table.server_name)
    select = _filtered(select, scan, None, extras)
    return _counted(select, columns) if scan.counted else select


def _counted(select: exp.Select, columns: list[exp.Column]) -> exp.Select:
    """``select`` grouped by every column it returns, each group's row count last
    (``count_repeats``)."""
    select = select.select(exp.alias_(exp.Count(this=exp.Star()), REPEATS), copy=False)
    return select.group_by(*[c.copy() for c in columns], copy=False)


def _filtered(select: exp.Select, scan: Scan, alias: str | None, extras: Extras) -> exp.Select:
    """``select`` with ``scan``'s server predicates and run-time filters, then its reduction."""
    for predicate in _filters(scan, extras):
        select = select.where(qualified(predicate, scan, alias), copy=False)
    if scan.reduction is not None:
        select = select.where(reduction_filter(scan.reduction, scan, alias, extras), copy=False)
    return select


def _filters(scan: Scan, extras: Extras) -> list[exp.Expr]:
    return [p.server for p in scan.predicates] + extras.get(id(scan), [])


def qualified(server: exp.Expr, scan: Scan, alias: str | None) -> exp.Expr:
    """A copy of a scan's server predicate with its columns qualified by ``alias``.

    A pushed subquery (``veil.sql.server_subquery``) names its own tables'
    columns by their aliases and the scan's columns by ``OUTER``: those are
    qualified too, by the scan's table name when it has no alias, so that a
    subquery over the same table never captures them.
    """
    copied = server.copy()
    outer = alias or scan.table.server_name
    for column in list(copied.find_all(exp.Column)):
        if column.table == OUTER:
            column.replace(exp.column(column.name, table=outer))
        elif not column.table and alias is not None:
            column.replace(exp.column(column.name, table=alias))
    return copied


def reduction_filter(
    reduction: Reduction, target: Scan, outer: str | None, extras: Extras | None = None
) -> exp.Expr:
    """The server filter keeping the rows of ``target`` (named ``outer``) that have join partners.

    The reduction's other scans fall into branches hanging off the target
    (TPC-H Q21's l1: supplier and nation on l_suppkey, orders on l_orderkey).
    A branch joined on one column of the target is a key semi-join, computed
    once and run by the engine as a hash semi-join::

        c_k IN (SELECT r1.c_k FROM t_y AS r1 WHERE <t_y's predicates>)

    (TPC-H Q4: 448 -> ~100 ms.) A branch joined on several of its columns
    keeps the row-id form, ``rid IN (SELECT r0.rid FROM <target and the
    branch joined>)``: a correlated ``EXISTS`` on several keys made DuckDB run
    Q7's reductions thirty times slower. Where the server pulls such an
    ``EXISTS`` up into a hash semi-join (``Reduction.by_exists``: PostgreSQL)
    and the target is the branch's largest table, the branch is sent as one
    (``_correlated_rows``). The branches' filters together keep
    at least the rows the whole reduction keeps (the local plan filters
    exactly). ``extras``: run-time filters of scans fetched before.
    """
    extras = extras or {}
    keyed: list[tuple[Reduction, str]] = []
    joined: list[Reduction] = []
    for branch in _branches(reduction, target):
        keys = {c for edge in branch.edges if (c := edge_column(edge, target)) is not None}
        if len(keys) == 1:
            keyed.append((branch, keys.pop()))
        else:
            joined.append(branch)
    filters = [_key_semi_join(branch, target, key, outer, extras) for branch, key in keyed]
    for branch in joined:
        if branch.by_exists and _largest(branch, target):
            filters.append(_correlated_rows(branch, target, outer, extras))
            continue
        # the key semi-joins also filter the target inside the row-id form: there the
        # engine joins the target's surviving rows only (TPC-DS q72: catalog_sales to
        # inventory after the demographics' filters, 6.4 -> 0.9 s at SF 1)
        inner = [_key_semi_join(b, target, key, _TARGET_ALIAS, extras) for b, key in keyed]
        row_id = exp.column(target.table.row_id, table=outer)
        filters.append(row_id.isin(query=_reduction_rows(branch, target, extras, inner)))
    return exp.and_(*filters) if filters else exp.true()


def _largest(branch: Reduction, target: Scan) -> bool:
    """Whether no table of the branch has more rows than the target's."""
    return all(s.table.row_count <= target.table.row_count for s in branch.scans)


def _correlated_rows(
    branch: Reduction, target: Scan, outer: str | None, extras: Extras
) -> exp.Exists:
    """``EXISTS (SELECT 1 FROM <the branch's other tables> WHERE <edges to the target>)``.

    PostgreSQL pulls it up into a semi-join whose inner side is the branch's own
    join, hashed on the target's columns: TPC-DS q24's store_sales, reduced by
    customer, store and customer_address (joined among themselves by zip), took
    3.0 s in the row-id form (287k probes of store_sales by row id) and 1.1 s so.
    The target's own filters and key semi-joins stay on the outer statement.
    """
    others = [scan for scan in branch.scans if scan is not target]
    aliases = {id(scan): f"r{i}" for i, scan in enumerate(others, 1)}
    aliases[id(target)] = outer or target.table.server_name
    select = _from_joined(exp.select(exp.Literal.number(1)), others, aliases)
    for edge in branch.edges:
        select = select.where(_edge(edge, aliases), copy=False)
    for scan in others:
        for predicate in _filters(scan, extras):
            select = select.where(qualified(predicate, scan, aliases[id(scan)]), copy=False)
    return exp.Exists(this=select)


def _branches(reduction: Reduction, target: Scan) -> list[Reduction]:
    """The reduction split at the target: each connected part of the rest, with the target."""
    inner = [e for e in reduction.edges if e.left is not target and e.right is not target]
    branches: list[Reduction] = []
    placed: set[int] = {id(target)}
    for start in reduction.scans:
        if id(start) in placed:
            continue
        part = reduction.part(start, inner)
        placed |= {id(s) for s in part.scans}
        members = {id(target)} | {id(s) for s in part.scans}
        edges = [e for e in reduction.edges if id(e.left) in members and id(e.right) in members]
        if any(edge_column(e, target) is not None for e in edges):
            branches.append(Reduction([target, *part.scans], edges, reduction.by_exists))
    return branches


def _key_semi_join(
    branch: Reduction, target: Scan, key: str, outer: str | None, extras: Extras
) -> exp.Expr:
    others = [scan for scan in branch.scans if scan is not target]
    if _whole_partner(branch, others, extras):
        return exp.column(key, table=outer).is_(exp.null()).not_()
    aliases = {id(scan): f"r{i}" for i, scan in enumerate(others, 1)}
    partners = [_partner(edge, target, aliases) for edge in branch.edges]
    first = next(p for p in partners if p is not None)
    select = _from_joined(exp.select(first.copy()), others, aliases)
    for edge, partner in zip(branch.edges, partners, strict=True):
        if partner is None:
            select = select.where(_edge(edge, aliases), copy=False)
        elif partner is not first:  # the target's column joins several of them
            select = select.where(exp.EQ(this=first.copy(), expression=partner), copy=False)
    for scan in others:
        for predicate in _filters(scan, extras):
            select = select.where(qualified(predicate, scan, aliases[id(scan)]), copy=False)
    return exp.column(key, table=outer).isin(query=select)


def _whole_partner(branch: Reduction, others: list[Scan], extras: Extras) -> bool:
    """Whether the branch is one partner table, unfiltered, joined on one edge.

    Its semi-join ``c_k IN (SELECT r1.c_k FROM t_y AS r1)`` keeps the rows whose
    key is not NULL and names a row of the whole table: a foreign key's every
    row, in a star schema. The server then hashes the whole table and probes it
    for nothing (TPC-DS q47, q67: store_sales by item and store, 8.3 -> 4.9 ms of
    a 54k-row fetch at SF 0.1), so ``c_k IS NOT NULL`` stands for it. A key
    naming no row of the table (none, after a load) is dropped by the local
    plan's join, which every reduction leaves in place (``plan.Reduction``).
    """
    if len(others) != 1 or len(branch.edges) != 1:
        return False
    return not _filters(others[0], extras)


def edge_column(edge: JoinEdge, scan: Scan) -> str | None:
    """``scan``'s column in ``edge``, if the edge touches it."""
    if edge.left is scan:
        return edge.left_column
    return edge.right_column if edge.right is scan else None


def _partner(edge: JoinEdge, target: Scan, aliases: dict[int, str]) -> exp.Column | None:
    """The other side of a target's edge, as a column of the semi-join's scans."""
    if edge.left is target:
        return exp.column(edge.right_column, table=aliases[id(edge.right)])
    if edge.right is target:
        return exp.column(edge.left_column, table=aliases[id(edge.left)])
    return None


def _reduction_rows(
    reduction: Reduction, target: Scan, extras: Extras, target_filters: list[exp.Expr]
) -> exp.Select:
    """The target's row ids that join with the branch (the target is ``r0``)."""
    aliases = {id(scan): f"r{i}" for i, scan in enumerate(reduction.scans)}
    assert aliases[id(target)] == _TARGET_ALIAS
    select = exp.select(exp.column(target.table.row_id, table=aliases[id(target)]))
    for condition in target_filters:
        select = select.where(condition, copy=False)
    select = _from_joined(select, reduction.scans, aliases)
    for edge in reduction.edges:
        select = select.where(_edge(edge, aliases), copy=False)
    for scan in reduction.scans:
        for predicate in _filters(scan, extras):
            select = select.where(qualified(predicate, scan, aliases[id(scan)]), copy=False)
    return select


def joined_statement(fetch: JoinedFetch, extras: Extras | None = None) -> exp.Select:
    """The one statement that fetches a server join's scans."""
    aliases = {id(scan): joined_alias(i) for i, scan in enumerate(fetch.scans)}
    groups = fetch.groups
    if groups is not None:
        parts: dict[tuple[int, str], exp.Expr] = {
            (id(s), column): exp.column(enc.name, table=aliases[id(s)])
            for s, column, enc in groups.keys
        }
        for s, item in groups.items:
            if item.kind != "SUM":  # the sums follow the block's columns
                assert item.server is not None
                parts[(id(s), groups.local_name(item.key))] = item.server.copy()
        names = [parts[(id(scan), column)] for scan, column, _ in fetch.fetched()]
    else:
        names = [
            exp.column(scan.table.stored_column(enc), table=aliases[id(scan)])
            for scan, _, enc in fetch.fetched()
        ]
    select = _from_joined(exp.select(*names), fetch.scans, aliases)
    for edge in fetch.edges:
        select = select.where(_edge(edge, aliases), copy=False)
    for scan in fetch.scans:  # every scan's filters first, then the semi-joins
        for predicate in _filters(scan, extras or {}):
            select = select.where(qualified(predicate, scan, aliases[id(scan)]), copy=False)
    for scan in fetch.scans:
        if scan.reduction is not None:
            semi = reduction_filter(scan.reduction, scan, aliases[id(scan)], extras)
            select = select.where(semi, copy=False)
    if groups is not None and groups.summed is not None:
        # per (keys, block of the summed scan's ids): its mask, joined rows and word sums
        summed = groups.summed
        assert groups.id_bit is not None
        block, mask, *sums = ashe_columns(
            summed.table.row_id,
            groups.id_bit,
            groups.ashe_words(),
            groups.word_sum,
            alias=aliases[id(summed)],
        )
        select = select.select(block, mask, exp.Count(this=exp.Star()), *sums, copy=False)
        select = select.group_by(block.copy(), copy=False)
    if groups is not None and groups.keys:
        by = [exp.column(enc.name, table=aliases[id(s)]) for s, _, enc in groups.keys]
        select = select.group_by(*by, copy=False)
    if fetch.counted:
        assert fetch.groups is None
        select = _counted(select, names)  # type: ignore[arg-type]
    return select


def joined_alias(index: int) -> str:
    """The name of a server join's ``index``-th table in its statement."""
    return f"j{index}"


def _from_joined(select: exp.Select, scans: Sequence[Scan], aliases: dict[int, str]) -> exp.Select:
    for i, scan in enumerate(scans):
        table = exp.alias_(exp.to_table(scan.table.server_name), aliases[id(scan)], table=True)
        select = select.from_(table) if i == 0 else select.join(table)
    return select


def _edge(edge: JoinEdge, aliases: dict[int, str]) -> exp.Expr:
    left = exp.column(edge.left_column, table=aliases[id(edge.left)])
    right = exp.column(edge.right_column, table=aliases[id(edge.right)])
    return exp.EQ(this=left, expression=right)


# -- aggregates ---------------------------------------------------------------------


def _aggregate_statement(scan: Scan, extras: Extras) -> exp.Select:
    aggregation = scan.aggregation
    assert aggregation is not None
    table = scan.table
    key_columns = [
        exp.column(enc.name)
        for _, enc in aggregation.fetched(table)[: len(aggregation.keys)]
        if enc
    ]
    values: list[exp.Expr] = []
    for _, item in aggregation.server_items():
        if item.server is not None:
            values.append(item.server.copy())
            continue
        argument: exp.Expr = exp.column(item.enc.name) if item.enc else exp.Star()
        values.append(
            {"COUNT": exp.Count, "MIN": exp.Min, "MAX": exp.Max}[item.kind](this=argument)
        )
    if aggregation.id_bit is not None:
        blocks = _ashe_blocks(key_columns, values, aggregation, table).from_(table.server_name)
        return _filtered(blocks, scan, None, extras)
    if aggregation.hom_product is None:
        select = exp.select(*key_columns, *values)
        if key_columns:
            select = select.group_by(*[c.copy() for c in key_columns])
        return _filtered(select.from_(table.server_name), scan, None, extras)
    inner = _pack_level(key_columns, values, table).from_(table.server_name)
    return _packed_sums(_filtered(inner, scan, None, extras), aggregation, table)


def _ashe_blocks(
    key_columns: Sequence[exp.Expr],
    values: Sequence[exp.Expr],
    aggregation: Aggregation,
    table: TableDesign,
) -> exp.Select:
    """ASHE sums per (keys, block of ``BLOCK_ROWS`` row ids), with the ids summed as a mask::

    SELECT c_rf, COUNT(*), c_rid >> 6, BIT_OR(<1 << (c_rid & 63)>), SUM(c_w0), SUM(c_w1)
    FROM t_li WHERE ... GROUP BY c_rf, c_rid >> 6

    Every sum adds at most 64 ciphertexts, so the client recovers it exactly
    mod 2**64 (``veil.ciphers.ashe_sums``); one block's rows of a group share its
    mask, so each row costs the client two PRF calls per run of ids.
    """
    sums = table.sums
    assert sums is not None and aggregation.id_bit is not None
    words = sums.summed_columns(aggregation.ashe_sources())
    block, *summed = ashe_columns(
        table.row_id, aggregation.id_bit, words, aggregation.word_sum, alias=None
    )
    select = exp.select(*key_columns, *values, block, *summed)
    return select.group_by(*[k.copy() for k in key_columns], block.copy())


def ashe_columns(
    row_id: str,
    id_bit: exp.Expr,
    words: Sequence[str],
    word_sum: exp.Expr | None,
    alias: str | None,
) -> list[exp.Expr]:
    """An ASHE group's block of ids, its mask of ids, and the sums of the word columns
    ``words``, over the table named ``alias`` (unqualified: None)."""
    shift = exp.Literal.number(BLOCK_ROWS.bit_length() - 1)
    block = exp.BitwiseRightShift(this=exp.column(row_id, table=alias), expression=shift)
    mask = exp.func("BIT_OR", _qualified_by(id_bit, alias))
    return [block, mask, *[_word_sum(word_sum, exp.column(w, table=alias)) for w in words]]


def _qualified_by(expression: exp.Expr, alias: str | None) -> exp.Expr:
    copied = expression.copy()
    if alias is not None:
        for column in list(copied.find_all(exp.Column)):
            column.set("table", exp.to_identifier(alias))
    return copied


def _word_sum(word_sum: exp.Expr | None, word: exp.Expr) -> exp.Expr:
    """The server's sum of an ASHE word column (wrapping where the backend can)."""
    if word_sum is None:
        return exp.Sum(this=word)
    return word_sum.transform(
        lambda node: (
            word.copy() if isinstance(node, exp.Column) and node.name == ASHE_WORD else node
        )
    )


def id_bit_position(table: TableDesign) -> exp.Expr:
    """``row id & 63``: a row's bit in its block's mask."""
    return exp.BitwiseAnd(
        this=exp.column(table.row_id), expression=exp.Literal.number(BLOCK_ROWS - 1)
    )


def _pack_level(
    key_columns: Sequence[exp.Expr], values: Sequence[exp.Expr], table: TableDesign
) -> exp.Select:
    """Inner level: keys, pack, position mask and partial aggregates per (keys, pack)::

    SELECT c_rf AS k0, CAST(c_slot // 4 AS BIGINT) AS p,
           BIT_OR(CAST(1 AS BIGINT) << CAST(c_slot % 4 AS INT)) AS m, COUNT(*) AS a0
    FROM t_li WHERE ... GROUP BY c_rf, CAST(c_slot // 4 AS BIGINT)
    """
    group = table.hom
    assert group is not None
    slot, rows = exp.column(group.slot_column), exp.Literal.number(group.rows_per_ciphertext)
    pack = exp.cast(exp.IntDiv(this=slot.copy(), expression=rows.copy()), "BIGINT")
    bit = exp.BitwiseLeftShift(
        this=exp.cast(exp.Literal.number(1), "BIGINT"),
        expression=exp.cast(exp.Mod(this=slot.copy(), expression=rows.copy()), "INT"),
    )
    keys = [exp.alias_(k.copy(), f"k{i}") for i, k in enumerate(key_columns)]
    partials = [exp.alias_(v, f"a{i}") for i, v in enumerate(values)]
    select = exp.select(
        *keys, exp.alias_(pack, "p"), exp.alias_(exp.func("BIT_OR", bit), "m"), *partials
    )
    return select.group_by(*[k.copy() for k in key_columns], pack.copy())


def _packed_sums(inner: exp.Select, aggregation: Aggregation, table: TableDesign) -> exp.Select:
    """Outer level (MONOMI §5.3): re-aggregate per (keys, mask, chunk), multiply the packs::

    SELECT g.k0, CAST(SUM(g.a0) AS BIGINT), g.m, hom_sum(h.ct, $1)
    FROM (SELECT *, <chunk> AS c FROM (<inner>) AS w) AS g JOIN t_side AS h ON g.p = h.pack
    GROUP BY g.k0, g.m, g.c

    Full packs of a group share the all-ones mask, so a group gets one
    product for them and one per distinct partial mask, in each chunk of
    ``2^summand_bits`` packs: no product multiplies more packs than the
    slots' headroom allows (``veil.ciphers.hom_group``), and the client adds
    the chunks' sums.
    """
    group = table.hom
    assert group is not None and aggregation.hom_product is not None
    keys = [exp.column(f"k{i}", table=_INNER) for i in range(len(aggregation.keys))]
    values: list[exp.Expr] = []
    for j, (_, item) in enumerate(aggregation.server_items()):
        partial = exp.column(f"a{j}", table=_INNER)
        if item.kind == "COUNT":
            values.append(exp.cast(exp.Sum(this=partial), "BIGINT"))
        else:
            values.append(exp.Min(this=partial) if item.kind == "MIN" else exp.Max(this=partial))
    mask = exp.column("m", table=_INNER)
    select = exp.select(*keys, *values, mask, aggregation.hom_product.copy())
    side = exp.alias_(exp.to_table(group.server_name), _SIDE, table=True)
    on = exp.EQ(
        this=exp.column("p", table=_INNER), expression=exp.column(HOM_PACK_COLUMN, table=_SIDE)
    )
    chunked = _chunked(inner, len(aggregation.keys), 2**group.summand_bits)
    select = select.from_(chunked.subquery(_INNER)).join(side, on=on)
    chunk = exp.column("c", table=_INNER)
    return select.group_by(*[k.copy() for k in keys], mask.copy(), chunk)


def _chunked(inner: exp.Select, keys: int, packs: int) -> exp.Select:
    """``inner`` with a chunk number ``c``: 0 while a (keys, mask) has at most ``packs`` packs.

    Only a (keys, mask) over more packs than the headroom allows is split,
    by pack number, so small groups and selective filters (TPC-H Q6) still
    get one product per mask.
    """
    partition = [exp.column(f"k{i}") for i in range(keys)] + [exp.column("m")]
    count = exp.Window(this=exp.Count(this=exp.Star()), partition_by=partition)
    limit = exp.Literal.number(packs)
    split = exp.IntDiv(this=exp.column("p"), expression=limit.copy())
    chunk = exp.Case(
        ifs=[exp.If(this=exp.GT(this=count, expression=limit), true=split)],
        default=exp.Literal.number(0),
    )
    return exp.select(exp.Star(), exp.alias_(chunk, "c")).from_(inner.subquery("w"))


def hom_ciphertexts() -> exp.Column:
    """The column of HOM pack ciphertexts, as the outer level names it."""
    return exp.column(HOM_CT_COLUMN, table=_SIDE)


# -- DML ----------------------------------------------------------------------------


def delete_rows_statement(table: TableDesign, row_ids: Sequence[object]) -> exp.Delete:
    """Delete the rows with these (public) row ids; returns the ids of the rows it deleted.

    Fewer ids back than were asked for means another client rewrote or
    deleted some of these rows first (``veil.session.dml`` then writes nothing).
    """
    condition = exp.column(table.row_id).isin(*[param(r) for r in row_ids])
    deleted = exp.delete(exp.to_table(table.server_name)).where(condition)
    deleted.set("returning", exp.Returning(expressions=[exp.column(table.row_id)]))
    return deleted


def flip_row_ids_statement(table: TableDesign, row_ids: Sequence[object]) -> exp.Update:
    """Map these rows' ids to ``-id - 1`` (run twice: back), returning the ids it changed.

    A write that leaves rows as they were, to lock them in the transaction
    (``veil.session.references``): the ids never collide (live ones are >= 0), and
    the change is a real write, which DuckDB's conflict check sees.
    """
    row_id = exp.column(table.row_id)
    condition = row_id.isin(*[param(r) for r in row_ids])
    flipped = exp.Sub(this=exp.Neg(this=row_id.copy()), expression=exp.Literal.number(1))
    update = exp.update(exp.to_table(table.server_name), {table.row_id: flipped}).where(condition)
    update.set("returning", exp.Returning(expressions=[row_id.copy()]))
    return update


# -- blocks of rows (``veil.ciphers.blocks``) -------------------------------------------

BLOCK_COLUMNS = ("c", "first_id", "row_count", "payload")


def block_index_statement(table: TableDesign, column: int) -> exp.Select:
    """Where the blocks of one BLOCKS column (by number) start, and how many rows each holds."""
    c, first, count, _ = BLOCK_COLUMNS
    return (
        exp.select(exp.column(first), exp.column(count))
        .from_(exp.to_table(table.blocks_table))
        .where(exp.column(c).eq(param(column)))
    )


def block_payloads_statement(
    table: TableDesign, columns: Sequence[int], starts: Sequence[int]
) -> exp.Select:
    """The sealed blocks of ``columns`` (by number) that start at ``starts`` (public row ids)."""
    c, first, count, payload = BLOCK_COLUMNS
    wanted = exp.column(first).isin(query=exp.select(exp.Unnest(expressions=[param(list(starts))])))
    return (
        exp.select(*[exp.column(n) for n in (c, first, count, payload)])
        .from_(exp.to_table(table.blocks_table))
        .where(exp.and_(exp.column(c).isin(*[param(n) for n in columns]), wanted))
    )


def allocate_ids_statement(counter_name: str, count: int) -> exp.Update:
    """Take ``count`` values from a counter table (row ids, an identity column's), atomically;
    returns the first.

    ``count`` (how many rows a statement writes, which the server sees anyway)
    is a literal: DuckDB cannot prepare a parameter in RETURNING.
    """
    counter, taken = exp.column(ID_COUNTER_COLUMN), exp.Literal.number(int(count))
    update = exp.update(
        exp.to_table(counter_name),
        {ID_COUNTER_COLUMN: exp.Add(this=counter.copy(), expression=taken.copy())},
    )
    first = exp.Sub(this=counter.copy(), expression=taken)
    update.set("returning", exp.Returning(expressions=[first]))
    return update


def layer_states_statement(table: TableDesign) -> exp.Select:
    """The layers table's rows (``c``, ``peeled``), read without locking."""
    columns = [exp.column(LAYER_COLUMN), exp.column(LAYER_PEELED), exp.column(LAYER_KEY)]
    return exp.select(*columns).from_(exp.to_table(table.layers_table))


def lock_layer_statements(
    table: TableDesign, enc: Encryption | None = None
) -> tuple[exp.Update, exp.Update]:
    """Lock the layers row(s) of ``enc`` (all: None) in this transaction: two UPDATEs, one
    flipping ``peeled`` and one flipping it back, which returns the rows' state.

    PostgreSQL holds the rows' locks until commit and DuckDB aborts the second of two
    transactions that change one value, so a peel and a write (or two peels) of one
    column never interleave. The flip is for DuckDB: an UPDATE that leaves a value as
    stored (``SET peeled = peeled``), on a column not updated since the last checkpoint,
    records no write and conflicts with nothing. A write and a peel that "locked" so both
    committed: the write's rows, appended under the RND layer unseen by the peel's
    snapshot, kept a layer the design no longer had, and read back as garbage.
    """
    flip_back = _flip_peeled(table, enc)
    returned = [exp.column(LAYER_COLUMN), exp.column(LAYER_PEELED), exp.column(LAYER_KEY)]
    flip_back.set("returning", exp.Returning(expressions=returned))
    return _flip_peeled(table, enc), flip_back


def _flip_peeled(table: TableDesign, enc: Encryption | None) -> exp.Update:
    """``peeled = NOT peeled`` in the layers row(s) of ``enc`` (all: None; NULL stays NULL)."""
    update = exp.update(
        exp.to_table(table.layers_table), {LAYER_PEELED: exp.not_(exp.column(LAYER_PEELED))}
    )
    if enc is not None:
        update.set(
            "where",
            exp.Where(this=exp.EQ(this=exp.column(LAYER_COLUMN), expression=param(enc.name))),
        )
    return update


def peel_statement(table: TableDesign, layers: list[tuple[Encryption, str, bytes]]) -> exp.Update:
    """Strip the RND layer of each ``(encryption, form, layer key)`` in one UPDATE.

    Each value is XORed with its row's keystream; one statement rewrites the
    rows once, whatever number of layers come off.
    """
    return exp.update(exp.to_table(table.server_name), dict(_layer_xors(table, layers)))


def peeled_rows_statement(
    table: TableDesign, layers: list[tuple[Encryption, str, bytes]], columns: list[str]
) -> exp.Select:
    """Every row of the table, its ``columns`` in order, with the layers off (the copy
    ``Backend.replace_rows`` swaps in where that beats an UPDATE of every row)."""
    xors = _layer_xors(table, layers)
    return exp.select(
        *[exp.alias_(xors[c], c) if c in xors else exp.column(c) for c in columns]
    ).from_(exp.to_table(table.server_name))


def _layer_xors(
    table: TableDesign, layers: list[tuple[Encryption, str, bytes]]
) -> dict[str, exp.Expr]:
    """Each peeled column's value without its layer: XORed with its row's keystream."""
    return {
        enc.name: exp.Anonymous(
            this=LAYER_XOR[form],
            expressions=[param(key), exp.column(table.row_id), exp.column(enc.name)],
        )
        for enc, form, key in layers
    }


def mark_peeled_statement(table: TableDesign, enc: Encryption) -> exp.Update:
    where = exp.EQ(this=exp.column(LAYER_COLUMN), expression=param(enc.name))
    update = exp.update(exp.to_table(table.layers_table), {LAYER_PEELED: exp.true()})
    update.set("where", exp.Where(this=where))
    return update


def set_aside_index_statement(table: TableDesign, index: str, create: str) -> exp.Insert:
    """Record that the index ``index`` (built by ``create``) is dropped for a rewrite."""
    values = exp.values([(param(SET_ASIDE_INDEX + index), exp.null(), param(create))])
    return exp.insert(values, table.layers_table, columns=[LAYER_COLUMN, LAYER_PEELED, LAYER_KEY])


def index_rebuilt_statement(table: TableDesign, index: str) -> exp.Delete:
    where = exp.EQ(this=exp.column(LAYER_COLUMN), expression=param(SET_ASIDE_INDEX + index))
    return exp.delete(exp.to_table(table.layers_table), where=where)


def rekey_statement(table: TableDesign, enc: Encryption, token: bytes) -> exp.Update:
    """Re-key a JOIN-ADJ column by ``token``, once per distinct ciphertext::

    UPDATE t SET c = m.new FROM (SELECT old, veil_joinadj_rekey($1, old) AS new
      FROM (SELECT DISTINCT c AS old FROM t WHERE c IS NOT NULL) AS d) AS m
     WHERE t.c = m.old
    """
    column = exp.column(enc.name, table=table.server_name)
    update = exp.update(exp.to_table(table.server_name), {enc.name: exp.column("new", table="m")})
    update.set("from_", exp.From(this=_rekey_mapping(table, enc, token)))
    update.set(
        "where", exp.Where(this=exp.EQ(this=column, expression=exp.column("old", table="m")))
    )
    return update


def rekeyed_rows_statement(
    table: TableDesign, enc: Encryption, token: bytes, columns: list[str]
) -> exp.Select:
    """Every row of the table, its ``columns`` in order, with ``enc`` re-keyed by ``token``
    (the copy ``Backend.replace_rows`` swaps in)::

    SELECT t.a, m.new AS c, ... FROM t LEFT JOIN (mapping) AS m ON t.c = m.old
    """
    source = table.server_name
    picked = [
        exp.alias_(exp.column("new", table="m"), c)
        if c == enc.name
        else exp.column(c, table=source)
        for c in columns
    ]
    on = exp.EQ(this=exp.column(enc.name, table=source), expression=exp.column("old", table="m"))
    return (
        exp.select(*picked)
        .from_(exp.to_table(source))
        .join(_rekey_mapping(table, enc, token), on=on, join_type="left")
    )


def _rekey_mapping(table: TableDesign, enc: Encryption, token: bytes) -> exp.Expr:
    """``(old, new)`` per distinct non-NULL ciphertext of ``enc``, as the subquery ``m``."""
    distinct = (
        exp.select(exp.alias_(exp.column(enc.name), "old"))
        .distinct()
        .from_(exp.to_table(table.server_name))
        .where(exp.Not(this=exp.Is(this=exp.column(enc.name), expression=exp.null())))
    )
    rekeyed = exp.Anonymous(this=JOINADJ_REKEY, expressions=[param(token), exp.column("old")])
    mapping = exp.select(exp.column("old"), exp.alias_(rekeyed, "new")).from_(
        exp.alias_(exp.Subquery(this=distinct), "d")
    )
    return exp.alias_(exp.Subquery(this=mapping), "m")


def mark_rekeyed_statement(table: TableDesign, enc: Encryption, key_id: str) -> exp.Update:
    where = exp.EQ(this=exp.column(LAYER_COLUMN), expression=param(enc.name))
    update = exp.update(exp.to_table(table.layers_table), {LAYER_KEY: param(key_id)})
    update.set("where", exp.Where(this=where))
    return update
