"""A result table printed for a terminal: an aligned grid, CSV or JSON."""

from __future__ import annotations

import csv
import json
import sys

import pyarrow as pa

from veil.exec.rows import table_rows


def print_table(table: pa.Table, fmt: str, out: object = None) -> None:
    stream = out or sys.stdout
    rows = [list(r) for r in table_rows(table)]
    if fmt == "csv":
        writer = csv.writer(stream)  # type: ignore[arg-type]
        writer.writerow(table.column_names)
        writer.writerows(rows)
    elif fmt == "json":
        print(json.dumps(table.to_pylist(), default=str, indent=1), file=stream)  # type: ignore[arg-type]
    else:
        print(format_grid(table.column_names, rows), file=stream)  # type: ignore[arg-type]


def format_grid(header: list[str], rows: list[list[object]]) -> str:
    cells = [[str(h) for h in header]] + [
        ["NULL" if v is None else str(v) for v in r] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})"
