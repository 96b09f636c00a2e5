"""The file operations of a Spark warehouse: a local directory, or any Hadoop file system.

``LocalFiles`` works on a directory of this machine (or a shared mount) with ``os`` calls
and writes Parquet with Arrow's writer. ``HadoopFiles`` works on a Hadoop URL
(``hdfs://``, ``s3a://``, ``abfs://``, ``file://``, ...) through Hadoop's ``FileSystem``
and ``FileContext`` in the Spark application's JVM (the connectors on Spark's class path
decide which schemes work), and has Spark write the Parquet files. Both give the warehouse
what it builds its atomicity on: an atomic replacing rename of a small file, an exclusive
create, and listing.

Locations are strings: a path for ``LocalFiles``, a URL for ``HadoopFiles``; ``join``
builds them.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

# A lock file not renewed for this long belongs to a writer that died (Hadoop has no
# advisory locks that die with their process, as flock's do).
LEASE_SECONDS = 120.0


class Files(Protocol):
    """What the warehouse needs of a file system."""

    root: str

    def join(self, *parts: str) -> str: ...

    def read_text(self, location: str) -> str | None:
        """The file's text, or None when there is no such file."""

    def replace_text(self, location: str, text: str) -> None:
        """Write the file so that readers see its old text or the new, never a part."""

    def create_exclusive(self, location: str, text: str) -> bool:
        """Create the file with ``text`` unless it exists (atomically); was it created?"""

    def touch(self, location: str) -> None: ...

    def age(self, location: str) -> float | None:
        """Seconds since the file last changed, or None when there is none."""

    def list(self, location: str) -> list[tuple[str, bool, int]]:
        """(name, is a directory, size) of each entry; empty when there is no such directory."""

    def exists(self, location: str) -> bool: ...

    def make_dirs(self, location: str) -> None: ...

    def rename(self, source: str, target: str) -> None:
        """Move a file or directory to a name that does not exist yet."""

    def delete(self, location: str) -> None:
        """Remove a file or a directory with everything in it (nothing if absent)."""

    def write_parquet(
        self, directory: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
    ) -> int:
        """Write the rows as Parquet file(s) in a new ``directory``; returns the rows."""


