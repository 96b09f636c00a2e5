"""Running a scan: RemoteSQL -> Arrow ciphertexts -> decrypt -> plaintext Arrow table."""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import cache, partial

import numpy as np
import pyarrow as pa
from sqlglot import exp

from veil.backends import Backend
from veil.crypto.keys import MasterKey
from veil.crypto.rowblocks import BlockIntegrityError, RowBlocks
from veil.design.fresh import DATA_STATISTICS
from veil.design.model import BLOCKS, DET, OPE, AsheSums, Encryption, HomGroup, TableDesign
from veil.encoding import decode
from veil.errors import InternalError
from veil.exec.ashe_sums import AsheSumsCipher, finish_ashe_sums
from veil.exec.blocks import block_key, block_number, covering_blocks, values_at
from veil.exec.ciphers import (
    BytesForm,
    ColumnCipher,
    OrderedBytesForm,
    RowBoundCipher,
    column_cipher,
)
from veil.exec.encrypt import rnd_context
from veil.exec.hom_group import HomGroupCipher
from veil.exec.joined_sums import finish_joined_sums
from veil.sql.plan import JOIN_ROW, RND_ROW_ID, ROW_ID, JoinedFetch, Scan
from veil.sql.remote import (
    Extras,
    block_index_statement,
    block_payloads_statement,
    joined_statement,
    render,
    scan_statement,
)


@dataclass
class StepRun:
    """What one plan step (a scan, or a server join) took and returned: its statements
    (with the blocks they read) and the decryption of their rows."""

    statements: int = 0
    rows: int = 0
    bytes: int = 0
    server_seconds: float = 0.0
    decrypt_seconds: float = 0.0


@dataclass
class FetchStats:
    """Where a query's time and bytes went (``veil demo``, ``explain --analyze``, benchmarks)."""

    statements: int = 0
    bytes_received: int = 0
    server_seconds: float = 0.0
    decrypt_seconds: float = 0.0
    local_seconds: float = 0.0
    remote_sql: list[str] = field(default_factory=list)
    steps: dict[int, StepRun] = field(default_factory=dict)  # by id of the scan / server join
    step: int | None = None  # the step whose statements run now

    def decrypted(self, started: float, server_before: float) -> None:
        """Count the time since ``started`` as decryption, less the statements run meanwhile
        (a BLOCKS column's blocks), which count as the server's."""
        seconds = time.perf_counter() - started
        self.decrypt_seconds += seconds
        if self.step is not None:
            during = self.server_seconds - server_before
            self.steps[self.step].decrypt_seconds += max(0.0, seconds - during)


class CipherCache:
    """Column ciphers of one session, made once (key derivation is not free)."""

    def __init__(self, master: MasterKey):
        self._master = master
        self._ciphers: dict[tuple[str, str, str], ColumnCipher] = {}
        self._groups: dict[tuple[str, str], HomGroupCipher] = {}
        self._sums: dict[tuple[str, str], AsheSumsCipher] = {}
        self._blocks: dict[tuple[str, str], RowBlocks] = {}

    def get(self, table: TableDesign, encryption: Encryption) -> ColumnCipher:
        # keyed by what the cipher is made of, not only by name: a designer's candidate
        # encryption may share a live one's name without its load-time form (narrow
        # DET, the bytes form); a cipher made for it would encrypt the live column's
        # constants wrongly (TPC-H Q13's LIKE flag matched no row after a design run)
        key = (table.server_name, encryption.name, _made_of(encryption))
        if key not in self._ciphers:
            context = rnd_context(table, encryption)
            self._ciphers[key] = column_cipher(self._master, encryption, context)
        return self._ciphers[key]

    def group(self, table: TableDesign) -> HomGroupCipher:
        """The cipher of the table's packed HOM group."""
        assert table.hom is not None
        key = (table.server_name, _made_of(table.hom))
        if key not in self._groups:
            self._groups[key] = HomGroupCipher(self._master, table.hom)
        return self._groups[key]

    def blocks(self, table: TableDesign, encryption: Encryption) -> RowBlocks:
        """The key of a BLOCKS column."""
        key = (table.server_name, encryption.name)
        if key not in self._blocks:
            self._blocks[key] = block_key(self._master, table, encryption)
        return self._blocks[key]

    def ashe(self, table: TableDesign) -> AsheSumsCipher:
        """The ASHE keys of the table's summed expressions."""
        assert table.sums is not None
        key = (table.server_name, _made_of(table.sums))
        if key not in self._sums:
            self._sums[key] = AsheSumsCipher(self._master, table.sums)
        return self._sums[key]


