"""The fuzzer's data: TPC-H SF 0.01 plus an "edge" schema of awkward values.

The edge tables (``fz_*``) hold what TPC-H lacks: NULL-heavy columns, negative
numbers, unicode and empty strings, dates at the ends of DuckDB's DATE range,
every type Veil encodes, and an empty table. Both schemas are written as
Parquet into one source directory, loaded once through Veil and once into a
plaintext DuckDB.

``Catalog`` describes the tables for the generator: column types, unique keys,
foreign keys, and a deterministic sample of each column's values (literals
drawn from the data select rows, literals drawn at random mostly do not).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from veil_dev.tpch.gen import generate

TPCH_SF = 0.01

# Kinds the generator reasons about (DuckDB types map onto them).
INT, BIGINT, DECIMAL, DOUBLE, VARCHAR, DATE, BOOL = (
    "int",
    "bigint",
    "decimal",
    "double",
    "varchar",
    "date",
    "bool",
)
NUMERIC = (INT, BIGINT, DECIMAL, DOUBLE)

EDGE_SQL = {
    "fz_people": """
SELECT
    i AS pid,
    CASE WHEN i % 9 = 0 THEN NULL
         ELSE ['Zoë', 'Ōsaka Bob', 'ann', 'ANN', '', 'Łukasz', '李小龍', 'O''Brien', 'x_y%z',
               'Émile Zola', 'müller', 'Müller'][i % 12 + 1] END AS name,
    CASE WHEN i % 4 = 0 THEN NULL ELSE ['Paris', 'Tōkyō', 'Zürich', 'paris', 'Nairobi'][i % 5 + 1] END AS city,
    CASE WHEN i % 7 = 0 THEN NULL
         ELSE [DATE '0001-01-01', DATE '9999-12-31', DATE '1970-01-01', DATE '1969-12-31',
               DATE '2000-02-29', DATE '1999-12-31', DATE '2024-06-15'][i % 7 + 1] END AS born,
    CASE WHEN i % 5 = 0 THEN NULL ELSE ((i * 37) % 41 - 20) * 0.25 END::DOUBLE AS score,
    CASE WHEN i % 6 = 0 THEN NULL ELSE ((i * 7919) % 20001 - 10000) / 100 END::DECIMAL(18,4) AS balance,
    CASE WHEN i % 3 = 0 THEN NULL ELSE i % 4 - 2 END::INTEGER AS tiny
FROM range(1, 61) t(i)
""",
    "fz_items": """
SELECT
    i AS id,
    CASE WHEN i % 3 = 0 THEN NULL ELSE i % 6 END::INTEGER AS grp,
    CASE WHEN i % 5 = 0 THEN NULL
         WHEN i % 97 = 1 THEN -9223372036854775807
         WHEN i % 89 = 2 THEN 9223372036854775807
         ELSE (i * 1000003) % 2000000 - 1000000 END::BIGINT AS big,
    CASE WHEN i % 4 = 0 THEN NULL ELSE ((i * 7919) % 40001 - 20000) / 100 END::DECIMAL(12,2) AS amount,
    CASE WHEN i % 6 = 0 THEN NULL WHEN i % 50 = 7 THEN -0.0
         ELSE ((i * 131) % 801 - 400) * 0.25 END::DOUBLE AS ratio,
    CASE WHEN i % 7 = 0 THEN NULL
         ELSE ['héllo wörld', 'special requests', 'ναι όχι', '', 'emoji 🎉 party', ' leading',
               'trailing ', 'O''Reilly', '50% off', 'a_b', 'UPPER lower', 'special pending requests',
               '日本語 テキスト'][i % 13 + 1] END AS label,
    CASE WHEN i % 8 = 0 THEN NULL
         WHEN i % 61 = 3 THEN DATE '0001-01-01'
         WHEN i % 67 = 4 THEN DATE '9999-12-31'
         ELSE DATE '1970-01-01' + INTERVAL (((i * 97) % 30000) - 15000) DAY END::DATE AS day,
    CASE WHEN i % 9 = 0 THEN NULL ELSE i % 3 = 0 END AS flag,
    CASE WHEN i % 2 = 0 THEN NULL
         ELSE ['quickly final deposits', 'special requests sleep', 'ironic packages wake',
               'blithely regular accounts', 'furiously special ideas haggle requests',
               'even pinto beans'][i % 6 + 1] END AS note,
    CASE WHEN i % 10 = 0 THEN NULL ELSE (i * 13) % 70 + 1 END::INTEGER AS owner
