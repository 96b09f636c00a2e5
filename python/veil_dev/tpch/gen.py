"""TPC-H data as Parquet files, one per table, through the ``tpchgen-cli`` package.

``tpchgen-cli`` (the tpchgen-rs generator) writes the same rows as the TPC's
dbgen. Its Parquet files type strings as Arrow ``string_view``; readers that
want plain ``string`` should cast (``veil_dev.tpch.gen.read_table`` does).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from veil.errors import VeilError

TABLES = ("customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier")


class TpchError(VeilError):
    """TPC-H data could not be generated or read."""

    anchor = "tpch"


def generator(name: str = "tpchgen-cli") -> str:
    """A generator's executable (``tpchgen-cli``, ``tpcgen-cli``): on PATH, or beside this
    Python's interpreter (a venv's bin, not on PATH when the venv is not activated)."""
    found = shutil.which(name)
    beside = Path(sys.executable).parent / name
    if found:
        return found
    if beside.exists():
        return str(beside)
    raise TpchError(
        f"{name} not found; install the bench extra (`make setup`, or pip install -e '.[bench]')"
    )


def generate(scale_factor: float, out: Path, *, overwrite: bool = False) -> list[Path]:
    """Write the eight TPC-H tables at ``scale_factor`` as ``out/<table>.parquet``."""
    if scale_factor <= 0:
        raise TpchError(f"the scale factor must be positive, got {scale_factor}")
    out.mkdir(parents=True, exist_ok=True)
    command = [generator(), "parquet", "-s", f"{scale_factor:g}", "-o", str(out)]
    if overwrite:
        command.append("--overwrite")
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise TpchError(f"tpchgen-cli failed: {result.stderr.strip()[-2000:]}")
    return [out / f"{table}.parquet" for table in TABLES]


def read_table(directory: Path, table: str) -> pa.Table:
    """One generated table, with string_view columns cast to plain strings."""
    data = pq.read_table(directory / f"{table}.parquet")
    return data.cast(_plain_strings(data.schema))


def read_batches(
    directory: Path, table: str, batch_rows: int = 1 << 20
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """One generated table as batches (the schema, then the batches), with string_view
    columns cast to plain strings: a table of SF 10 (lineitem: 60M rows) never whole in
    memory."""
    source = pq.ParquetFile(directory / f"{table}.parquet")
    schema = _plain_strings(source.schema_arrow)
    batches = (b.cast(schema) for b in source.iter_batches(batch_size=batch_rows))
    return schema, batches


def _plain_strings(schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        pa.field(f.name, pa.string(), f.nullable) if pa.types.is_string_view(f.type) else f
        for f in schema
    )