def _made_of(part: Encryption | HomGroup | AsheSums) -> str:
    """What a cipher is derived from, as text: a design part without its statistics."""
    if isinstance(part, Encryption):  # on every column of every query: kept cheap
        params = sorted((k, repr(v)) for k, v in part.params.items() if k not in DATA_STATISTICS)
        return repr((part.scheme, part.type, part.key_scope, part.source, params))
    return json.dumps(asdict(part), sort_keys=True, default=str)


# Rendered statements kept by a plan, by id of the scan or server join they fetch
Rendered = dict[int, tuple[str, list[object]]]


def run_remote(statement: exp.Expression, backend: Backend, stats: FetchStats) -> pa.Table:
    """Run one RemoteSQL statement, counting its time and bytes."""
    return _run_rendered(render(statement, backend), backend, stats)


def _run_kept(
    key: int,
    build: Callable[[], exp.Expression],
    kept: Rendered | None,
    backend: Backend,
    stats: FetchStats,
) -> pa.Table:
    """Run a plan's statement, rendered once: ``kept`` (None: this run's filters change it)."""
    if kept is None:
        return run_remote(build(), backend, stats)
    if key not in kept:
        kept[key] = render(build(), backend)
    return _run_rendered(kept[key], backend, stats)


def _run_rendered(
    rendered: tuple[str, list[object]], backend: Backend, stats: FetchStats
) -> pa.Table:
    sql, params = rendered
    started = time.perf_counter()
    fetched = backend.execute(sql, params or None)
    seconds = time.perf_counter() - started
    stats.server_seconds += seconds
    stats.statements += 1
    stats.bytes_received += fetched.nbytes
    stats.remote_sql.append(sql)
    if stats.step is not None:
        step = stats.steps.setdefault(stats.step, StepRun())
        step.statements += 1
        step.rows += fetched.num_rows
        step.bytes += fetched.nbytes
        step.server_seconds += seconds
    return fetched


def run_scan(
    scan: Scan,
    extras: Extras,
    backend: Backend,
    ciphers: CipherCache,
    stats: FetchStats,
    kept: Rendered | None = None,
) -> pa.Table:
    """The scan's rows (``extras``: filters found at run time), decrypted.

    ``kept``: the plan's rendered statements, reused when no run-time filter applies.
    """
    keep = kept if not extras.get(id(scan)) else None
    build = lambda: scan_statement(scan, extras)  # noqa: E731
    stats.step = id(scan)
    try:
        if scan.aggregation is not None and scan.aggregation.id_bit is not None:
            with backend.hash_aggregation():  # its (keys, block) groups: far fewer than rows
                fetched = _run_kept(id(scan), build, keep, backend, stats)
        else:
            fetched = _run_kept(id(scan), build, keep, backend, stats)
        started, server_before = time.perf_counter(), stats.server_seconds
        if scan.aggregation is not None and scan.aggregation.hom_product is not None:
            from veil.exec.hom_fetch import finish_packed_sums

            plain = finish_packed_sums(fetched, scan, ciphers)
        elif scan.aggregation is not None and scan.aggregation.id_bit is not None:
            plain = finish_ashe_sums(fetched, scan, ciphers)
        else:
            fetched, repeats = _repeats_column(fetched, scan.counted)
            blocks = BlockReader(backend, stats)
            plain = decrypt_columns(
                fetched, scan.table, scan.fetched(), ciphers, blocks, scan.ciphertext
            )
            plain = plain if repeats is None else plain.take(repeats)
        stats.decrypted(started, server_before)
        return plain
    finally:
        stats.step = None


