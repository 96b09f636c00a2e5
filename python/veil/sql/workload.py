"""What a workload of queries asks of each column (the greedy designer's input).

For every query the analysis records which base columns would let a part of
the query run on the server under which scheme (a simple form of MONOMI's
EncSet, §6.2):

- DET: equality with a constant, IN lists, GROUP BY keys, COUNT(DISTINCT),
  and equi-joins (the two sides become one key group);
- OPE: ranges against constants, BETWEEN, ORDER BY, MIN and MAX, and order
  comparisons between two columns of one table (they share an OPE key), or
  of a column with itself (a correlated subquery's ``q.id < p.id``);
- SEARCH: LIKE patterns that bound whole words (``'% special requests %'``);
- DET / OPE of per-row expressions compared with constants
  (``substring(c_phone, 1, 2) IN (...)``, MONOMI §5.1), and DET of the
  boolean of a LIKE filter (``o_comment LIKE '%special%requests%'``), which
  the server then tests exactly (its column is not counted as read);
- HOM: SUM and AVG arguments over one row of one table (a column or a
  per-row expression such as ``l_extendedprice * (1 - l_discount)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from veil.sql.columns import (
    BaseColumn,
    base_columns,
    is_constant,
    like_source,
    order_source,
    row_expression,
)
from veil.sql.parse import parse_statement, qualify_query
from veil.sql.passes.prune_exists_projections import prune_exists
from veil.sql.prefilter_like import like_pattern_words

ColumnRef = tuple[str, str]  # (table, column)

_RANGES = (exp.GT, exp.GTE, exp.LT, exp.LTE)


@dataclass
class WorkloadNeeds:
    det: set[ColumnRef] = field(default_factory=set)
    ope: set[ColumnRef] = field(default_factory=set)
    search: set[ColumnRef] = field(default_factory=set)
    joins: set[tuple[ColumnRef, ColumnRef]] = field(default_factory=set)
    # columns of one table compared by order with each other (l_commitdate < l_receiptdate)
    ope_pairs: set[tuple[ColumnRef, ColumnRef]] = field(default_factory=set)
    # SUM/AVG arguments over one row of one table: (table, unqualified SQL)
    sums: set[tuple[str, str]] = field(default_factory=set)
    # per-row expressions compared with constants (MONOMI §5.1): (table, unqualified SQL)
    det_rows: set[tuple[str, str]] = field(default_factory=set)
    ope_rows: set[tuple[str, str]] = field(default_factory=set)
    # columns ordered against constants or themselves (not only against another column,
    # which needs a shared OPE key: the onion runtime cannot use a per-column one there)
    ope_alone: set[ColumnRef] = field(default_factory=set)
    # how many range filters against constants (``<``, ``BETWEEN``, ...) each column has
    range_filters: dict[ColumnRef, int] = field(default_factory=dict)
    # GROUP BY lists of blocks reading one table, without joins: (table, sorted columns)
    group_keys: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)
    # every column some query reads, anywhere but inside SUM/AVG arguments over one
    # row of one table; those are in ``summed_reads`` with the expression they feed
    read: set[ColumnRef] = field(default_factory=set)
    summed_reads: set[tuple[ColumnRef, str]] = field(default_factory=set)
    queries: int = 0


def analyse_workload(queries: list[str], schema: dict[str, dict[str, str]]) -> WorkloadNeeds:
    needs = WorkloadNeeds()
    for sql in queries:
        tree = qualify_query(parse_statement(sql), schema)
        if tree is not None:
            prune_exists(tree)  # EXISTS (SELECT * ...) reads no column through its *
            _analyse(tree, set(schema), needs)
            needs.queries += 1
    return needs


def analyse_tree(tree: exp.Expr, schema: dict[str, dict[str, str]]) -> WorkloadNeeds:
    """What one parsed query asks (``tree`` is not changed)."""
    needs = WorkloadNeeds()
    qualified = qualify_query(tree, schema)
    if qualified is not None:
        prune_exists(qualified)
        _analyse(qualified, set(schema), needs)
        needs.queries = 1
    return needs


def _analyse(tree: exp.Expr, tables: set[str], needs: WorkloadNeeds) -> None:
    resolved = base_columns(traverse_scope(tree), tables)

    def ref(node: exp.Expr | None) -> ColumnRef | None:
        found: BaseColumn | None = resolved.get(id(node)) if isinstance(node, exp.Column) else None
        return (found.table, found.column) if found else None

    through_like: set[int] = set()  # columns a precomputed LIKE reads for the server
    through_sum: set[int] = set()  # columns inside a one-row SUM/AVG argument
    through_order: set[int] = set()  # columns a precomputed comparison reads for the server
    for node in tree.walk():
        _note_row_expression(node, resolved, needs)
        if isinstance(node, exp.EQ | exp.NEQ):
            _note_equality(ref(node.this), ref(node.expression), node, needs)
            for this, other in ((node.this, node.expression), (node.expression, node.this)):
                if isinstance(other, exp.Subquery) and ref(this):
                    # a column against a scalar subquery's value: compared on the server
                    # as the IN-subquery's keys are (one DET scope for both)
                    needs.det.add(ref(this))  # type: ignore[arg-type]
                    _note_subquery(ref(this), other, ref, needs)
        elif isinstance(node, exp.In) and ref(node.this):
            needs.det.add(ref(node.this))  # type: ignore[arg-type]
            _note_subquery(ref(node.this), node.args.get("query"), ref, needs)
        elif isinstance(node, _RANGES):
            _note_range(ref(node.this), node.expression, needs)
            _note_range(ref(node.expression), node.this, needs)
            ordered = order_source(node, resolved) if _in_condition(node) else None
            if ordered is not None:  # precomputed: the server tests one small column
                needs.det_rows.add(ordered)
                through_order.update(id(c) for c in node.find_all(exp.Column))
            else:
                _note_column_order(ref(node.this), ref(node.expression), needs)
        elif isinstance(node, exp.Between) and ref(node.this):
            needs.ope.add(ref(node.this))  # type: ignore[arg-type]
            needs.ope_alone.add(ref(node.this))  # type: ignore[arg-type]
            _count_range(ref(node.this), needs)  # type: ignore[arg-type]
        elif isinstance(node, exp.Group):
            keys = list(map(ref, node.expressions))
            needs.det.update(r for r in keys if r)
            for levels in node.expressions:  # a ROLLUP's columns: the server groups by them
                if isinstance(levels, exp.Rollup | exp.Cube):
                    needs.det.update(r for r in map(ref, levels.expressions) if r)
            if keys and all(keys) and len({r[0] for r in keys if r}) == 1 and _one_table(node):
                needs.group_keys.add((keys[0][0], tuple(sorted({r[1] for r in keys if r}))))  # type: ignore[index]
        elif isinstance(node, exp.Ordered | exp.Min | exp.Max) and ref(node.this):
            needs.ope.add(ref(node.this))  # type: ignore[arg-type]
            needs.ope_alone.add(ref(node.this))  # type: ignore[arg-type]
        elif isinstance(node, exp.Count) and isinstance(node.this, exp.Distinct):
            needs.det.update(r for r in map(ref, node.this.expressions) if r)
        elif isinstance(node, exp.Like | exp.ILike) and ref(node.this):
            if _searchable(node):
                needs.search.add(ref(node.this))  # type: ignore[arg-type]
            precomputed = like_source(node, resolved) if _in_condition(node) else None
            if precomputed is not None:
                needs.det_rows.add(precomputed)
                through_like.update(id(c) for c in node.find_all(exp.Column))
        elif isinstance(node, exp.Sum | exp.Avg):
            summed = row_expression(node.this, resolved)
            if summed is not None:
                needs.sums.add(summed)
                for column in node.this.find_all(exp.Column):
                    found = resolved.get(id(column))
                    if found is not None:
                        needs.summed_reads.add(((found.table, found.column), summed[1]))
                        through_sum.add(id(column))
    skipped = through_like | through_sum | through_order
    needs.read.update((c.table, c.column) for i, c in resolved.items() if i not in skipped)


def _one_table(group: exp.Group) -> bool:
    """Does the GROUP BY's block read a single table (no joins, no subquery in FROM)?"""
    select = group.parent
    if not isinstance(select, exp.Select):
        return False
    source = select.args.get("from_")
    return (
        source is not None and isinstance(source.this, exp.Table) and not select.args.get("joins")
    )