class LocalFiles:
    """A warehouse directory on this machine (or a shared mount)."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = str(root)

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def read_text(self, location: str) -> str | None:
        try:
            return Path(location).read_text()
        except FileNotFoundError:
            return None

    def replace_text(self, location: str, text: str) -> None:
        temporary = f"{location}.{os.getpid()}.{time.monotonic_ns()}.tmp"
        Path(temporary).write_text(text)
        os.replace(temporary, location)

    def create_exclusive(self, location: str, text: str) -> bool:
        try:
            with open(location, "x") as handle:
                handle.write(text)
        except FileExistsError:
            return False
        return True

    def touch(self, location: str) -> None:
        Path(location).touch()

    def age(self, location: str) -> float | None:
        try:
            return time.time() - os.stat(location).st_mtime
        except FileNotFoundError:
            return None

    def list(self, location: str) -> list[tuple[str, bool, int]]:
        try:
            with os.scandir(location) as entries:
                return [
                    (e.name, e.is_dir(), 0 if e.is_dir() else e.stat().st_size) for e in entries
                ]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def exists(self, location: str) -> bool:
        return os.path.exists(location)

    def make_dirs(self, location: str) -> None:
        os.makedirs(location, exist_ok=True)

    def rename(self, source: str, target: str) -> None:
        os.rename(source, target)

    def delete(self, location: str) -> None:
        if os.path.isdir(location) and not os.path.islink(location):
            shutil.rmtree(location, ignore_errors=True)
        else:
            Path(location).unlink(missing_ok=True)

    def write_parquet(
        self, directory: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
    ) -> int:
        os.makedirs(directory)
        rows = 0
        with pq.ParquetWriter(os.path.join(directory, "part-0.parquet"), storable(schema)) as out:
            for batch in batches:
                out.write_batch(batch.cast(storable(batch.schema)))
                rows += batch.num_rows
        return rows


class HadoopFiles:
    """A warehouse at a Hadoop URL, through the Spark application's Hadoop client."""

    def __init__(self, spark: Any, root: str) -> None:
        self._spark = spark
        self._jvm = spark._jvm
        conf = spark._jsc.hadoopConfiguration()
        self._path = self._jvm.org.apache.hadoop.fs.Path
        self.root = root.rstrip("/")
        self._fs = self._path(self.root).getFileSystem(conf)
        uri = self._fs.getUri()
        self._context = self._jvm.org.apache.hadoop.fs.FileContext.getFileContext(uri, conf)
        self._fs.mkdirs(self._path(self.root))

    def join(self, *parts: str) -> str:
        return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts))

    def read_text(self, location: str) -> str | None:
        path = self._path(location)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data).decode()

    def replace_text(self, location: str, text: str) -> None:
        temporary = f"{location}.{os.getpid()}.{time.monotonic_ns()}.tmp"
        self._write(temporary, text, overwrite=False)
        gateway = self._spark.sparkContext._gateway
        options = gateway.new_array(self._jvm.org.apache.hadoop.fs.Options.Rename, 1)
        options[0] = self._jvm.org.apache.hadoop.fs.Options.Rename.OVERWRITE
        self._context.rename(self._path(temporary), self._path(location), options)

    def create_exclusive(self, location: str, text: str) -> bool:
        from py4j.protocol import Py4JJavaError

        try:
            self._write(location, text, overwrite=False)
        except Py4JJavaError as exc:
            if "FileAlreadyExists" in str(exc.java_exception.getClass().getName()):
                return False
            if self._fs.exists(self._path(location)):
                return False
            raise
        return True

    def _write(self, location: str, text: str, *, overwrite: bool) -> None:
        stream = self._fs.create(self._path(location), overwrite)
        try:
            stream.write(bytearray(text.encode()))
        finally:
            stream.close()

    def touch(self, location: str) -> None:
        self._fs.setTimes(self._path(location), int(time.time() * 1000), -1)

    def age(self, location: str) -> float | None:
        path = self._path(location)
        if not self._fs.exists(path):
            return None
        return time.time() - self._fs.getFileStatus(path).getModificationTime() / 1000

    def list(self, location: str) -> list[tuple[str, bool, int]]:
        path = self._path(location)
        if not self._fs.exists(path) or not self._fs.getFileStatus(path).isDirectory():
            return []
        return [
            (s.getPath().getName(), bool(s.isDirectory()), int(s.getLen()))
            for s in self._fs.listStatus(path)
        ]

    def exists(self, location: str) -> bool:
        return bool(self._fs.exists(self._path(location)))

    def make_dirs(self, location: str) -> None:
        self._fs.mkdirs(self._path(location))

    def rename(self, source: str, target: str) -> None:
        if not self._fs.rename(self._path(source), self._path(target)):
            raise OSError(f"the file system refused to rename {source} to {target}")

    def delete(self, location: str) -> None:
        self._fs.delete(self._path(location), True)

    def write_parquet(
        self, directory: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
    ) -> int:
        table = pa.Table.from_batches(list(batches), storable(schema))
        frame = self._spark.createDataFrame(table) if table.num_rows else self._empty(schema)
        frame.write.mode("errorifexists").parquet(directory)
        return table.num_rows

    def _empty(self, schema: pa.Schema) -> Any:
        """An empty frame of ``schema`` (Spark infers nothing from zero Arrow rows)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        return self._spark.createDataFrame([], from_arrow_schema(storable(schema)))


def storable(schema: pa.Schema) -> pa.Schema:
    """Spark reads large and view variants of Arrow types as their plain forms."""
    plain = {
        pa.large_binary(): pa.binary(),
        pa.binary_view(): pa.binary(),
        pa.large_string(): pa.string(),
        pa.string_view(): pa.string(),
    }
    return pa.schema([f.with_type(plain.get(f.type, f.type)) for f in schema])


def is_hadoop_url(location: str) -> bool:
    """A ``scheme://`` location (Hadoop's), rather than a path of this machine."""
    scheme, sep, _ = location.partition("://")
    return bool(sep) and scheme.replace("+", "").replace("-", "").isalnum()
