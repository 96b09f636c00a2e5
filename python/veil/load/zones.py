"""Each range-filtered column's span per block of rows, as loaded: the server's zone maps.

A server that keeps min/max per block of rows (DuckDB's row groups of
122,880 rows) skips the blocks a range filter cannot match. Which blocks
those are depends on how the column's values fall along the load order, and
not only for the column that orders the table (``TableDesign.sort_by``): in
TPC-H, lineitem ordered by ship date keeps its receipt dates (one to thirty
days later) in as narrow blocks, so Q12's year of receipt dates reads a
seventh of the table. The cost model (``veil.cost.model``) prices a scan by the
blocks it reads.

While the loader encrypts a table's batches in order, this records, per
OPE column with quantiles (``params["quantiles"]``), each block's lowest and
highest value as quantile ranks (``params["zones"]``, in ``[0, 1]``; the
block size in ``params["zone_rows"]``). Ranks, not values: the planner
compares them with a filter's ranks (``selectivity``), and they say no more
than the quantiles already in the client's design file.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from veil.design.model import OPE, Encryption, TableDesign
from veil.encoding import encode
from veil.sql.selectivity import quantile_rank

# DuckDB's row group; a backend that skips blocks of another size ignores the zones
ZONE_ROWS = 122_880
_DIGITS = 4  # a rank's rounding: 1/10,000 of the rows, well within 33 quantile points


class ZoneRecorder:
    """Collects the zones of ``table``'s OPE columns from its plaintext batches in order."""

    def __init__(self, table: TableDesign, zone_rows: int | None = None) -> None:
        self.zone_rows = zone_rows or ZONE_ROWS
        self._columns: list[Encryption] = [
            enc
            for enc in table.encryptions
            if enc.scheme == OPE
            and not enc.is_expression
            and isinstance(enc.params.get("quantiles"), list)
        ]
        # per column, per zone: the lowest and highest encoded value met so far
        self._spans: dict[str, list[list[int | None]]] = {e.name: [] for e in self._columns}

    def add(self, plain: pa.Table, first_id: int) -> None:
        """Take the batch of rows ``first_id, first_id + 1, ...``."""
        if not self._columns or plain.num_rows == 0:
            return
        start = 0
        while start < plain.num_rows:
            zone = (first_id + start) // self.zone_rows
            end = min(plain.num_rows, (zone + 1) * self.zone_rows - first_id)
            for enc in self._columns:
                if enc.source not in plain.column_names:
                    continue  # not in this source's batches: no zones, no estimate from them
                values = encode(plain.column(enc.source).slice(start, end - start), enc.sql_type)
                self._widen(enc.name, zone, values)
            start = end

    def _widen(self, name: str, zone: int, values: pa.Array | pa.ChunkedArray) -> None:
        spans = self._spans[name]
        while len(spans) <= zone:
            spans.append([None, None])
        found = pc.min_max(values)
        low, high = found["min"].as_py(), found["max"].as_py()
        if not isinstance(low, int) or not isinstance(high, int):
            return  # NULLs only, or a form without integer encodings
        span = spans[zone]
        span[0] = low if span[0] is None else min(span[0], low)
        span[1] = high if span[1] is None else max(span[1], high)

    def finish(self) -> None:
        """Record the zones in each column's parameters (replacing a previous load's)."""
        for enc in self._columns:
            points = enc.params["quantiles"]
            if not isinstance(points, list):
                continue
            zones = [
                [
                    round(quantile_rank(points, low, inclusive=False), _DIGITS),
                    round(quantile_rank(points, high, inclusive=True), _DIGITS),
                ]
                if isinstance(low, int) and isinstance(high, int)
                else [0.0, 1.0]  # a zone of NULLs: left unknown
                for low, high in self._spans[enc.name]
            ]
            if zones:
                enc.params["zones"] = zones
                enc.params["zone_rows"] = self.zone_rows
