"""The greedy designer analyses each query once: the workload's needs merged from the
queries' own (``veil.designer.greedy.merged_needs``) are those of the whole workload."""

from __future__ import annotations

from veil.designer.greedy import merged_needs
from veil.sql.workload import analyse_workload

SCHEMA = {
    "sales": {"id": "BIGINT", "day": "DATE", "item": "BIGINT", "price": "DECIMAL(7,2)"},
    "items": {"id": "BIGINT", "name": "VARCHAR", "cost": "DECIMAL(7,2)"},
}
WORKLOAD = [
    "SELECT sum(price) FROM sales WHERE day BETWEEN DATE '2020-01-01' AND DATE '2020-02-01'",
    "SELECT i.name, sum(s.price * 2) FROM sales s JOIN items i ON s.item = i.id "
    "WHERE i.cost > 3 GROUP BY i.name",
    "SELECT item, count(*) FROM sales WHERE day < DATE '2021-01-01' GROUP BY item",
    "SELECT name FROM items WHERE name LIKE '%x%' AND cost < price_missing",  # not qualified
    "SELECT id FROM items WHERE cost BETWEEN 1 AND 2 ORDER BY id",
]


def test_merged_needs_equal_the_whole_workloads() -> None:
    whole = analyse_workload(WORKLOAD, SCHEMA)
    merged = merged_needs([analyse_workload([sql], SCHEMA) for sql in WORKLOAD])
    assert merged == whole
    assert merged.range_filters[("sales", "day")] == 2  # counts add up across queries