def run_joined(
    fetch: JoinedFetch,
    extras: Extras,
    backend: Backend,
    ciphers: CipherCache,
    stats: FetchStats,
    kept: Rendered | None = None,
) -> dict[str, pa.Table]:
    """The joined rows split into one local table per scan, paired by ``JOIN_ROW``."""
    keep = kept if not any(extras.get(id(s)) for s in fetch.scans) else None
    build = lambda: joined_statement(fetch, extras)  # noqa: E731
    stats.step = id(fetch)
    try:
        fetched = _run_kept(id(fetch), build, keep, backend, stats)
        started, server_before = time.perf_counter(), stats.server_seconds
        fetched, repeats = _repeats_column(fetched, fetch.counted)
        rows = fetched.num_rows if repeats is None else len(repeats)
        row_numbers = pa.array(np.arange(rows, dtype=np.int64))
        tables: dict[str, pa.Table] = {}
        wanted = fetch.fetched()
        sums = None  # ASHE sums over the join: the columns after the scans' own
        if fetch.groups is not None and fetch.groups.summed is not None:
            tail = list(range(len(wanted), fetched.num_columns))
            sums, fetched = fetched.select(tail), fetched.select(range(len(wanted)))
        jobs = []
        for scan in fetch.scans:
            indexes = [i for i, (owner, _, _) in enumerate(wanted) if owner is scan]
            part = fetched.select(indexes)
            pairs = [(column, enc) for owner, column, enc in wanted if owner is scan]
            blocks = BlockReader(backend, stats)
            jobs.append(_Decryption(part, scan.table, pairs, ciphers, blocks, ()))
        results = _run_all(jobs)  # every part's columns side by side
        if sums is not None:
            assert fetch.groups is not None
            parts = [
                (scan, job.finish(done))
                for scan, job, done in zip(fetch.scans, jobs, results, strict=True)
            ]
            tables = finish_joined_sums(parts, sums, fetch.groups, ciphers)
            stats.decrypted(started, server_before)
            return tables
        for scan, job, done in zip(fetch.scans, jobs, results, strict=True):
            plain = job.finish(done)
            plain = plain if repeats is None else plain.take(repeats)
            columns = dict(zip(plain.column_names, plain.columns, strict=True))
            tables[scan.local_name] = pa.table({**columns, JOIN_ROW: row_numbers})
        stats.decrypted(started, server_before)
        return tables
    finally:
        stats.step = None


def _repeats_column(fetched: pa.Table, counted: bool) -> tuple[pa.Table, pa.Array | None]:
    """A counted fetch's rows without their counts, and the positions that repeat each
    row its count's times (``count_repeats``); ``(fetched, None)`` for any other fetch."""
    if not counted:
        return fetched, None
    last = fetched.num_columns - 1
    counts = fetched.column(last).to_numpy(zero_copy_only=False).astype(np.int64)
    positions = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return fetched.remove_column(last), pa.array(positions)


class BlockReader:
    """Fetches and opens the blocks of BLOCKS columns for a scan's rows."""

    def __init__(self, backend: Backend, stats: FetchStats):
        self._backend = backend
        self._stats = stats

    def read(
        self, table: TableDesign, encs: list[Encryption], ids: np.ndarray, ciphers: CipherCache
    ) -> dict[str, pa.Array]:
        """The encoded values of ``encs`` (BLOCKS columns) for the rows ``ids``."""
        wanted = np.unique(ids)
        index = run_remote(
            block_index_statement(table, block_number(table, encs[0])), self._backend, self._stats
        )
        firsts = index.column(0).to_numpy()
        order = np.argsort(firsts)
        starts, counts = firsts[order], index.column(1).to_numpy()[order].astype(np.int64)
        chosen = starts[covering_blocks(starts, counts, wanted)] if len(wanted) else starts[:0]
        numbers = {block_number(table, e): e.name for e in encs}
        found = (
            run_remote(
                block_payloads_statement(table, list(numbers), chosen.tolist()),
                self._backend,
                self._stats,
            )
            if len(chosen)
            else None
        )
        opened: dict[str, dict[int, pa.Array]] = {e.name: {} for e in encs}
        by_name = {e.name: ciphers.blocks(table, e) for e in encs}
        if found is not None:
            for number, first, count, payload in zip(
                *(found.column(i).to_pylist() for i in range(4)), strict=True
            ):
                name = numbers[number]
                opened[name][first] = by_name[name].open(first, count, payload)
        result = {}
        for enc in encs:
            if len(opened[enc.name]) != len(chosen):
                raise BlockIntegrityError(
                    f"the server returned {len(opened[enc.name])} of {len(chosen)} blocks of "
                    f"column {enc.source!r} of table {table.name!r}"
                )
            value_type = pa.binary() if not enc.sql_type.is_integral else pa.int64()
            result[enc.name] = values_at(opened[enc.name], ids, value_type)
        return result


