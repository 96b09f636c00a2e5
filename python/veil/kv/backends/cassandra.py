"""Apache Cassandra as a MiniCrypt store (``cassandra://host[:port]/keyspace``).

Layout (paper 002, §7)
----------------------
Every Veil table is one CQL table::

    PRIMARY KEY ((part), key) WITH CLUSTERING ORDER BY (key DESC)

``part`` is the partition key that Cassandra hashes onto its token ring;
``key`` (a blob, compared as unsigned bytes) orders rows inside a partition.
The MiniCrypt core picks ``part``: a keyed hash bucket
``HMAC-SHA256(k_part, key bucket) mod N`` for packs (``default_partitions`` =
8 as in §7; ``?partitions=N`` in the URL changes it for new tables; a key
bucket is a run of consecutive integer keys, see :mod:`veil.kv.layout`, or
one key in tables created before buckets) or an epoch number for APPEND-mode
inserts. Packs never span buckets: the core packs the keys of
each bucket separately, so the floor lookup of Figure 3 ("largest packID <=
k") is exact and stays a single-partition query, in the partition of k.

Costs: ``get``/``floor``/``update_if`` touch one partition (a floor is a
one-row slice, cheap because rows are stored in descending order, the
direction of the slice). A range ``[low, high]`` costs one floor plus one
slice per partition its key buckets reach: 2 round trips for most short
ranges, 2N for long ones. :meth:`CassandraBackend.scan`
sends its query when called (not when first iterated), so a caller that opens
every partition's scan before reading overlaps them. Ascending scans are
reversed slices, served from the same index.

The alternative -- range buckets (partition = high bits of the key, clustering
= packID) with a floor that falls back to earlier buckets when its own bucket
has no packID <= k -- would make short ranges single-partition, but puts a
time-ordered (APPEND) workload on one hot partition and needs an unbounded
(or directory-assisted) search of earlier buckets for floors. Hashed key
buckets keep floors exact and load spread over buckets (of ~8 packs each),
while short ranges mostly stay in one partition. A time-ordered workload
still writes one bucket, so one partition, at a time.

Consistency
-----------
Plain reads and writes run at ``QUORUM``; conditional writes are lightweight
transactions (Paxos) with serial consistency ``SERIAL``. A lightweight
transaction that times out has an unknown outcome: Paxos may still commit it.
Such a write is resolved by a ``SERIAL`` read of the row (which finishes any
in-flight proposal): it happened iff the row now carries this write's tag. Tags
are hashes of freshly encrypted packs, so no other write carries the same tag.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cassandra import ConsistencyLevel, OperationTimedOut, WriteTimeout
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    NoHostAvailable,
    ResponseFuture,
    Session,
)
from cassandra.policies import RoundRobinPolicy
from cassandra.query import PreparedStatement, tuple_factory

from veil.errors import ParameterError, VeilError
from veil.kv.backends.base import Row

DEFAULT_PORT = 9042
DEFAULT_PARTITIONS = 8
PAGE_ROWS = 500
REQUEST_TIMEOUT_S = 30.0
UNKNOWN_OUTCOME_RETRIES = 5
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")

QUERIES = {
    "get": "SELECT key, value, tag FROM {t} WHERE part = ? AND key = ?",
    "floor": "SELECT key, value, tag FROM {t} WHERE part = ? AND key <= ? LIMIT 1",
    "scan": "SELECT key, value, tag FROM {t} WHERE part = ? AND key >= ? AND key <= ? "
    "ORDER BY key ASC",
    "scan_from": "SELECT key, value, tag FROM {t} WHERE part = ? AND key >= ? ORDER BY key ASC",
    "scan_to": "SELECT key, value, tag FROM {t} WHERE part = ? AND key <= ? ORDER BY key ASC",
    "scan_all": "SELECT key, value, tag FROM {t} WHERE part = ? ORDER BY key ASC",
    "insert_if": "INSERT INTO {t} (part, key, value, tag) VALUES (?, ?, ?, ?) IF NOT EXISTS",
    "update_if": "UPDATE {t} SET value = ?, tag = ? WHERE part = ? AND key = ? IF tag = ?",
    "upsert": "INSERT INTO {t} (part, key, value, tag) VALUES (?, ?, ?, ?)",
    "delete": "DELETE FROM {t} WHERE part = ? AND key = ?",
    "delete_partition": "DELETE FROM {t} WHERE part = ?",
    "sizes": "SELECT key, value, tag FROM {t}",
}


class CassandraBackendError(VeilError):
    """Cassandra could not be reached or did not answer as expected."""

    anchor = "cassandra-backend"


def open_backend(url: str) -> CassandraBackend:
    """Open ``cassandra://host[,host2][:port]/keyspace[?replication_factor=N&partitions=N]``.

    ``partitions`` sets the number of hash partitions new tables use (default 8).
    """
    parts = urlsplit(url)
    keyspace = parts.path.strip("/")
    if parts.scheme != "cassandra" or not parts.hostname or not _NAME.match(keyspace):
        raise ParameterError(
            f"bad Cassandra URL {url!r}; write cassandra://host:port/keyspace "
            "(keyspace: lowercase letters, digits and _ , starting with a letter)"
        )
    hosts = [h.rsplit(":", 1)[0] for h in parts.netloc.split(",")]
    options = parse_qs(parts.query)
    try:
        replication = int(options.get("replication_factor", ["1"])[0])
        partitions = int(options.get("partitions", [str(DEFAULT_PARTITIONS)])[0])
    except ValueError:
        raise ParameterError(f"bad option in Cassandra URL {url!r}: expected integers") from None
    if replication < 1 or partitions < 1:
        raise ParameterError(f"replication_factor and partitions must be >= 1 in {url!r}")
    backend = CassandraBackend(hosts, parts.port or DEFAULT_PORT, keyspace, replication)
    backend.default_partitions = partitions
    return backend


class CassandraBackend:
    """A :class:`~veil.kv.backends.base.KVBackend` over one Cassandra keyspace."""

    default_partitions = DEFAULT_PARTITIONS

    def __init__(self, hosts: list[str], port: int, keyspace: str, replication_factor: int = 1):
        self.keyspace = keyspace
        self._session: Session | None = _connect(hosts, port)
        self._prepared: dict[tuple[str, str], PreparedStatement] = {}
        self._lock = threading.Lock()
        self._run(
            f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {int(replication_factor)}}}"
        )

    # -- tables ---------------------------------------------------------
    def ensure_table(self, table: str) -> None:
        self._run(
            f"CREATE TABLE IF NOT EXISTS {self._qualified(table)} (part bigint, key blob, "
            "value blob, tag blob, PRIMARY KEY ((part), key)) "
            "WITH CLUSTERING ORDER BY (key DESC)"
        )

    def drop_table(self, table: str) -> None:
        self._run(f"DROP TABLE IF EXISTS {self._qualified(table)}")
        with self._lock:
            for name in [n for n in self._prepared if n[0] == table]:
                del self._prepared[name]

    # -- reads ----------------------------------------------------------
    def get(self, table: str, partition: int, key: bytes) -> Row | None:
        return self._first(self._execute(table, "get", (partition, key)))

    def floor(self, table: str, partition: int, key: bytes) -> Row | None:
        return self._first(self._execute(table, "floor", (partition, key)))

    def scan(
        self,
        table: str,
        partition: int,
        low: bytes | None = None,
        high: bytes | None = None,
        *,
        limit: int | None = None,
    ) -> Iterator[Row]:
        # Not a generator: the first page is requested now, so a caller that
        # opens one scan per partition before reading any has them all in flight.
        if limit is not None and limit <= 0:
            return iter(())
        params: tuple[Any, ...]
        if low is not None and high is not None:
            name, params = "scan", (partition, low, high)
        elif low is not None:
            name, params = "scan_from", (partition, low)
        elif high is not None:
            name, params = "scan_to", (partition, high)
        else:
            name, params = "scan_all", (partition,)
        future = self._live().execute_async(self._statement(table, name), params)
        return _rows(future, limit)

    # -- writes ---------------------------------------------------------
    def insert_if_not_exists(
        self, table: str, partition: int, key: bytes, value: bytes, tag: bytes
    ) -> bool:
        params = (partition, key, value, tag)
        return self._conditional(table, "insert_if", params, partition, key, tag)

    def update_if(
        self,
        table: str,
        partition: int,
        key: bytes,
        value: bytes,
        tag: bytes,
        expected_tag: bytes,
    ) -> bool:
        params = (value, tag, partition, key, expected_tag)
        return self._conditional(table, "update_if", params, partition, key, tag)

    def upsert(self, table: str, partition: int, key: bytes, value: bytes, tag: bytes) -> None:
        self._execute(table, "upsert", (partition, key, value, tag))

    def delete(self, table: str, partition: int, key: bytes) -> None:
        self._execute(table, "delete", (partition, key))

    def delete_partition(self, table: str, partition: int) -> None:
        self._execute(table, "delete_partition", (partition,))

    def stored_bytes(self, table: str) -> int:
        total = 0
        for key, value, tag in self._execute(table, "sizes", ()):
            total += len(key or b"") + len(value or b"") + len(tag or b"")
        return total

    def close(self) -> None:
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            _release(session)

    # -- helpers --------------------------------------------------------
    def _conditional(
        self, table: str, name: str, params: tuple[Any, ...], part: int, key: bytes, tag: bytes
    ) -> bool:
        try:
            result = self._execute(table, name, params)
        except (WriteTimeout, OperationTimedOut):
            return self._resolve_unknown(table, part, key, tag)
        return bool(result.was_applied)

    def _resolve_unknown(self, table: str, part: int, key: bytes, tag: bytes) -> bool:
        # A SERIAL read completes or discards any in-flight Paxos proposal for
        # the row, so what it returns is final for our write.
        for attempt in range(UNKNOWN_OUTCOME_RETRIES):
            try:
                rows = self._execute(table, "get", (part, key), serial=True)
            except (WriteTimeout, OperationTimedOut):
                time.sleep(0.05 * (attempt + 1))
                continue
            row = self._first(rows)
            return row is not None and row.tag == tag
        raise CassandraBackendError(
            f"a conditional write to table {table} timed out and its outcome could not be "
            "read back; check that Cassandra is healthy and retry the operation"
        )

    def _execute(
        self, table: str, name: str, params: tuple[Any, ...], *, serial: bool = False
    ) -> Any:
        statement = self._statement(table, name)
        if serial:
            bound = statement.bind(params)
            bound.consistency_level = ConsistencyLevel.SERIAL
            return self._live().execute(bound)
        return self._live().execute(statement, params)

    def _statement(self, table: str, name: str) -> PreparedStatement:
        slot = (table, name)
        statement = self._prepared.get(slot)
        if statement is None:
            statement = self._live().prepare(QUERIES[name].format(t=self._qualified(table)))
            statement.fetch_size = PAGE_ROWS
            if name in ("insert_if", "update_if"):
                statement.serial_consistency_level = ConsistencyLevel.SERIAL
            with self._lock:
                self._prepared[slot] = statement
        return statement

    def _run(self, cql: str) -> None:
        self._live().execute(cql, timeout=120.0)

    def _live(self) -> Session:
        session = self._session
        if session is None:
            raise ParameterError(f"the Cassandra store (keyspace {self.keyspace}) is closed")
        return session

    def _qualified(self, table: str) -> str:
        if not _NAME.match(table):
            raise ParameterError(f"invalid backend table name {table!r}")
        return f"{self.keyspace}.{table}"

    @staticmethod
    def _first(rows: Any) -> Row | None:
        row = rows.one()
        return None if row is None else Row(row[0] or b"", row[1] or b"", row[2] or b"")


def _rows(future: ResponseFuture, limit: int | None) -> Iterator[Row]:
    # The result set fetches further pages (PAGE_ROWS each) lazily as we iterate.
    for count, row in enumerate(future.result(), start=1):
        yield Row(row[0] or b"", row[1] or b"", row[2] or b"")
        if limit is not None and count >= limit:
            return


# One driver session per (process, contact points): connecting costs ~0.1 s and
# a process (a store plus baselines in a benchmark) often opens several backends.
# Sessions are thread-safe and bound to no keyspace (statements name it).
_SESSIONS: dict[tuple[int, tuple[str, ...], int], tuple[Session, int]] = {}
_SESSIONS_LOCK = threading.Lock()


def _connect(hosts: list[str], port: int) -> Session:
    slot = (os.getpid(), tuple(hosts), port)
    with _SESSIONS_LOCK:
        session, users = _SESSIONS.get(slot, (None, 0))
        if session is None:
            session = _new_session(hosts, port)
        _SESSIONS[slot] = (session, users + 1)
        return session


# The driver leaves Nagle's algorithm on, and every request of 4 KB or more
# (a pack: every Veil write) then took ~45 ms more than it should, the
# server's delayed ACK: on a local node a 16 KB upsert went from 46-48 ms to
# 0.9-1.2 ms, its update-if from 49-51 ms to 3.3-3.6 ms (bench/RESULTS.md,
# issue 14, tenth round).
NO_DELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


def _new_session(hosts: list[str], port: int) -> Session:
    profile = ExecutionProfile(
        load_balancing_policy=RoundRobinPolicy(),
        consistency_level=ConsistencyLevel.QUORUM,
        serial_consistency_level=ConsistencyLevel.SERIAL,
        request_timeout=REQUEST_TIMEOUT_S,
        row_factory=tuple_factory,
    )
    cluster = Cluster(
        contact_points=hosts,
        port=port,
        protocol_version=5,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=10,
        sockopts=NO_DELAY,
    )
    try:
        return cluster.connect()
    except NoHostAvailable as exc:
        cluster.shutdown()
        raise CassandraBackendError(
            f"cannot reach Cassandra at {','.join(hosts)}:{port} ({exc}); start one with "
            "`veil kv cassandra start` and use the URL it prints"
        ) from exc


def _release(session: Session) -> None:
    with _SESSIONS_LOCK:
        for slot, (known, users) in list(_SESSIONS.items()):
            if known is session:
                if users > 1:
                    _SESSIONS[slot] = (known, users - 1)
                    return
                del _SESSIONS[slot]
    session.cluster.shutdown()
