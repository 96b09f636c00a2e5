"""Filling in bind filters (``veil.sql.bind_filters``) once their sources are fetched."""

from __future__ import annotations

from typing import TYPE_CHECKING

import duckdb
from sqlglot import exp

from veil.design.model import DET
from veil.encoding import encode
from veil.sql.plan import BindFilter, Scan, ServerPredicate

if TYPE_CHECKING:
    from veil.exec.fetch import CipherCache

# Integer DET ciphertexts go into the statement as literals (they are
# ciphertexts); byte strings as parameters, of which PostgreSQL takes 65,535.
MAX_INT_KEYS = 100_000
MAX_BYTE_KEYS = 5_000
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


def apply_binds(scan: Scan, local: duckdb.DuckDBPyConnection, ciphers: CipherCache) -> None:
    """Add each bind filter of ``scan`` as a server predicate (sources must be registered)."""
    for bind in scan.binds:
        predicate = _key_filter(bind, scan, local, ciphers)
        if predicate is not None:
            scan.predicates.append(predicate)


def _key_filter(
    bind: BindFilter, scan: Scan, local: duckdb.DuckDBPyConnection, ciphers: CipherCache
) -> ServerPredicate | None:
    sql_type = bind.target_enc.sql_type
    # keys that are not exactly values of the column's type can equal none of its values
    cast = f"TRY_CAST(k AS {sql_type.name})"
    keys = local.sql(
        f"SELECT DISTINCT {cast} FROM ({bind.keys.sql(dialect='duckdb')}) AS __veil_keys(k) "
        f"WHERE {cast} = k"
    ).to_arrow_table()
    limit = MAX_INT_KEYS if sql_type.is_integral else MAX_BYTE_KEYS
    if bind.shrinks is not None:
        rows = local.sql(f'SELECT COUNT(*) FROM "{bind.shrinks.local_name}"').fetchall()[0][0]
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
        values: list[exp.Expr] = (
            [exp.Literal.number(int(c)) for c in ciphertexts]
            if sql_type.is_integral
            else [scan.placeholder(bytes(c)) for c in ciphertexts]
        )
        server = exp.column(bind.target_enc.name).isin(*values)
    original = (
        f"{scan.alias}.{bind.target_enc.source} IN ({keys.num_rows} keys of {bind.description})"
    )
    return ServerPredicate(original, server, [DET], None, exact=True)