def decrypt_columns(
    fetched: pa.Table,
    table: TableDesign,
    wanted: list[tuple[str, Encryption | None]],
    ciphers: CipherCache,
    blocks: BlockReader | None = None,
    encrypted: Collection[str] = (),
) -> pa.Table:
    """``fetched``'s columns decrypted, but those named in ``encrypted`` (``Scan.ciphertext``)."""
    job = _Decryption(fetched, table, wanted, ciphers, blocks, encrypted)
    (results,) = _run_all([job])
    return job.finish(results)


def _run_all(jobs: list[_Decryption]) -> list[list[pa.Array]]:
    """Every job's kernels, side by side when there is enough work for threads; each
    job's results."""
    work = [w for job in jobs for w in job.work]
    rows = max((job.rows for job in jobs), default=0)
    if rows >= _PARALLEL_ROWS and len(work) > 1:
        # the kernels release the GIL; a cipher keeps no state between calls
        done = list(_pool().map(lambda w: w[1](), work))
    else:
        done = [job() for _, job in work]
    bounds = list(itertools.accumulate((len(job.work) for job in jobs), initial=0))
    return [done[a:b] for a, b in itertools.pairwise(bounds)]


class _Decryption:
    """One table's fetched columns: those that need no kernel, and the kernels' work."""

    def __init__(
        self,
        fetched: pa.Table,
        table: TableDesign,
        wanted: list[tuple[str, Encryption | None]],
        ciphers: CipherCache,
        blocks: BlockReader | None,
        encrypted: Collection[str],
    ):
        self.rows = fetched.num_rows
        self.names = [name for name, _ in wanted]
        self.columns: dict[str, pa.Array | pa.ChunkedArray] = {}
        self.work: list[tuple[str, Callable[[], pa.Array]]] = []
        at = next((i for i, n in enumerate(self.names) if n in (ROW_ID, RND_ROW_ID)), None)
        rnd = any(enc is not None and enc.row_bound for _, enc in wanted)
        ids = fetched.column(at).to_numpy() if rnd and at is not None else None  # RND's nonces
        in_blocks = _block_values(fetched, table, wanted, ciphers, blocks)
        for index, (name, enc) in enumerate(wanted):
            stored = fetched.column(index)
            if enc is None or name in encrypted:  # the row id (not a secret), or left encrypted
                if name != RND_ROW_ID:
                    self.columns[name] = stored
                continue
            if enc.scheme == BLOCKS:
                self.columns[name] = decode(in_blocks[enc.name], enc.sql_type)
                continue
            whole = stored.combine_chunks() if isinstance(stored, pa.ChunkedArray) else stored
            cipher = ciphers.get(table, enc)
            for start, part in _parts(whole):
                part_ids = ids[start : start + len(part)] if ids is not None else None
                self.work.append((name, partial(decrypt_values, part, cipher, enc, part_ids)))

    def finish(self, results: list[pa.Array]) -> pa.Table:
        """The table, given the results of this job's work, in order."""
        parts: dict[str, list[pa.Array]] = {}
        for (name, _), result in zip(self.work, results, strict=True):
            parts.setdefault(name, []).append(result)
        self.columns.update(
            {
                n: p[0] if len(p) == 1 else pa.chunked_array(p).combine_chunks()
                for n, p in parts.items()
            }
        )
        return pa.table({name: self.columns[name] for name in self.names if name in self.columns})


