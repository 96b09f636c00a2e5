"""Filling in bind filters (``veil.sql.bind_filters``) once their source is fetched."""

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
# Only worth it when the client-side filter drops most of the source's rows.
_MAX_KEPT = 0.5


def fetch_order(scans: list[Scan]) -> list[Scan]:
    """The scans with every bind filter's source before its target."""
    sources = {id(b.source) for scan in scans for b in scan.binds}
    return [s for s in scans if id(s) in sources] + [s for s in scans if id(s) not in sources]


def apply_binds(scan: Scan, local: duckdb.DuckDBPyConnection, ciphers: CipherCache) -> None:
    """Add each bind filter of ``scan`` as a server predicate (sources must be registered)."""
    for bind in scan.binds:
        predicate = _key_filter(bind, scan, local, ciphers)
        if predicate is not None:
            scan.predicates.append(predicate)


def _key_filter(
    bind: BindFilter, scan: Scan, local: duckdb.DuckDBPyConnection, ciphers: CipherCache
) -> ServerPredicate | None:
    source = bind.source
    column = bind.source_enc.source
    keys = local.sql(
        f'SELECT DISTINCT "{source.alias}"."{column}" FROM "{source.local_name}" AS "{source.alias}" '
        f'WHERE ({bind.condition}) AND "{source.alias}"."{column}" IS NOT NULL'
    ).to_arrow_table()
    rows = local.sql(f'SELECT COUNT(*) FROM "{source.local_name}"').fetchall()[0][0]
    encoded = encode(keys.column(0), bind.source_enc.sql_type)
    integral = bind.source_enc.sql_type.is_integral
    if len(encoded) > min(MAX_INT_KEYS if integral else MAX_BYTE_KEYS, rows * _MAX_KEPT):
        return None  # the filter keeps too much: a long key list would cost more than it saves
    target = exp.column(bind.target_enc.name)
    server: exp.Expr
    if len(encoded) == 0:
        server = exp.false()
    else:
        ciphertexts = ciphers.get(source.table, bind.source_enc).encrypt(encoded).to_pylist()
        values: list[exp.Expr] = (
            [exp.Literal.number(int(c)) for c in ciphertexts]
            if integral
            else [scan.placeholder(bytes(c)) for c in ciphertexts]
        )
        server = target.isin(*values)
    original = (
        f"{scan.alias}.{bind.target_enc.source} IN ({len(encoded)} keys of {source.alias} rows "
        f"passing {bind.condition})"
    )
    return ServerPredicate(original, server, [DET], None, exact=True)
