"""Decrypting fetched ciphertext columns: by column kernel, side by side on threads."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from functools import cache, partial

import numpy as np
import pyarrow as pa

from veil.backends import Backend
from veil.ciphers.blocks import block_number, covering_blocks, values_at
from veil.ciphers.cache import CipherCache
from veil.ciphers.columns import BytesForm, ColumnCipher, OrderedBytesForm, RowBoundCipher
from veil.crypto.rowblocks import BlockIntegrityError
from veil.crypto.rowrnd import RowRnd, xor_columns
from veil.design.model import BLOCKS, DET, OPE, Encryption, TableDesign
from veil.distinct import distinct
from veil.encoding import decode
from veil.errors import InternalError
from veil.exec.server import FetchStats, run_remote
from veil.sql.plan import RND_ROW_ID, ROW_ID
from veil.sql.remote import block_index_statement, block_payloads_statement


class BlockReader:
    """Fetches and opens the blocks of BLOCKS columns for a scan's rows."""

    def __init__(self, backend: Backend, stats: FetchStats):
        self._backend = backend
        self._stats = stats

    def read(
        self, table: TableDesign, encs: list[Encryption], ids: np.ndarray, ciphers: CipherCache
    ) -> dict[str, pa.Array]:
        """The encoded values of ``encs`` (BLOCKS columns) for the rows ``ids``."""
        wanted = distinct(ids)  # a peel reads a whole column's blocks: 600,000 ids
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
    job = Decryption(fetched, table, wanted, ciphers, blocks, encrypted)
    (results,) = run_all([job])
    return job.finish(results)


def run_all(jobs: list[Decryption]) -> list[list[pa.Array]]:
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


class Decryption:
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
        columns = _whole_columns(fetched)
        ids = columns[at].to_numpy() if rnd and at is not None else None  # RND's nonces
        in_blocks = _block_values(fetched, table, wanted, ciphers, blocks)
        opened = {}
        if ids is not None and self.rows <= _BATCH_ROWS:
            opened = _opened_together(columns, table, wanted, ciphers, ids, encrypted)
        for index, (name, enc) in enumerate(wanted):
            if enc is None or name in encrypted:  # the row id (not a secret), or left encrypted
                if name != RND_ROW_ID:
                    self.columns[name] = fetched.column(index)
                continue
            if enc.scheme == BLOCKS:
                self.columns[name] = decode(in_blocks[enc.name], enc.sql_type)
                continue
            if name in opened:
                cipher_of, values = opened[name]
                self.columns[name] = decode(cipher_of.decrypt_opened(values), enc.sql_type)
                continue
            whole = columns[index]
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


# Up to this many rows (a point query's), the row-bound RND columns of a fetched
# table XOR their keystreams in one native call; more stay a call per column, on
# threads and without the GIL.
_BATCH_ROWS = 64


def _opened_together(
    columns: list[pa.Array],
    table: TableDesign,
    wanted: list[tuple[str, Encryption | None]],
    ciphers: CipherCache,
    ids: np.ndarray,
    encrypted: Collection[str],
) -> dict[str, tuple[RowBoundCipher, pa.Array]]:
    """The row-bound columns' ciphers and stored values XOR their keystreams, by name, in
    one call: a call per column cost ~20 us of Python around a few AES blocks (issue 41)."""
    names, found, pairs = [], [], []
    for index, (name, enc) in enumerate(wanted):
        if enc is None or name in encrypted or not enc.row_bound or enc.scheme == BLOCKS:
            continue
        cipher = ciphers.get(table, enc)
        layer = cipher.opening_layer() if isinstance(cipher, RowBoundCipher) else None
        if isinstance(cipher, RowBoundCipher) and isinstance(layer, RowRnd):
            names.append(name)
            found.append(cipher)
            pairs.append((layer, columns[index]))
    if len(pairs) < 2:
        return {}
    opened = xor_columns(ids, pairs)
    return {n: (c, o) for n, c, o in zip(names, found, opened, strict=True)}


def _whole_columns(fetched: pa.Table) -> list[pa.Array]:
    """Each column of ``fetched`` as one array: a one-batch table's (a point query's) as
    they are, which saves a combine per column (~5 us each, issue 41)."""
    batches = fetched.to_batches()
    if len(batches) == 1:
        return list(batches[0].columns)
    return [column.combine_chunks() for column in fetched.columns]


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
    if len(ciphertexts) < _SPLIT_ROWS:  # before asking the CPUs: ~0.1 ms a call under load
        return [(0, ciphertexts)]
    threads = min(4, os.cpu_count() or 1)
    if threads == 1:
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
