"""The storage interface MiniCrypt needs from an unmodified key-value store.

MiniCrypt (paper 002, §2.5.1) runs over any store that offers two things: an
ordered index on the row key (so that a floor lookup "largest key <= k" and a
range scan are cheap) and a single-row conditional write (``UPDATE ... IF``,
``INSERT ... IF NOT EXISTS``). Every backend implements :class:`KVBackend`; the
MiniCrypt core (``veil.kv``) is the only caller and knows nothing of SQL or CQL.

Data model
----------
A backend holds *tables*. A table holds *partitions* numbered by a
non-negative ``int`` (< 2**62). A partition holds *rows* ordered by their
``key`` (``bytes``, compared as unsigned byte strings, shorter-prefix first, as
``memcmp``/Python ``bytes`` comparison does). Every row has a ``value``
(``bytes``, possibly large: a whole encrypted pack) and a ``tag`` (``bytes``,
16 bytes in practice: the hash of the stored pack that update-if compares).
Partitions are independent ordered stores: no operation spans two partitions.
That is how §7 maps MiniCrypt onto Cassandra: partition = hash bucket (or
epoch), clustering key = ``key``. A backend with one global order (SQLite)
simply makes ``(partition, key)`` its primary key.

Everything the core passes is already opaque: table names are derived from
the key (they match ``^[a-z][a-z0-9_]{0,47}$``), keys are encoded keys or
pseudorandom packIDs, values are ciphertexts. A backend never sees plaintext
and must not log values.

Concurrency
-----------
One backend object belongs to one store in one process, but the store calls it
from its own thread *and* from its background thread (APPEND-mode merge and
epoch management), so every method must be safe to call concurrently from
several threads of one process. Several processes (or machines) open their
own backend objects on the same database; correctness between them rests only
on :meth:`KVBackend.insert_if_not_exists` and :meth:`KVBackend.update_if`
being atomic per row (linearizable for that row), as Cassandra's lightweight
transactions and SQLite's locked writes are. Plain reads and blind writes may
be eventually consistent; the protocols tolerate that.

Opening a backend from a URL
----------------------------
Each backend module ``veil.kv.backends.<scheme>`` exposes
``open_backend(url: str) -> KVBackend`` for URLs ``<scheme>://...``;
:func:`veil.kv.backends.open_backend` dispatches on the scheme. A backend also
exposes ``default_partitions: int``: how many hash partitions the core should
spread packs over (1 for SQLite, 8 for Cassandra as in §7).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple, Protocol, runtime_checkable


class Row(NamedTuple):
    """One stored row: its key, its value (a ciphertext) and its update-if tag."""

    key: bytes
    value: bytes
    tag: bytes


@runtime_checkable
class KVBackend(Protocol):
    """An ordered key-value store with single-row conditional writes."""

    default_partitions: int

    def ensure_table(self, table: str) -> None:
        """Create ``table`` if it does not exist (idempotent, safe to race)."""
        ...

    def drop_table(self, table: str) -> None:
        """Remove ``table`` and all its rows if it exists (tests and benchmarks)."""
        ...

    def get(self, table: str, partition: int, key: bytes) -> Row | None:
        """The row with exactly this key, or None."""
        ...

    def floor(self, table: str, partition: int, key: bytes) -> Row | None:
        """The row with the largest key <= ``key`` in the partition, or None.

        This is Figure 3's ``WHERE packID <= key ORDER BY packID DESC LIMIT 1``.
        """
        ...

    def scan(
        self,
        table: str,
        partition: int,
        low: bytes | None = None,
        high: bytes | None = None,
        *,
        limit: int | None = None,
    ) -> Iterator[Row]:
        """Rows with ``low <= key <= high`` (None = unbounded), ascending by key.

        At most ``limit`` rows when given. The iterator may fetch lazily in
        pages; callers consume it promptly and do not write to the same
        partition while iterating is not required (but they may).
        """
        ...

    def insert_if_not_exists(
        self, table: str, partition: int, key: bytes, value: bytes, tag: bytes
    ) -> bool:
        """Insert the row unless a row with this key exists; True if inserted.

        Atomic per row: of several concurrent callers with the same key, exactly
        one gets True (``INSERT ... IF NOT EXISTS``).
        """
        ...

    def update_if(
        self,
        table: str,
        partition: int,
        key: bytes,
        value: bytes,
        tag: bytes,
        expected_tag: bytes,
    ) -> bool:
        """Replace value and tag of an existing row only if its tag is ``expected_tag``.

        Returns True if the row was changed; False if the row is missing or its
        tag differs (``UPDATE ... SET value=?, tag=? WHERE key=? IF tag=?``).
        Atomic per row.
        """
        ...

    def upsert(self, table: str, partition: int, key: bytes, value: bytes, tag: bytes) -> None:
        """Blind write: insert or overwrite the row unconditionally (APPEND-mode puts)."""
        ...

    def delete(self, table: str, partition: int, key: bytes) -> None:
        """Remove the row if it exists (unconditional)."""
        ...

    def delete_partition(self, table: str, partition: int) -> None:
        """Remove every row of the partition (deleting a merged epoch, §6.1.4)."""
        ...

    def stored_bytes(self, table: str) -> int:
        """Bytes the server stores for ``table``: sum of key, value and tag lengths.

        A logical figure (no index or file overhead) that benchmarks compare
        across clients; it may scan the whole table.
        """
        ...

    def close(self) -> None:
        """Release connections; the object is unusable afterwards. Idempotent."""
        ...
