"""A query result's Arrow table as Python rows, for the DB-API cursor and the CLI."""

from __future__ import annotations

import pyarrow as pa

Row = tuple[object, ...]


def table_rows(table: pa.Table) -> list[Row]:
    """Rows as tuples (column names may repeat, so not via dicts); MAPs as dicts, as DuckDB."""
    columns = (column.to_pylist(maps_as_pydicts="strict") for column in table.columns)
    return list(zip(*columns, strict=True))
