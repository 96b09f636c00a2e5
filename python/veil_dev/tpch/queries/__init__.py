"""The 22 TPC-H queries with the specification's validation parameters.

Each query lives in ``qNN.sql`` beside this file, written in SQL that both
DuckDB and sqlglot read: dates as ``date '…'``, intervals as
``interval 'n' unit``, ``extract(year from …)``, ``substring(… from … for …)``,
and Q15's view as a common table expression. Where a query ends in LIMIT or
its ORDER BY can tie (Q3, Q10, Q11, Q18), a key column breaks the tie so that
every engine returns the same rows in the same order; the parameters are the
specification's validation values (TPC-H 3.0, §2.4 "Query Validation").
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

QUERY_NUMBERS = tuple(range(1, 23))


def query_text(number: int) -> str:
    """The SQL of TPC-H query ``number`` (1..22), its header comment included."""
    if number not in QUERY_NUMBERS:
        raise ValueError(f"TPC-H has queries 1 to 22, not {number}")
    return resources.files(__name__).joinpath(f"q{number:02d}.sql").read_text(encoding="utf-8")


def query_texts() -> dict[int, str]:
    """All 22 queries by number."""
    return {number: query_text(number) for number in QUERY_NUMBERS}


def write_queries(out: Path) -> list[Path]:
    """Write ``q01.sql`` … ``q22.sql`` into ``out`` (created if missing)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for number, sql in query_texts().items():
        path = out / f"q{number:02d}.sql"
        path.write_text(sql, encoding="utf-8")
        written.append(path)
    return written