FROM range(1, 401) t(i)
""",
    # the nested and wide types (issue 40): what survives Parquet of them
    "fz_nested": """
SELECT
    i AS nid,
    CASE WHEN i % 5 = 0 THEN NULL WHEN i % 7 = 0 THEN []
         ELSE [i % 4, NULL, i % 3, -i][1:i % 4 + 1] END::INTEGER[] AS li,
    CASE WHEN i % 6 = 0 THEN NULL
         ELSE {'a': CASE WHEN i % 4 = 0 THEN NULL ELSE i % 5 END,
               'b': ['x', 'Zoë', '', 'O''Brien', NULL][i % 5 + 1]} END AS st,
    CASE WHEN i % 4 = 0 THEN NULL
         ELSE MAP {'k' || (i % 3): i % 7, 'z': -1} END::MAP(VARCHAR, INTEGER) AS mp,
    CASE WHEN i % 8 = 0 THEN NULL WHEN i % 9 = 1 THEN 18446744073709551615
         ELSE (i % 6) * 1000000000000000000 END::UBIGINT AS ub,
    CASE WHEN i % 7 = 0 THEN NULL WHEN i % 11 = 2 THEN 999999999999999999999999999999999999.99
         ELSE (i % 5) * 1.25 - 2 END::DECIMAL(38,2) AS d38
FROM range(1, 81) t(i)
""",
    "fz_empty": """
SELECT 1::INTEGER AS eid, 1.5::DECIMAL(12,2) AS val, 'x'::VARCHAR AS txt, DATE '2000-01-01' AS d,
       true AS b, 1.0::DOUBLE AS f, 1::BIGINT AS k
WHERE false
""",
}

TPCH_KEYS = {
    "region": ["r_regionkey"],
    "nation": ["n_nationkey"],
    "supplier": ["s_suppkey"],
    "customer": ["c_custkey"],
    "part": ["p_partkey"],
    "partsupp": ["ps_partkey", "ps_suppkey"],
    "orders": ["o_orderkey"],
    "lineitem": ["l_orderkey", "l_linenumber"],
    "fz_people": ["pid"],
    "fz_items": ["id"],
    "fz_empty": ["eid"],
    "fz_nested": ["nid"],
}

# (table, column, referenced table, referenced column)
FOREIGN_KEYS = [
    ("nation", "n_regionkey", "region", "r_regionkey"),
    ("supplier", "s_nationkey", "nation", "n_nationkey"),
    ("customer", "c_nationkey", "nation", "n_nationkey"),
    ("partsupp", "ps_partkey", "part", "p_partkey"),
    ("partsupp", "ps_suppkey", "supplier", "s_suppkey"),
    ("orders", "o_custkey", "customer", "c_custkey"),
    ("lineitem", "l_orderkey", "orders", "o_orderkey"),
    ("lineitem", "l_partkey", "part", "p_partkey"),
    ("lineitem", "l_suppkey", "supplier", "s_suppkey"),
    ("fz_items", "owner", "fz_people", "pid"),
    ("fz_empty", "eid", "fz_items", "id"),
]


@dataclass
class Column:
    name: str
    sql_type: str
    kind: str
    samples: list[object] = field(default_factory=list)
    words: list[str] = field(default_factory=list)


@dataclass
class Table:
    name: str
    rows: int
    columns: list[Column]
    key: list[str]

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)


@dataclass
class Catalog:
    tables: dict[str, Table]
    foreign_keys: list[tuple[str, str, str, str]]

    def table(self, name: str) -> Table:
        return self.tables[name]


def kind_of(sql_type: str) -> str:
    t = sql_type.upper()
    if t.startswith("DECIMAL"):
        return DECIMAL
    if t in ("INTEGER", "SMALLINT", "TINYINT"):
        return INT
    if t in ("BIGINT", "HUGEINT"):
        return BIGINT
    if t in ("DOUBLE", "FLOAT", "REAL"):
        return DOUBLE
    if t == "DATE":
        return DATE
    if t == "BOOLEAN":
        return BOOL
    return VARCHAR


def write_source(out: Path) -> Path:
    """TPC-H SF 0.01 and the edge tables as Parquet files in ``out`` (idempotent)."""
    done = out / ".complete"
    if done.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    generate(TPCH_SF, out)
    with duckdb.connect() as con:
        for name, sql in EDGE_SQL.items():
            con.execute(f"COPY ({sql}) TO '{out / name}.parquet' (FORMAT PARQUET)")
    done.touch()
    return out


def plain_connection(source: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory plaintext DuckDB holding every table of ``source``."""
    con = duckdb.connect()
    for file in sorted(source.glob("*.parquet")):
        con.execute(f"CREATE TABLE {file.stem} AS SELECT * FROM read_parquet('{file}')")
    return con