def decrypt_values(
    ciphertexts: pa.Array, cipher: ColumnCipher, enc: Encryption, ids: np.ndarray | None
) -> pa.Array:
    """Plaintext values of one column's ciphertexts (``ids``: the rows', for RND)."""
    if isinstance(cipher, RowBoundCipher):
        assert ids is not None, "RND columns are fetched with their row ids"
        return decode(cipher.decrypt_rows(ids, ciphertexts), enc.sql_type)
    if enc.scheme in DETERMINISTIC and _repeats(ciphertexts):
        # equal ciphertexts are equal values: decrypt and decode each value once
        if isinstance(cipher, BytesForm | OrderedBytesForm):  # TPC-H Q15's l_discount: 3.6 -> 2 ms
            ciphertexts, cipher = cipher.unpacked(ciphertexts)
        indexed = ciphertexts.dictionary_encode()
        values = decode(cipher.decrypt(indexed.dictionary), enc.sql_type)
        return values.take(indexed.indices)
    return decode(cipher.decrypt(ciphertexts), enc.sql_type)


# Columns of at least this many rows are decrypted side by side, one thread each.
# Not fewer: at 16,384 (TPC-H Q3's 30,000 joined rows, Q5's) the threads cost more
# than they saved on two cores (medians of 7, alternating: Q3 49.9 against 43.5 ms).
_PARALLEL_ROWS = 65536
# A column of at least this many rows is also cut into a part per thread, decrypted
# side by side: columns cost unequally (Q18's 6M order keys under FF1 beside their
# quantities' 50 distinct values), so whole columns alone leave threads idle.
_SPLIT_ROWS = 1 << 20


def _parts(ciphertexts: pa.Array) -> list[tuple[int, pa.Array]]:
    """``ciphertexts`` whole, or in slices (with their first row) for the threads."""
    threads = min(4, os.cpu_count() or 1)
    if len(ciphertexts) < _SPLIT_ROWS or threads == 1:
        return [(0, ciphertexts)]
    size = -(-len(ciphertexts) // threads)
    return [(i, ciphertexts.slice(i, size)) for i in range(0, len(ciphertexts), size)]


@cache
def _pool() -> ThreadPoolExecutor:
    """The process's decryption threads (as many as CPUs, at most 4), made on first use."""
    return ThreadPoolExecutor(min(4, os.cpu_count() or 1), thread_name_prefix="veil-decrypt")


def _block_values(
    fetched: pa.Table,
    table: TableDesign,
    wanted: list[tuple[str, Encryption | None]],
    ciphers: CipherCache,
    blocks: BlockReader | None,
) -> dict[str, pa.Array]:
    """The encoded values of the BLOCKS columns in ``wanted`` (whose places hold row ids)."""
    places = [
        (i, enc) for i, (_, enc) in enumerate(wanted) if enc is not None and enc.scheme == BLOCKS
    ]
    if not places:
        return {}
    if blocks is None:
        raise InternalError(f"table {table.name!r}: BLOCKS columns fetched without a block reader")
    ids = fetched.column(places[0][0]).to_numpy(zero_copy_only=False).astype(np.int64)
    return blocks.read(table, [enc for _, enc in places], ids, ciphers)


DETERMINISTIC = (DET, OPE)
_SAMPLE = 4096


def _repeats(ciphertexts: pa.Array) -> bool:
    """Whether a column's values repeat enough to decrypt its distinct values only.

    Judged on the first rows: at most one in 16 distinct (flags, quantities,
    statuses). Hashing costs about what decrypting and decoding save when a
    value repeats only a few times (6M TPC-H order keys, 4 rows each: 300 ms
    to dictionary-encode against 170 ms of FF1), so those are decrypted as
    they are.
    """
    if len(ciphertexts) < 2 * _SAMPLE:
        return False
    return len(ciphertexts.slice(0, _SAMPLE).unique()) <= _SAMPLE // 16
