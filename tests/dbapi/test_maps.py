"""MAP values reach Python as DuckDB's Python API gives them, at any depth: a dict, or,
when the keys are lists, structs or maps (no dict can hold them), ``{'key': [...],
'value': [...]}``, never a raw TypeError (issue 40)."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from veil.dbapi import Connection
from veil.exec.rows import column_values
from veil.session.session import Session

MAPS = """
SELECT i,
    CASE WHEN i % 3 = 0 THEN NULL ELSE MAP {[i]: i * 2, [i, 1]: 3} END AS list_keys,
    CASE WHEN i % 2 = 0 THEN NULL ELSE [MAP {[i]: 1}, NULL] END AS in_a_list,
    CASE WHEN i = 1 THEN NULL ELSE {'s': MAP {[i]: 1}, 'x': i} END AS in_a_struct,
    MAP {i: MAP {[i]: 2}} AS in_a_map,
    MAP {MAP {i: 2}: 3} AS map_keys,
    MAP {{'a': i}: [MAP {[1]: 2}]} AS struct_keys,
    MAP([]::INTEGER[][], []::INTEGER[]) AS empty,
    MAP {i: 2} AS plain
FROM range(7) t(i)
"""


def rows(table: pa.Table) -> list[tuple[object, ...]]:
    return list(zip(*(column_values(c) for c in table.columns), strict=True))


@pytest.mark.unit
def test_maps_as_duckdb_gives_them() -> None:
    with duckdb.connect() as plain:
        table = plain.sql(MAPS).to_arrow_table()
        expected = plain.execute(MAPS).fetchall()
    assert rows(table) == expected
    assert rows(table.slice(2, 4)) == expected[2:6]  # a slice's children are not sliced
    assert rows(pa.concat_tables([table.slice(0, 3), table.slice(3)])) == expected


@pytest.mark.integration
def test_a_map_with_list_keys_through_the_dbapi(session: Session) -> None:
    sql = "SELECT n_nationkey, MAP {[n_regionkey]: n_name} AS m FROM nation ORDER BY 1 LIMIT 3"
    with Connection(session) as con:
        got = con.cursor().execute(sql).fetchall()
        con._session = None  # the suite's session stays open for other tests
    assert got[0] == (0, {"key": [[0]], "value": ["ALGERIA"]})
    assert len(got) == 3
