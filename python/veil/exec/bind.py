"""Filling in bind filters (``veil.sql.passes.plan_bind_filters``) once their sources are fetched.

The plan is never changed: the key filters found for a scan are returned as
extra server predicates for this run only (``veil.sql.remote.Extras``), so a
plan can run any number of times.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from veil.design.model import OPE
from veil.encoding import encode
from veil.exec.local_run import query_table
from veil.sql.plan import BindFilter, Scan
from veil.sql.remote import param

if TYPE_CHECKING:
    from veil.ciphers.cache import CipherCache

log = logging.getLogger(__name__)

# The key list is sent as one array parameter (``col IN (SELECT UNNEST($n))``):
# as literals, TPC-H Q9's 2 x 10,664 keys made a 456 KB statement that took
# ~1 s to build and 0.7 s for DuckDB to parse. Past this many keys a filter
# costs more than it saves.
MAX_KEYS = 100_000
# A join's key list is worth sending only when the client-side filter
# dropped most of the source's rows.
_MAX_KEPT = 0.5


def fetch_order(scans: list[Scan]) -> list[Scan]:
    """The scans with every bind filter's sources before its target (no cycles: planned so)."""
    ordered: list[Scan] = []
    placed: set[int] = set()

    def place(scan: Scan) -> None:
        if id(scan) in placed:
            return
        placed.add(id(scan))
        group = scan.joined.scans if scan.joined is not None else [scan]
        for member in group:
            for bind in member.binds:
                for source in bind.sources:
                    place(source)
        ordered.append(scan)

    for scan in scans:
        place(scan)
    return ordered


KeyMemo = dict[str, pa.Table]  # key query (its SQL) -> its distinct keys


def key_filters(
    scan: Scan, local: duckdb.DuckDBPyConnection, ciphers: CipherCache, memo: KeyMemo | None = None
) -> list[exp.Expr]:
    """Server predicates for ``scan``'s bind filters (their sources must be registered).

    A bind filter is an optimisation: one whose keys cannot be computed (its
    query fails locally) is skipped, and the local plan still filters exactly.
    ``memo`` keeps one run's key lists: TPC-H Q18's IN-subquery filters both
    orders and lineitem, and is computed once (~100 ms at SF 1).
    """
    found = []
    for bind in scan.binds:
        try:
            predicate = _key_filter(bind, scan, local, ciphers, {} if memo is None else memo)
        except Exception as exc:  # an optimisation only: the local plan filters exactly
            log.info("bind filter on %s skipped (%s: %s)", scan.alias, type(exc), exc)
            continue
        if predicate is not None:
            found.append(predicate)
    return found


def _key_filter(
    bind: BindFilter,
    scan: Scan,
    local: duckdb.DuckDBPyConnection,
    ciphers: CipherCache,
    memo: KeyMemo,
) -> exp.Expr | None:
    sql_type = bind.target_enc.sql_type
    # keys that are not exactly values of the column's type can equal none of its values
    cast = f"TRY_CAST(k AS {sql_type.name})"
    # written once per plan, not at every run of it (sqlglot's generator: ~0.2-1 ms a query)
    bind.sql = bind.sql or bind.keys.sql(dialect="duckdb")
    query = f"SELECT DISTINCT {cast} FROM ({bind.sql}) AS __veil_keys(k) WHERE {cast} = k"
    if query not in memo:
        memo[query] = query_table(local, query)
    keys = memo[query]
    if bind.target_enc.scheme == OPE:
        return _key_range(bind, scan, keys, ciphers)
    limit = MAX_KEYS
    if bind.shrinks is not None:
        counted = query_table(local, f'SELECT COUNT(*) FROM "{bind.shrinks.local_name}"')
        rows = counted.column(0)[0].as_py()
        limit = min(limit, int(rows * _MAX_KEPT))
    if keys.num_rows > limit:
        return None  # a long key list would cost more than it saves
    server: exp.Expr
    if keys.num_rows == 0:
        server = exp.false()
    else:
        encoded = encode(keys.column(0), sql_type)
        cipher = ciphers.get(scan.table, bind.target_enc)
        ciphertexts = cipher.encrypt(encoded).to_pylist()
        keys_param = param(ciphertexts)
        server = exp.column(bind.target_enc.name).isin(
            query=exp.select(exp.Unnest(expressions=[keys_param]))
        )
    return server


def _key_range(bind: BindFilter, scan: Scan, keys: pa.Table, ciphers: CipherCache) -> exp.Expr:
    """The keys' range, as a filter on ``bind.target_enc``'s OPE ciphertexts.

    A range of any number of keys is two constants, which the server compares
    with each block's min/max (``veil.sql.passes.plan_key_ranges``).
    """
    found = pc.min_max(encode(keys.column(0), bind.target_enc.sql_type))
    low, high = found["min"].as_py(), found["max"].as_py()
    if low is None or high is None:
        return exp.false()  # no keys (or only NULLs, which join nothing)
    cipher = ciphers.get(scan.table, bind.target_enc)
    return exp.Between(
        this=exp.column(bind.target_enc.name),
        low=param(cipher.encrypt_one(low)),
        high=param(cipher.encrypt_one(high)),
    )
