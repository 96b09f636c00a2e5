"""Which foreign key of a fact table to load its rows in the order of: its date key.

TPC-DS filters its fact tables through a date dimension (``d_year = 2000``,
``d_date BETWEEN ...``), joined on a surrogate key (``cs_sold_date_sk``). The
key is DET for the join, whose ciphertexts follow no order, so the server
reads the whole fact table however few dates the filter keeps; plaintext
DuckDB reads a few of its row groups, as the facts were generated in date
order. Given the key under OPE as well and the rows loaded in its order
(``TableDesign.sort_by``, ``veil.load.clusters``), the planner sends the range
of the dimension's kept keys as an OPE range the server skips blocks by
(``veil.sql.passes.plan_key_ranges``).

Per table, the chosen key is a column equi-joined with a shared dimension's
key (a column joined with columns of more tables than it is, as a primary key
is with the foreign keys of several facts: TPC-DS's d_date_sk; none of TPC-H's
keys, each joined one to one), of the dimension the workload filters by
ranges most, joined in the most queries that filter that dimension; the
table's other keys to that dimension (a ship date beside the sold date) get OPE
too, as their zones are narrow in that order as well. They are added to
the workload's OPE needs (within the policy: a column whose policy forbids
OPE is never chosen) and ranked as a range-filtered column by those queries'
count, so it orders the table unless the table's own columns are
range-filtered more. What the server learns: the key's order, as any OPE
column's (docs/security.md).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from veil.design.model import OPE
from veil.design.policy import Policy
from veil.encoding import SqlType
from veil.sql.workload import ColumnRef, WorkloadNeeds


def ordered_keys(
    per_query: list[WorkloadNeeds],
    schema: dict[str, dict[str, str]],
    needs: WorkloadNeeds,
    policy: Policy,
) -> dict[ColumnRef, int]:
    """Per table at most one key column, with the count of queries it would serve.

    ``per_query``: each query's own needs (``analyse_workload`` of it alone), ``needs``
    the workload's, within the policy.
    """
    fan_in = _fan_in(needs.joins)
    dimension_ranges = Counter[str]()
    for (table, _), count in needs.range_filters.items():
        dimension_ranges[table] += count
    served = Counter[tuple[ColumnRef, str]]()  # (key, dimension) -> queries
    for query in per_query:
        filtered = _filtered_tables(query)
        for left, right in query.joins:
            for key, partner in ((left, right), (right, left)):
                if partner[0] in filtered and _is_foreign(key, partner, fan_in):
                    served[(key, partner[0])] += 1
    return _best_per_table(served, dimension_ranges, schema, policy)


def _fan_in(joins: set[tuple[ColumnRef, ColumnRef]]) -> dict[ColumnRef, int]:
    """How many other tables each column is equi-joined with."""
    partners: dict[ColumnRef, set[str]] = defaultdict(set)
    for left, right in joins:
        if left[0] != right[0]:
            partners[left].add(right[0])
            partners[right].add(left[0])
    return {ref: len(tables) for ref, tables in partners.items()}


def _is_foreign(key: ColumnRef, partner: ColumnRef, fan_in: dict[ColumnRef, int]) -> bool:
    return key[0] != partner[0] and fan_in.get(partner, 0) > fan_in.get(key, 0)


def _filtered_tables(query: WorkloadNeeds) -> set[str]:
    """Tables the query filters on a column other than its join keys (ranges, equalities)."""
    joined = {ref for pair in query.joins for ref in pair}
    tables = {table for table, _ in query.range_filters}
    tables |= {table for table, column in query.det if (table, column) not in joined}
    return tables


def _best_per_table(
    served: Counter[tuple[ColumnRef, str]],
    dimension_ranges: Counter[str],
    schema: dict[str, dict[str, str]],
    policy: Policy,
) -> dict[ColumnRef, int]:
    """Per table, its keys to its most range-filtered dimension: the most used with its
    count of queries, the others (TPC-DS's ship dates beside the sold date) with 0."""
    chosen: dict[str, tuple[tuple[int, int, str], str]] = {}
    keys: dict[tuple[str, str], list[ColumnRef]] = defaultdict(list)
    for (key, dimension), count in served.items():
        table, column = key
        if not dimension_ranges[dimension] or not policy.allows(table, column, OPE):
            continue
        if not SqlType(schema[table][column]).is_integral:
            continue
        keys[(table, dimension)].append(key)
        rank = (dimension_ranges[dimension], count, column)
        if table not in chosen or rank > chosen[table][0]:
            chosen[table] = (rank, dimension)
    found: dict[ColumnRef, int] = {}
    for table, ((_, count, column), dimension) in chosen.items():
        found.update(dict.fromkeys(keys[(table, dimension)], 0))
        found[(table, column)] = count
    return found


def with_ordered_keys(needs: WorkloadNeeds, keys: dict[ColumnRef, int]) -> WorkloadNeeds:
    """``needs`` with each key under OPE, ranked among its table's range-filtered columns."""
    for ref, count in keys.items():
        needs.ope.add(ref)
        needs.ope_alone.add(ref)
        if count:
            needs.range_filters[ref] = max(needs.range_filters.get(ref, 0), count)
    return needs