def _in_condition(node: exp.Expr) -> bool:
    """Is ``node`` a filter of WHERE or of a join's ON (under AND / OR / NOT only)?"""
    parent = node.parent
    while isinstance(parent, exp.And | exp.Or | exp.Not | exp.Paren):
        parent = parent.parent
    return isinstance(parent, exp.Where | exp.Join)


def _searchable(like: exp.Like | exp.ILike) -> bool:
    """Can SEARCH pre-filter this LIKE: a plain pattern bounding whole words, not negated?

    ``'%special%requests%'`` bounds none ("special" may end "especial"), so a
    SEARCH encryption would never be read: it is not stored.
    """
    pattern = like.expression
    if like.args.get("negate") or isinstance(like.parent, exp.Not | exp.Escape):
        return False
    return (
        isinstance(pattern, exp.Literal)
        and pattern.is_string
        and bool(like_pattern_words(pattern.this))
    )


def _note_row_expression(
    node: exp.Expr, resolved: dict[int, BaseColumn], needs: WorkloadNeeds
) -> None:
    """``substring(c_phone, 1, 2) IN (...)``: precompute the expression under DET (or OPE)."""
    if isinstance(node, exp.EQ | exp.NEQ | exp.In):
        target, constants = (
            needs.det_rows,
            [node.expression] if not isinstance(node, exp.In) else node.expressions,
        )
    elif isinstance(node, _RANGES):
        target, constants = needs.ope_rows, [node.expression]
    elif isinstance(node, exp.Between):
        target, constants = needs.ope_rows, [node.args["low"], node.args["high"]]
    else:
        return
    subject = node.this
    if isinstance(subject, exp.Column) or is_constant(subject) or not constants:
        return
    found = row_expression(subject, resolved)
    if found is not None and all(is_constant(c) for c in constants):
        target.add(found)


