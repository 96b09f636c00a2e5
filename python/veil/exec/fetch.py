"""Running a plan's steps: RemoteSQL -> Arrow ciphertexts -> decrypted Arrow tables."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

import numpy as np
import pyarrow as pa
from sqlglot import exp

from veil.backends import Backend
from veil.ciphers.cache import CipherCache
from veil.exec.ashe_sums import finish_ashe_sums
from veil.exec.decrypt import BlockReader, Decryption, decrypt_columns, run_all
from veil.exec.hom_fetch import finish_packed_sums
from veil.exec.joined_sums import finish_joined_sums
from veil.exec.server import FetchStats, Rendered, Shaped, run_filtered, run_kept
from veil.sql.plan import JOIN_ROW, JoinedFetch, Scan
from veil.sql.remote import Extras, joined_statement, scan_statement


def run_scan(
    scan: Scan,
    extras: Extras,
    backend: Backend,
    ciphers: CipherCache,
    stats: FetchStats,
    kept: Rendered | None = None,
    leave: Collection[str] | None = None,
) -> pa.Table:
    """The scan's rows (``extras``: filters found at run time), decrypted.

    ``kept``: the plan's rendered statements, reused when no run-time filter applies;
    ``leave``: the columns left encrypted, if not ``Scan.ciphertext``.
    """
    own = bool(extras.get(id(scan)))
    build = lambda found: scan_statement(scan, found)  # noqa: E731
    stats.step = id(scan)
    try:
        if scan.aggregation is not None and scan.aggregation.id_bit is not None:
            with backend.hash_aggregation():  # its (keys, block) groups: far fewer than rows
                fetched = _run(id(scan), own, build, extras, kept, scan.shaped, backend, stats)
        else:
            fetched = _run(id(scan), own, build, extras, kept, scan.shaped, backend, stats)
        started, server_before = time.perf_counter(), stats.server_seconds
        if scan.aggregation is not None and scan.aggregation.hom_product is not None:
            plain = finish_packed_sums(fetched, scan, ciphers)
        elif scan.aggregation is not None and scan.aggregation.id_bit is not None:
            plain = finish_ashe_sums(fetched, scan, ciphers)
        else:
            fetched, repeats = _repeats_column(fetched, scan.counted)
            blocks = BlockReader(backend, stats)
            plain = decrypt_columns(
                fetched,
                scan.table,
                scan.fetched(),
                ciphers,
                blocks,
                scan.ciphertext if leave is None else leave,
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
    own = any(extras.get(id(s)) for s in fetch.scans)
    build = lambda found: joined_statement(fetch, found)  # noqa: E731
    stats.step = id(fetch)
    try:
        fetched = _run(id(fetch), own, build, extras, kept, fetch.shaped, backend, stats)
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
            # a grouped join's keys are decrypted (``det_fetched_columns`` leaves them)
            encrypted = scan.ciphertext if fetch.groups is None else ()
            jobs.append(Decryption(part, scan.table, pairs, ciphers, blocks, encrypted))
        results = run_all(jobs)  # every part's columns side by side
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


def _run(
    key: int,
    own: bool,
    build: Callable[[Extras], exp.Expression],
    extras: Extras,
    kept: Rendered | None,
    shaped: Shaped,
    backend: Backend,
    stats: FetchStats,
) -> pa.Table:
    """A plan's statement (``kept``: None when it is not a kept plan's): rendered once if
    its scans take no run-time filter (``own``), else once per shape of this run's filters
    (``shaped``; a reduction may read another scan's filters, so all of them count)."""
    if not own:
        return run_kept(key, lambda: build(extras), kept, backend, stats)
    scans = list(extras)
    counts = [len(extras[s]) for s in scans]
    filters = [f for s in scans for f in extras[s]]

    def rebuild(found: list[exp.Expr]) -> exp.Expression:  # ``found``: ``filters`` or likes
        parts, at = {}, 0
        for scan, count in zip(scans, counts, strict=True):
            parts[scan], at = found[at : at + count], at + count
        return build(parts)

    place = (key, tuple(scans), tuple(counts))
    return run_filtered(place, rebuild, filters, None if kept is None else shaped, backend, stats)


def _repeats_column(fetched: pa.Table, counted: bool) -> tuple[pa.Table, pa.Array | None]:
    """A counted fetch's rows without their counts, and the positions that repeat each
    row its count's times (``count_repeats``); ``(fetched, None)`` for any other fetch."""
    if not counted:
        return fetched, None
    last = fetched.num_columns - 1
    counts = fetched.column(last).to_numpy(zero_copy_only=False).astype(np.int64)
    positions = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return fetched.remove_column(last), pa.array(positions)
