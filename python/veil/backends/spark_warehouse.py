"""The Spark backend's tables: Parquet files in a warehouse directory, swapped atomically.

Layout::

    WAREHOUSE/<table>/CURRENT            the name of the table's current version
    WAREHOUSE/<table>/v<random>/*.parquet  one version of the table's rows

A table exists once its ``CURRENT`` file does. A change to a table never touches the
files readers use: a rewrite (load, UPDATE, DELETE) writes a new version beside the
current one, and ``publish`` points ``CURRENT`` at it with one atomic rename; an append
writes a file under a hidden name (Spark skips names starting ``_`` or ``.``) and renames
it into the current version. So a crash leaves each table as it was before or after one
change, never between.

Spark SQL has no transactions over such files, so the warehouse keeps a journal of the
changes made inside ``transaction()``: a rollback points each table back at its old
version and removes appended files; a commit deletes the versions it replaced. One
writer at a time per table (the journal is this process's): ``docs/spark.md``.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

CURRENT = "CURRENT"


@dataclass
class _Journal:
    """What to undo on rollback, and what to delete on commit."""

    undo: list[Callable[[], None]] = field(default_factory=list)
    garbage: list[Path] = field(default_factory=list)


class Warehouse:
    """Tables as versioned Parquet directories under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._journal: _Journal | None = None

    # -- reading --------------------------------------------------------------------

    def names(self) -> list[str]:
        return sorted(p.parent.name for p in self.root.glob(f"*/{CURRENT}"))

    def current(self, table: str) -> Path | None:
        """The directory of the table's current version, or None if there is no table."""
        try:
            version = (self.root / table / CURRENT).read_text().strip()
        except FileNotFoundError:
            return None
        return self.root / table / version

    def stamp(self, table: str) -> tuple[str, int] | None:
        """The current version and its number of files: changes with every write (a version
        only ever gains files; file times are too coarse to tell two quick appends apart)."""
        current = self.current(table)
        if current is None:
            return None
        try:
            return current.name, sum(1 for _ in os.scandir(current))
        except FileNotFoundError:  # replaced meanwhile: the next look finds the new one
            return None

    def bytes(self, table: str) -> int:
        current = self.current(table)
        if current is None:
            return 0
        return sum(p.stat().st_size for p in current.glob("*.parquet") if p.name[0] not in "._")

    # -- writing ----------------------------------------------------------------------

    def new_version(self, table: str) -> Path:
        """A fresh, empty directory for a version of ``table`` (not yet current)."""
        version = self.root / table / f"v{secrets.token_hex(8)}"
        version.mkdir(parents=True)
        return version

    def write_version(
        self, table: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
    ) -> tuple[Path, int]:
        """A new version holding ``batches`` in one Parquet file; returns it and its rows."""
        version = self.new_version(table)
        try:
            rows = _write_file(version / "part-0.parquet", schema, batches)
        except BaseException:
            shutil.rmtree(version, ignore_errors=True)
            raise
        return version, rows

    def publish(self, table: str, version: Path) -> None:
        """Make ``version`` the table's current one (atomically); the old one goes."""
        previous = self.current(table)
        _point(self.root / table, version.name)
        if self._journal is None:
            if previous is not None:
                shutil.rmtree(previous, ignore_errors=True)
            return
        self._journal.undo.append(lambda: self._restore(table, previous, version))
        if previous is not None:
            self._journal.garbage.append(previous)

    def append(self, table: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> int:
        """Add a file of rows to the table's current version; returns the rows added."""
        current = self.current(table)
        if current is None:
            raise FileNotFoundError(table)
        name = f"part-{secrets.token_hex(8)}.parquet"
        hidden = current / f"_{name}.tmp"
        try:
            rows = _write_file(hidden, schema, batches)
        except BaseException:
            hidden.unlink(missing_ok=True)
            raise
        final = current / name
        os.replace(hidden, final)
        if self._journal is not None:
            self._journal.undo.append(lambda: final.unlink(missing_ok=True))
        return rows

    def drop(self, table: str) -> None:
        directory = self.root / table
        if self._journal is None:
            shutil.rmtree(directory, ignore_errors=True)
            return
        hidden = self.root / f".dropped-{table}-{secrets.token_hex(4)}"
        os.replace(directory, hidden)  # invisible now, back on rollback
        self._journal.undo.append(lambda: os.replace(hidden, directory))
        self._journal.garbage.append(hidden)

    def rename(self, old: str, new: str) -> None:
        os.replace(self.root / old, self.root / new)  # one rename: old and new never both
        if self._journal is not None:
            self._journal.undo.append(lambda: os.replace(self.root / new, self.root / old))

    def discard(self, version: Path) -> None:
        shutil.rmtree(version, ignore_errors=True)

    # -- transactions -------------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        return self._journal is not None

    def begin(self) -> None:
        self._journal = _Journal()

    def commit(self) -> None:
        journal, self._journal = self._journal, None
        for path in journal.garbage if journal else []:
            shutil.rmtree(path, ignore_errors=True)

    def rollback(self) -> None:
        journal, self._journal = self._journal, None
        for undo in reversed(journal.undo if journal else []):
            undo()

    def _restore(self, table: str, previous: Path | None, version: Path) -> None:
        if previous is None:
            (self.root / table / CURRENT).unlink(missing_ok=True)
        else:
            _point(self.root / table, previous.name)
        shutil.rmtree(version, ignore_errors=True)


def _point(directory: Path, version: str) -> None:
    """Write ``CURRENT`` by renaming a finished file over it: readers see old or new."""
    temporary = directory / f".{CURRENT}.{secrets.token_hex(4)}"
    temporary.write_text(version + "\n")
    os.replace(temporary, directory / CURRENT)


def _write_file(path: Path, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> int:
    """One Parquet file of ``batches`` (an empty file keeps the schema); returns the rows."""
    rows = 0
    with pq.ParquetWriter(path, _storable(schema)) as writer:
        for batch in batches:
            writer.write_batch(batch.cast(_storable(batch.schema)))
            rows += batch.num_rows
    return rows


def _storable(schema: pa.Schema) -> pa.Schema:
    """Spark reads large and view variants of Arrow types as their plain forms."""
    plain = {
        pa.large_binary(): pa.binary(),
        pa.binary_view(): pa.binary(),
        pa.large_string(): pa.string(),
        pa.string_view(): pa.string(),
    }
    return pa.schema([f.with_type(plain.get(f.type, f.type)) for f in schema])
