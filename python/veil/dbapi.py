"""DB-API 2.0 (PEP 249) over Veil: ``veil.connect(client_dir)``.

Parameters use the ``qmark`` style::

    con = veil.connect("client")
    cur = con.cursor()
    cur.execute("SELECT o_orderkey FROM orders WHERE o_custkey = ?", [42])
    cur.fetchall()

Parameters are bound on the client and, where a predicate runs on the server,
sent only as ciphertexts. ``Cursor.fetch_arrow_table()`` returns the whole
result as a ``pyarrow.Table``.

Transactions: a connection starts in autocommit mode (each statement commits
on its own, atomically; Veil's behaviour before transactions, kept so that
existing code keeps its writes). With ``autocommit=False`` (as in psycopg) the
first statement opens a transaction that ``commit()`` ends or ``rollback()``
undoes; ``with con.transaction():`` is one transaction whatever the mode, and
``BEGIN``/``COMMIT``/``ROLLBACK`` statements work too. A transaction is one
server transaction: reads see its own writes, a failed statement fails it
(25P02 until ``rollback()``), and a conflict with another client's writes is a
``SerializationError`` (40001) to retry. DDL commits an open transaction
first and runs on its own (docs/sql.md, Transactions).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from veil.errors import (
    InterfaceError,
    ProgrammingError,
    VeilError,
)
from veil.exec.rows import table_rows
from veil.exec.session import Result, Session
from veil.sql.errors import InFailedTransactionError

apilevel = "2.0"
threadsafety = 1  # threads may share the module, not connections
paramstyle = "qmark"

Error = VeilError


def connect(
    client_dir: str | os.PathLike[str], *, external_access: bool = False, autocommit: bool = True
) -> Connection:
    """Open the Veil client directory ``client_dir`` and its server.

    ``external_access=True`` lets this application's own SQL read files on its
    machine through DuckDB's table functions (``read_csv``, ``read_parquet``...),
    as plaintext DuckDB would. It is off by default: statements then reach only
    the tables of the client directory, as they do through ``veil serve``.
    """
    connection = Connection(Session(client_dir, external_access=external_access))
    connection.autocommit = autocommit
    return connection


class Connection:
    def __init__(self, session: Session):
        self._session: Session | None = session
        self._autocommit = True

    @property
    def autocommit(self) -> bool:
        """Whether each statement commits on its own (else the first one opens a transaction)."""
        return self._autocommit

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        if self.session.in_transaction:
            raise ProgrammingError(
                "autocommit cannot change while a transaction is open: commit() or rollback() first"
            )
        self._autocommit = bool(value)

    @property
    def session(self) -> Session:
        if self._session is None:
            raise InterfaceError("the connection is closed")
        return self._session

    def cursor(self) -> Cursor:
        return Cursor(self)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Cursor:
        return self.cursor().execute(sql, params)

    def commit(self) -> None:
        """Make the open transaction's writes permanent (nothing to do in autocommit)."""
        if not self.session.commit():
            raise InFailedTransactionError(
                "the transaction had failed, so COMMIT rolled it back: none of its writes "
                "were kept; run it again"
            )

    def rollback(self) -> None:
        """Undo every write of the open transaction (nothing to do in autocommit)."""
        self.session.rollback()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A block that is one transaction: committed at its end, rolled back if it raises."""
        self.session.begin()
        try:
            yield self
        except BaseException:
            self.session.rollback()
            raise
        self.commit()

    def close(self) -> None:
        """Close the connection; an open transaction is rolled back."""
        if self._session is not None:
            try:
                self._session.rollback()
            finally:
                self._session.close()
                self._session = None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        """As psycopg: a transaction still open is committed, or rolled back on an error."""
        try:
            if kind is None and self._session is not None and self._session.in_transaction:
                self.commit()
        finally:
            self.close()


class Cursor:
    arraysize = 1

    def __init__(self, connection: Connection):
        self.connection = connection
        self._result: Result | None = None
        self._rows: list[tuple[Any, ...]] = []
        self._position = 0

    @property
    def description(self) -> list[tuple[str, str, None, None, None, None, bool]] | None:
        if self._result is None or not self._result.table.num_columns:
            return None
        return [
            (f.name, str(f.type), None, None, None, None, f.nullable)
            for f in self._result.table.schema
        ]

    @property
    def rowcount(self) -> int:
        return -1 if self._result is None else self._result.rowcount

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Cursor:
        from veil.statements import run

        connection = self.connection
        self._result = run(connection.session, sql, params, begin=not connection.autocommit)
        self._rows = table_rows(self._result.table)
        self._position = 0
        return self

    def executemany(self, sql: str, seq_of_params: Sequence[Sequence[Any]]) -> Cursor:
        total = 0
        for params in seq_of_params:
            total += max(self.execute(sql, params).rowcount, 0)
        if self._result is not None:
            self._result.rowcount = total
        return self

    def _need_result(self) -> Result:
        if self._result is None:
            raise InterfaceError("no statement has been executed on this cursor")
        return self._result

    def fetchone(self) -> tuple[Any, ...] | None:
        self._need_result()
        if self._position >= len(self._rows):
            return None
        self._position += 1
        return self._rows[self._position - 1]

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        self._need_result()
        count = self.arraysize if size is None else size
        rows = self._rows[self._position : self._position + count]
        self._position += len(rows)
        return rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        self._need_result()
        rows = self._rows[self._position :]
        self._position = len(self._rows)
        return rows

    def fetch_arrow_table(self) -> pa.Table:
        return self._need_result().table

    def setinputsizes(self, sizes: object) -> None:
        """Accepted and ignored, as PEP 249 allows."""

    def setoutputsize(self, size: object, column: object = None) -> None:
        """Accepted and ignored, as PEP 249 allows."""

    def close(self) -> None:
        self._result, self._rows = None, []

    def __iter__(self) -> Cursor:
        return self

    def __next__(self) -> tuple[Any, ...]:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row
