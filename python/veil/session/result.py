"""What a statement gives back: a result table and row count, or record batches streamed."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from veil.exec.server import FetchStats
from veil.sql.errors import OutOfMemoryError, QueryError
from veil.sql.plan import SplitPlan


@dataclass
class Result:
    """A statement's outcome: rows for queries, a row count for DML."""

    table: pa.Table
    rowcount: int
    stats: FetchStats = field(default_factory=FetchStats)
    plan: SplitPlan | None = None


STREAM_BATCH_ROWS = 16_384


class Streamed:
    """A query's result as record batches; ``close`` (or reading to the end) frees the session."""

    def __init__(
        self,
        names: list[str],
        reader: pa.RecordBatchReader,
        release: Callable[[], None],
        stats: FetchStats,
    ):
        self.names, self.reader, self.stats = names, reader, stats
        self._release: Callable[[], None] | None = release
        fields = list(reader.schema)
        if len(names) == len(fields):
            fields = [f.with_name(n) for f, n in zip(fields, names, strict=True)]
        self.schema = pa.schema(fields)
        self._finish: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None

    def finish(self, schema: pa.Schema, finish: Callable[[pa.RecordBatch], pa.RecordBatch]) -> None:
        """Apply ``finish`` to each batch (result columns decrypted late), of ``schema``."""
        self.schema = pa.schema(
            [f.with_type(t.type) for f, t in zip(self.schema, schema, strict=True)]
        )
        self._finish = finish

    def batches(self) -> Iterator[pa.RecordBatch]:
        try:
            for batch in self.reader:
                if self._finish is not None:
                    batch = self._finish(batch)
                yield pa.RecordBatch.from_arrays(batch.columns, schema=self.schema)
        except duckdb.Error as exc:
            raise local_error(exc) from None
        finally:
            self.close()

    def close(self) -> None:
        if self._release is not None:
            self.reader.close()
            self._release()
            self._release = None


def duckdb_message(exc: duckdb.Error) -> str:
    """DuckDB's message without its quote of the statement it ran.

    That statement is Veil's rewrite (``DESCRIBE ...``, a local plan), not the
    user's: its ``LINE 1:`` excerpt and caret would point at the wrong text.
    """
    text = str(exc).split("\nLINE ")[0]
    return " ".join(text.split())


def local_error(exc: duckdb.Error, message: str | None = None) -> QueryError | OutOfMemoryError:
    """A local DuckDB failure in the user's terms (``message``: its text, already reworded).

    Running out of the local engine's memory is no fault of the query's SQL: the
    error says what the limit is and how to raise it (``veil.exec.local_duckdb``).
    """
    if isinstance(exc, duckdb.OutOfMemoryException):
        used = _USED.search(str(exc))
        limit = f" ({used.group(1)} of {used.group(2)} in use)" if used else ""
        return OutOfMemoryError(
            "the client ran out of memory finishing this query: its local DuckDB spills "
            f"what it can to disk and keeps within its limit{limit}, and this plan needs "
            "more at once. Raise VEIL_MEMORY_LIMIT (e.g. 8GB, or 75% of the machine) or "
            "make the query need less (filters, fewer groups); nothing was changed"
        )
    return QueryError(message if message is not None else duckdb_message(exc))


_USED = re.compile(r"\(([\d.]+ \w+)/([\d.]+ \w+) used\)")