def read_catalog(con: duckdb.DuckDBPyConnection, cache: Path | None = None) -> Catalog:
    """Tables, types and value samples of the plaintext database (cached as JSON)."""
    if cache is not None and cache.exists():
        return _from_json(json.loads(cache.read_text()))
    tables: dict[str, Table] = {}
    for (name,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall():
        rows = con.execute(f"SELECT COUNT(*) FROM {name}").fetchall()[0][0]
        described = con.execute(f"DESCRIBE {name}").fetchall()
        columns = [_column(con, name, str(c[0]), str(c[1])) for c in described]
        tables[name] = Table(name, int(rows), columns, TPCH_KEYS.get(name, []))
    catalog = Catalog(tables, FOREIGN_KEYS)
    if cache is not None:
        cache.write_text(json.dumps(_to_json(catalog), default=str))
    return catalog


def _column(con: duckdb.DuckDBPyConnection, table: str, name: str, sql_type: str) -> Column:
    kind = kind_of(sql_type)
    values = [
        r[0]
        for r in con.execute(
            f"SELECT v FROM (SELECT DISTINCT {name} AS v FROM {table} WHERE {name} IS NOT NULL) "
            "ORDER BY v"
        ).fetchall()
    ]
    step = max(1, len(values) // 24)
    samples = values[::step][:24] + values[-1:]
    words: list[str] = []
    if kind == VARCHAR:
        seen: set[str] = set()
        for value in values[:: max(1, len(values) // 60)]:
            for word in str(value).split():
                if word.isalpha() and len(word) > 2 and word not in seen:
                    seen.add(word)
                    words.append(word)
        words = words[:20]
    json_samples = [_jsonable(v, kind) for v in samples]
    return Column(name, sql_type, kind, json_samples, words)


def _jsonable(value: object, kind: str) -> object:
    if kind in (DATE, DECIMAL):
        return str(value)
    return value


def _to_json(catalog: Catalog) -> dict[str, object]:
    return {
        "tables": [
            {
                "name": t.name,
                "rows": t.rows,
                "key": t.key,
                "columns": [c.__dict__ for c in t.columns],
            }
            for t in catalog.tables.values()
        ],
        "foreign_keys": catalog.foreign_keys,
    }


def _from_json(data: dict[str, object]) -> Catalog:
    tables = {}
    for t in data["tables"]:  # type: ignore[attr-defined]
        columns = [Column(**c) for c in t["columns"]]
        tables[t["name"]] = Table(t["name"], t["rows"], columns, t["key"])
    fks: list[tuple[str, str, str, str]] = [tuple(fk) for fk in data["foreign_keys"]]  # type: ignore[attr-defined]
    return Catalog(tables, fks)