def _note_equality(
    left: ColumnRef | None, right: ColumnRef | None, node: exp.Expr, needs: WorkloadNeeds
) -> None:
    if left and right:
        needs.det.update((left, right))
        if left != right:
            needs.joins.add((left, right))
    elif left and is_constant(node.expression):
        needs.det.add(left)
    elif right and is_constant(node.this):
        needs.det.add(right)


def _note_subquery(
    column: ColumnRef | None, query: exp.Expr | None, ref: object, needs: WorkloadNeeds
) -> None:
    """``column`` against the one column a subquery returns (IN, or a scalar ``=``)."""
    select = query.this if isinstance(query, exp.Subquery) else query
    if column is None or not isinstance(select, exp.Select) or len(select.expressions) != 1:
        return
    projected = select.expressions[0]
    inner = projected.this if isinstance(projected, exp.Alias) else projected
    other = ref(inner)  # type: ignore[operator]
    if other:
        needs.det.add(other)
        needs.joins.add((column, other))


def _note_column_order(
    left: ColumnRef | None, right: ColumnRef | None, needs: WorkloadNeeds
) -> None:
    if left and right and left == right:  # a column against itself in a subquery: one key
        needs.ope.add(left)
        needs.ope_alone.add(left)
    elif left and right and left[0] == right[0]:
        needs.ope.update((left, right))
        needs.ope_pairs.add((left, right))


def _note_range(column: ColumnRef | None, other: exp.Expr, needs: WorkloadNeeds) -> None:
    if column and is_constant(other):
        needs.ope.add(column)
        needs.ope_alone.add(column)
        _count_range(column, needs)


def _count_range(column: ColumnRef, needs: WorkloadNeeds) -> None:
    needs.range_filters[column] = needs.range_filters.get(column, 0) + 1
