"""``COPY ... FROM STDIN`` and ``COPY ... TO STDOUT`` in PostgreSQL's text and CSV formats.

COPY FROM's rows arrive whole (the wire server gathers the CopyData
messages), are split into columns by pyarrow's CSV reader as text, and are
inserted through Veil as one INSERT (``veil.session.dml.insert_rows``: DuckDB
casts each text to the column's type, exactly as a plaintext COPY would
refuse or accept it; then the rows are encrypted). COPY TO's rows leave one
CopyData message each, as PostgreSQL sends them, their text built a whole
column at a time.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as csv

from veil.serve import text
from veil.serve.errors import WireError
from veil.serve.types import interval_text, parse_array

_COPY = re.compile(
    r"""^COPY\s+
        (?:\((?P<query>.*)\)|(?P<table>[\w."]+)\s*(?:\((?P<columns>[^)]*)\))?)\s+
        (?P<direction>FROM|TO)\s+(?P<target>STDIN|STDOUT)
        (?P<options>.*)$""",
    re.IGNORECASE | re.DOTALL | re.VERBOSE,
)

# COPY ... {FROM | TO} 'file' or PROGRAM '...'
_FILE = re.compile(r"""^COPY\b.*\b(?:FROM|TO)\s+(?:PROGRAM\b|'|E')""", re.IGNORECASE | re.DOTALL)


@dataclass
class CopySpec:
    table: str | None
    columns: list[str] | None
    query: str | None
    incoming: bool
    csv: bool = False
    header: bool = False
    delimiter: str = "\t"
    null: str = "\\N"


def parse(sql: str) -> CopySpec:
    found = _COPY.match(sql.strip().rstrip(";").strip())
    if found is None and _FILE.match(sql.strip()):
        raise WireError(  # as PostgreSQL answers a user without pg_read/write_server_files
            "42501",
            "permission denied: COPY to or from a file or a program is not allowed through "
            "Veil; use COPY ... FROM STDIN or TO STDOUT (psql's \\copy)",
        )
    if found is None:
        raise WireError(
            "0A000",
            "Veil's COPY is COPY table [(columns)] FROM STDIN or COPY {table | (query)} TO "
            "STDOUT, in text or CSV format; files on the server are not readable through Veil",
        )
    incoming = found["direction"].upper() == "FROM"
    if incoming != (found["target"].upper() == "STDIN") or (incoming and found["query"]):
        raise WireError("0A000", "COPY reads FROM STDIN and writes TO STDOUT")
    columns = (
        [c.strip().strip('"').lower() for c in found["columns"].split(",")]
        if found["columns"]
        else None
    )
    spec = CopySpec(
        table=found["table"].strip('"').lower() if found["table"] else None,
        columns=columns,
        query=found["query"],
        incoming=incoming,
    )
    _options(spec, found["options"])
    return spec


def _options(spec: CopySpec, options: str) -> None:
    words = options.strip()
    if words.upper().startswith("WITH"):
        words = words[4:].strip()
    words = words.strip("()")
    for item in re.findall(r"(\w+)(?:\s+('(?:[^']|'')*'|\w+))?", words):
        name, value = item[0].upper(), item[1].strip("'")
        if name == "BINARY" or (name == "FORMAT" and value.lower() == "binary"):
            raise WireError("0A000", "COPY in binary format is not supported; use text or CSV")
        if name == "FORMAT":
            if value.lower() not in ("text", "csv"):
                raise WireError("0A000", f"COPY format {value} is not supported; use text or CSV")
            spec.csv = value.lower() == "csv"
        elif name == "CSV":
            spec.csv = True
        elif name == "HEADER":
            spec.header = value.lower() not in ("false", "off", "0")
        elif name == "DELIMITER":
            spec.delimiter = value
        elif name == "NULL":
            spec.null = value
        elif name == "FREEZE" or (name == "ENCODING" and value.upper() in ("UTF8", "UTF-8")):
            pass  # pgbench -i's FREEZE: nothing for Veil to freeze; the data are UTF-8
        else:
            raise WireError("0A000", f"COPY option {name} is not supported by Veil")
    if spec.csv:
        spec.delimiter = spec.delimiter if spec.delimiter != "\t" else ","
        spec.null = spec.null if spec.null != "\\N" else ""


def read_rows(spec: CopySpec, data: bytes, names: list[str]) -> pa.Table:
    """COPY FROM's data as a table of text columns named ``names``."""
    # psql ends the data with the old end-of-data marker line; it is not a row
    data = re.sub(rb"(?:^|\n)\\\.\r?\n?$", b"\n", data)
    if not data.strip():
        return pa.table({n: pa.array([], pa.string()) for n in names})
    try:
        table = csv.read_csv(
            io.BytesIO(data),
            read_options=csv.ReadOptions(column_names=names, skip_rows=int(spec.header)),
            parse_options=csv.ParseOptions(
                delimiter=spec.delimiter, quote_char='"' if spec.csv else False
            ),
            convert_options=csv.ConvertOptions(
                column_types={n: pa.string() for n in names},
                null_values=[spec.null],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid as exc:
        raise WireError("22P04", f"bad COPY data: {exc}") from None
    if not spec.csv:
        table = pa.table({n: _unescape(table.column(n)) for n in names})
    return table


def typed_rows(rows: pa.Table, types: dict[str, str], zone: str) -> pa.Table:
    """COPY FROM's text columns, with the PostgreSQL text forms DuckDB's casts read
    otherwise made values first: bytea's ``\\x`` hex, arrays' ``{...}``, and
    timestamptz without an offset, a time in the session's TimeZone ``zone``."""
    columns = {}
    for name in rows.column_names:
        kind = types.get(name, "VARCHAR").upper().replace("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ")
        column = rows.column(name).combine_chunks()
        base, depth = kind.split("[")[0].strip(), kind.count("[")
        if depth:
            leaf: pa.DataType = pa.binary() if base == "BLOB" else pa.string()
            arrow = leaf
            for _ in range(depth):
                arrow = pa.list_(arrow)
            lists = [_array(v, base) for v in column.to_pylist()]
            column = pa.array(lists, arrow)
        elif base == "BLOB":
            column = pa.array([_bytea(v) for v in column.to_pylist()], pa.binary())
        elif base == "INTERVAL":
            column = pa.array([_element(v, base) for v in column.to_pylist()], pa.string())
        if base == "TIMESTAMPTZ":
            column = _in_zone(column, kind, zone)
        columns[name] = column
    return pa.table(columns)


def _array(text: str | None, base: str) -> list[Any] | None:
    return None if text is None else _elements(parse_array(text), base)


def _elements(items: list[Any], base: str) -> list[Any]:
    return [_elements(i, base) if isinstance(i, list) else _element(i, base) for i in items]


def _element(text: str | None, base: str) -> object:
    """A value's text as DuckDB's cast to ``base`` reads it."""
    if text is None:
        return None
    if base == "BLOB":
        return _bytea(text)
    return interval_text(text) if base == "INTERVAL" else text


def _bytea(text: str | None) -> bytes | None:
    """bytea's text forms: hex (``\\x00ff``) or escaped (``a\\000``, ``\\\\``)."""
    if text is None:
        return None
    if text.startswith("\\x"):
        try:
            return bytes.fromhex(text[2:])
        except ValueError:
            raise WireError("22P02", f'invalid hexadecimal data for type bytea: "{text}"') from None
    out, position = bytearray(), 0
    while position < len(text):
        if text[position] != "\\":
            out += text[position].encode()
            position += 1
        elif text[position + 1 : position + 2] == "\\":
            out.append(92)
            position += 2
        elif re.fullmatch(r"[0-3][0-7]{2}", text[position + 1 : position + 4]):
            out.append(int(text[position + 1 : position + 4], 8))
            position += 4
        else:
            raise WireError("22P02", "invalid input syntax for type bytea")
    return bytes(out)


def _in_zone(column: pa.Array, kind: str, zone: str) -> pa.Array:
    """Timestamps with time zones read as PostgreSQL reads them in the session's zone."""
    with duckdb.connect() as connection:
        connection.execute("SET TimeZone = ?", [zone])
        connection.register("frame", pa.table({"v": column}))
        try:
            found = connection.sql(f"SELECT CAST(v AS {kind}) FROM frame").to_arrow_table()
        except duckdb.Error as exc:
            message = str(exc).split("\n")[0]
            raise WireError(
                "22007", f"invalid input syntax for type timestamp with time zone: {message}"
            ) from None
    return found.column(0).combine_chunks()


def _unescape(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """PostgreSQL's text-format escapes: \\\\ \\t \\n \\r."""
    marker = "\x00veil-backslash\x00"
    values = pc.replace_substring(values, "\\\\", marker)
    for escaped, plain in (("\\t", "\t"), ("\\n", "\n"), ("\\r", "\r")):
        values = pc.replace_substring(values, escaped, plain)
    return pc.replace_substring(values, marker, "\\")


def lines(
    spec: CopySpec, table: pa.Table, zone: str = "UTC"
) -> Iterator[tuple[int, list[text.Column]]]:
    """COPY TO's rows: batches of one column whose values are whole lines (timestamptz
    in the session's TimeZone ``zone``)."""
    if spec.header:
        header = spec.delimiter.join(table.column_names) + "\n"
        yield 1, [text.strings(pa.array([header], pa.large_string()))]
    for batch in table.to_batches(max_chunksize=text.BATCH_ROWS):
        fields = [_field(spec, text.as_text(column, zone)) for column in batch.columns]
        if not fields:
            continue
        joined = (
            pc.binary_join_element_wise(*fields, spec.delimiter) if len(fields) > 1 else fields[0]
        )
        yield batch.num_rows, [text.strings(pc.binary_join_element_wise(joined, "\n", ""))]


def _field(spec: CopySpec, values: pa.Array) -> pa.Array:
    values = values.cast(pa.string())
    if spec.csv:
        needs = pc.match_substring_regex(values, f'[{re.escape(spec.delimiter)}"\\n\\r]')
        quoted = pc.binary_join_element_wise('"', pc.replace_substring(values, '"', '""'), '"', "")
        values = pc.if_else(needs, quoted, values)
    else:
        values = pc.replace_substring(values, "\\", "\\\\")
        for plain, escaped in (("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")):
            values = pc.replace_substring(values, plain, escaped)
    return pc.fill_null(values, spec.null)
