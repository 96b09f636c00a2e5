"""What a load learns of each source table before encrypting it, in as few scans as it can.

The planner estimates rows and bytes with statistics the design file keeps
(``veil.sql.selectivity``, ``pushdown_joins``): each DET and OPE column's
distinct count (and whether a DET column is a key), each OPE column's
quantiles, each text column's mean length, the share of rows each
precomputed filter keeps. The loader sizes ASHE words, narrow DET and fitted
RND copies by the encoded ``(min, max)`` of the summed expressions and the
integer keys (``ashe_widths``, ``narrow_det``, ``fitted_copies``). They
stay in the client's design file; the server could estimate most of them
from the ciphertexts anyway.

All but the quantiles and the exact count of key candidates come from one
aggregate statement over the table (``record``): TPC-DS SF 1's store_sales
was scanned three times for them, its expressions deduplicated nowhere. The
quantiles are exact, read from the encoded values by Arrow's selection
(``_exact_quantiles``): DuckDB's ``approx_quantile`` spent 5 s of a TPC-DS SF 1
load on a t-digest per OPE column (and came out slightly different each
run); above ``EXACT_QUANTILE_VALUES`` values a table keeps the t-digest, whose
memory stays bounded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from veil.design.model import DET, OPE, Encryption, TableDesign
from veil.encoding import BOOL_KIND, INT_KIND, SqlType, encode, encode_scalar
from veil.load import ashe_widths, fitted_copies, narrow_det
from veil.load.sources import SourceTable

QUANTILES = 32  # an OPE column's recorded quantiles: 0, 1/32, ..., 1 (33 points)
# At most this many values (rows times OPE columns) are read into memory at once for
# exact quantiles: with a DECIMAL's 16 bytes and its encoding's 8, ~400 MB at most (TPC-DS
# SF 1's inventory, 11.7M rows, a column at a time); a table with more rows than this
# keeps the t-digest
EXACT_QUANTILE_VALUES = 1 << 24
# A DET column whose approximate distinct count reaches this share of the rows is
# counted exactly, to learn whether it is a key (HyperLogLog is off by a few percent)
KEY_CANDIDATE = 0.9

# by id(encryption): a DET integer's, or a number's RND copy's, encoded (min, max)
Ranges = dict[int, tuple[int | None, int | None]]


def record(
    source: SourceTable, con: duckdb.DuckDBPyConnection, table: TableDesign
) -> tuple[ashe_widths.Profile | None, Ranges]:
    """Record ``table``'s statistics from ``source`` and return its data profile
    (``data_profile``'s): one aggregate statement, then the quantiles and key counts.

    A statement DuckDB cannot compute (an expression that fails for some row, a type
    an aggregate does not take) leaves each part to its own scan, as before, and each
    of those to its own fallback."""
    scan = _Scan(source, con, table)
    try:
        row = scan.run()
        summed, ranges = scan.apply(row)
    except (duckdb.Error, pa.ArrowException, ValueError):
        count_distinct_keys(source, con, table)
        record_statistics(source, con, table)
        return data_profile(source, con, table)
    record_quantiles(source, con, table, scan.rows)
    return summed, ranges


@dataclass
class _Scan:
    """The one aggregate statement of ``record``: each aggregate once, by its text."""

    source: SourceTable
    con: duckdb.DuckDBPyConnection
    table: TableDesign
    items: dict[str, int] = field(default_factory=dict)  # aggregate -> its column
    profiled: list[str] = field(default_factory=list)  # each profiled item, as selected
    rows: int = 0

    def _at(self, aggregate: str) -> int:
        return self.items.setdefault(aggregate, len(self.items))

    def run(self) -> pa.Table:
        self._at("count(*)")
        for enc in _distinct_keys(self.table):
            self._at(f"approx_count_distinct({_counted(enc)})")
        for name in _texts(self.table):
            self._at(f'avg(octet_length(CAST("{name}" AS BLOB)))')
        for enc in _flags(self.table):
            self._at(f"avg(CASE WHEN ({enc.source}) THEN 1.0 ELSE 0.0 END)")
            self._at(f"avg(CASE WHEN NOT ({enc.source}) THEN 1.0 ELSE 0.0 END)")
        summed, keys = _profiled(self.table)
        self.profiled = self.source.referenced(self.con, [s for s, _ in summed + keys])
        for value in self.profiled:
            for part in (f"min({value})", f"max({value})", f"count(*) - count({value})"):
                self._at(part)
        select = ", ".join(self.items)
        return self.con.sql(f"SELECT {select} FROM {self.source.relation_sql}").to_arrow_table()

    def value(self, row: pa.Table, aggregate: str) -> object:
        return row.column(self.items[aggregate])[0].as_py()

    def apply(self, row: pa.Table) -> tuple[ashe_widths.Profile | None, Ranges]:
        self.rows = int(str(self.value(row, "count(*)")))
        keys = _distinct_keys(self.table)
        for enc in keys:
            count = self.value(row, f"approx_count_distinct({_counted(enc)})")
            enc.params["distinct"] = int(str(count))
        _mark_unique(self.source, self.con, _key_candidates(keys, self.rows), self.rows)
        lengths = {
            n: self.value(row, f'avg(octet_length(CAST("{n}" AS BLOB)))')
            for n in _texts(self.table)
        }
        _set_mean_bytes(self.table, lengths)
        for enc in _flags(self.table):
            true = self.value(row, f"avg(CASE WHEN ({enc.source}) THEN 1.0 ELSE 0.0 END)")
            false = self.value(row, f"avg(CASE WHEN NOT ({enc.source}) THEN 1.0 ELSE 0.0 END)")
            _set_kept(enc, true, false)
        return self._profile(row)

    def _profile(self, row: pa.Table) -> tuple[ashe_widths.Profile | None, Ranges]:
        summed, keys = _profiled(self.table)
        found = [
            _encoded(
                row.column(self.items[f"min({v})"]).combine_chunks(),
                row.column(self.items[f"max({v})"]).combine_chunks(),
                int(str(self.value(row, f"count(*) - count({v})"))),
                type_name,
            )
            for v, (_, type_name) in zip(self.profiled, summed + keys, strict=True)
        ]
        return _split_profile(self.table, found, bool(summed))


def _distinct_keys(table: TableDesign) -> list[Encryption]:
    return [e for e in table.encryptions if e.scheme in (DET, OPE)]


def _counted(enc: Encryption) -> str:
    return enc.source if enc.is_expression else f'"{enc.source}"'


def _texts(table: TableDesign) -> list[str]:
    return [c.name for c in table.columns if not SqlType(c.type).is_integral]


def _flags(table: TableDesign) -> list[Encryption]:
    """Precomputed filters (a LIKE, two columns compared): the share of rows each keeps."""
    return [e for e in table.encryptions if e.is_expression and e.sql_type.kind == BOOL_KIND]


def _ordered(table: TableDesign) -> list[Encryption]:
    """The OPE columns whose quantiles are recorded, one per source column."""
    found: dict[str, Encryption] = {}
    for enc in table.encryptions:
        if enc.scheme == OPE and not enc.is_expression:
            found.setdefault(enc.source, enc)
    return list(found.values())


def _key_candidates(keys: list[Encryption], rows: int) -> list[Encryption]:
    """The DET columns whose approximate count reaches ``KEY_CANDIDATE`` of the rows."""
    return [
        enc
        for enc in keys
        if enc.scheme == DET
        and not enc.is_expression
        and rows
        and int(str(enc.params["distinct"])) >= KEY_CANDIDATE * rows
    ]


def _profiled(table: TableDesign) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The ``(source, SQL type)`` of the summed expressions and of the integer keys."""
    keys = _range_keys(table)
    summed = list(zip(table.sums.sources, table.sums.types, strict=True)) if table.sums else []
    return summed, [(e.source, e.type) for e in keys]


def _range_keys(table: TableDesign) -> list[Encryption]:
    return [e for e in table.encryptions if narrow_det.candidate(e) or fitted_copies.candidate(e)]


def _split_profile(
    table: TableDesign, found: list[tuple[int | None, int | None, int]], with_sums: bool
) -> tuple[ashe_widths.Profile | None, Ranges]:
    count = len(table.sums.sources) if with_sums and table.sums else 0
    sums, ranges = found[:count], found[count:]
    return (
        sums if with_sums else None,
        {id(e): (low, high) for e, (low, high, _) in zip(_range_keys(table), ranges, strict=True)},
    )


def _set_mean_bytes(table: TableDesign, lengths: dict[str, object]) -> None:
    for enc in table.encryptions:
        length = lengths.get(enc.source)
        if length is not None:
            enc.params["mean_bytes"] = round(float(str(length)), 1)


def _set_kept(enc: Encryption, true: object, false: object) -> None:
    if true is not None and false is not None:  # None: an empty table
        enc.params["kept"] = [round(float(str(true)), 6), round(float(str(false)), 6)]


def count_distinct_keys(
    source: SourceTable, con: duckdb.DuckDBPyConnection, table: TableDesign
) -> None:
    """Record each DET and OPE column's (approximate) distinct count, in a scan of its own.

    The planner's group estimate, and what chooses the bytes form."""
    keys = _distinct_keys(table)
    try:
        rows, row = _distinct_counts(source, con, keys)
    except duckdb.Error:  # an expression DuckDB cannot compute for some row: columns only
        keys = [e for e in keys if not e.is_expression]
        rows, row = _distinct_counts(source, con, keys)
    for enc, count in zip(keys, row, strict=True):
        enc.params["distinct"] = int(count)
    _mark_unique(source, con, _key_candidates(keys, rows), rows)


def _distinct_counts(
    source: SourceTable, con: duckdb.DuckDBPyConnection, keys: list[Encryption]
) -> tuple[int, tuple[int, ...]]:
    """The source's rows and each key's approximate distinct count, in one scan (none
    without keys: then nothing needs the rows)."""
    if not keys:
        return 0, ()
    counts = "".join(f", approx_count_distinct({_counted(e)})" for e in keys)
    rows, *found = con.execute(f"SELECT count(*){counts} FROM {source.relation_sql}").fetchall()[0]
    return int(rows), tuple(found)


def _mark_unique(
    source: SourceTable, con: duckdb.DuckDBPyConnection, candidates: list[Encryption], rows: int
) -> None:
    """Mark ``params["unique"]`` on the DET columns whose values are all distinct, none NULL.

    The planner sums over a server join under ASHE only where the join cannot
    repeat a summed row (``veil.sql.join_sums``): every join reached through
    such a key. Only the candidates by their approximate count are counted exactly.
    """
    if not candidates:
        return
    counts = ", ".join(f'COUNT(DISTINCT "{e.source}")' for e in candidates)
    found = con.execute(f"SELECT {counts} FROM {source.relation_sql}").fetchall()[0]
    for enc, count in zip(candidates, found, strict=True):
        if count == rows:
            enc.params["unique"] = True


def record_statistics(
    source: SourceTable, con: duckdb.DuckDBPyConnection, table: TableDesign
) -> None:
    """Record, in a scan of their own, each text column's mean length in bytes and the
    shares of rows each precomputed filter holds and fails for (``params["kept"]``),
    then each OPE column's quantiles (``record_quantiles``)."""
    texts, flags = _texts(table), _flags(table)
    parts = [f'avg(octet_length(CAST("{name}" AS BLOB)))' for name in texts]
    parts += [
        f"avg(CASE WHEN ({e.source}) THEN 1.0 ELSE 0.0 END), "
        f"avg(CASE WHEN NOT ({e.source}) THEN 1.0 ELSE 0.0 END)"
        for e in flags
    ]
    if parts:
        try:
            row = con.execute(f"SELECT {', '.join(parts)} FROM {source.relation_sql}").fetchall()
        except duckdb.Error:  # a type these aggregates do not take: no estimates
            return
        _set_mean_bytes(table, dict(zip(texts, row[0][: len(texts)], strict=True)))
        shares = row[0][len(texts) :]
        for at, enc in enumerate(flags):
            _set_kept(enc, shares[2 * at], shares[2 * at + 1])
    record_quantiles(source, con, table, source.row_count(con))


def record_quantiles(
    source: SourceTable, con: duckdb.DuckDBPyConnection, table: TableDesign, rows: int | None
) -> None:
    """Record each OPE column's quantiles (encoded, as OPE encrypts them) from the source's
    ``rows`` rows: exact where they fit in memory, else DuckDB's t-digest."""
    ordered = _ordered(table)
    if not ordered:
        return
    if rows is not None and rows <= EXACT_QUANTILE_VALUES:
        group = max(1, EXACT_QUANTILE_VALUES // max(rows, 1))
        for at in range(0, len(ordered), group):
            _exact_quantiles(source, con, ordered[at : at + group])
    else:
        _approximate_quantiles(source, con, ordered)
    found = {e.source: e.params["quantiles"] for e in ordered if "quantiles" in e.params}
    for enc in table.encryptions:  # a column's other OPE encryptions (other scopes)
        if enc.scheme == OPE and not enc.is_expression and enc.source in found:
            enc.params["quantiles"] = found[enc.source]


def _exact_quantiles(
    source: SourceTable, con: duckdb.DuckDBPyConnection, ordered: list[Encryption]
) -> None:
    """The quantiles of each column's encoded non-NULL values: the value at position
    ``floor(q * (n - 1))`` of them in order (DuckDB's ``quantile_disc`` picks a neighbour
    at times), read in one scan of the columns."""
    columns = ", ".join(f'"{e.source}"' for e in ordered)
    try:
        values = con.sql(f"SELECT {columns} FROM {source.relation_sql}").to_arrow_table()
    except duckdb.Error:
        return
    points = [i / QUANTILES for i in range(QUANTILES + 1)]
    for at, enc in enumerate(ordered):
        column = values.column(at)
        try:
            # an integer's encoding is its value, widened to int64: the same quantiles
            plain = enc.sql_type.kind == INT_KIND and pa.types.is_integer(column.type)
            encoded = column if plain else encode(column, enc.sql_type)
        except (pa.ArrowException, ValueError):
            continue
        if not pa.types.is_integer(encoded.type) or encoded.null_count == len(encoded):
            continue  # bytes (a long text's), or no non-NULL value
        _set_quantiles(enc, pc.quantile(encoded, q=points, interpolation="lower").to_pylist())


def _approximate_quantiles(
    source: SourceTable, con: duckdb.DuckDBPyConnection, ordered: list[Encryption]
) -> None:
    points = ", ".join(str(i / QUANTILES) for i in range(QUANTILES + 1))
    parts = [f'approx_quantile("{e.source}", [{points}])' for e in ordered]
    try:
        row = con.execute(f"SELECT {', '.join(parts)} FROM {source.relation_sql}").fetchall()[0]
    except duckdb.Error:  # a type the t-digest does not take: no quantiles
        return
    for enc, values in zip(ordered, row, strict=True):
        if values is None or any(v is None for v in values):
            continue  # no non-NULL value
        _set_quantiles(enc, [encode_scalar(v, enc.sql_type) for v in values])


def _set_quantiles(enc: Encryption, encoded: list[object]) -> None:
    if all(isinstance(v, int) for v in encoded):  # ints only: an OPE of bytes has none
        enc.params["quantiles"] = encoded


def data_profile(
    source: SourceTable, con: duckdb.DuckDBPyConnection, table: TableDesign
) -> tuple[ashe_widths.Profile | None, Ranges]:
    """In a scan of their own: the summed expressions' (min, max, NULL rows), sizing their
    ASHE words, and each DET integer column's (min, max) by id(encryption), for narrow DET
    (and each number's RND copy's, ``fitted_copies``).

    Summed expressions DuckDB cannot compute for some row leave the first None.
    """
    summed, keys = _profiled(table)
    try:
        found = encoded_ranges(source, con, summed + keys)
    except (duckdb.Error, pa.ArrowException, ValueError):  # uncomputable: type-wide words
        summed, found = [], encoded_ranges(source, con, keys)
    return _split_profile(table, found, bool(summed))


def encoded_ranges(
    source: SourceTable, con: duckdb.DuckDBPyConnection, columns: list[tuple[str, str]]
) -> list[tuple[int | None, int | None, int]]:
    """The encoded ``(min, max)`` and NULL rows of each ``(column or expression, SQL
    type)``, in one scan."""
    profile = source.profile(con, [column for column, _ in columns])
    return [
        _encoded(low, high, nulls, type_name)
        for (low, high, nulls), (_, type_name) in zip(profile, columns, strict=True)
    ]


def _encoded(
    low: pa.Array, high: pa.Array, nulls: int, type_name: str
) -> tuple[int | None, int | None, int]:
    sql_type = SqlType(type_name)
    return _as_int(encode(low, sql_type)), _as_int(encode(high, sql_type)), nulls


def _as_int(value: pa.Array) -> int | None:
    found = value[0].as_py()
    return found if isinstance(found, int) else None
