"""Clustered and ordered loads: the order in which the loader numbers a table's rows.

ASHE sums (``veil.ciphers.ashe_sums``) come back per group and block of 64 row
ids, with the mask of the ids summed; the client removes two pads per run
of consecutive ids. When a table's rows are loaded in source order, a
GROUP BY on a column of few values (TPC-H Q1's l_returnflag, l_linestatus)
puts a few rows of every group in every block: the server builds and sends
a row per (group, block) and the client unpads nearly every row on its own.
Loaded grouped by those keys instead, each block belongs to one group and
its ids form one run: four times fewer rows at SF 1, a fraction of the PRF
calls.

The order of the groups is a keyed hash of their plaintext keys (MD5 under
a secret derived from the master key, computed by the client's own DuckDB),
so the server learns which rows share keys, which the keys' DET encryption
shows anyway, and nothing of their order; within a group rows keep their
source order. Rows inserted later get fresh ids at the end: sums stay exact,
only less compact.

Within a cluster (or the whole table, where there is none) rows follow the
order of the column the workload filters most by ranges, if the server
holds it under OPE (``TableDesign.sort_by``): DuckDB's row groups and
Parquet's then each cover a narrow range of it, and a range filter skips
the others by their min/max (TPC-H Q6 reads one year of l_shipdate's seven),
while the ids a filter selects form a few long runs for ASHE. The row order
then shows the server that column's order, which its OPE ciphertexts show
anyway; a column whose OPE is still wrapped in an onion's RND layer
(``Encryption.outer``) never orders rows. Only on servers that skip blocks of
rows by their min/max (DuckDB, Parquet on Spark): PostgreSQL's heap has no
such statistics, and rows ordered by a date scatter its index probes by key
(TPC-H Q9 at SF 1 probes orders by key: 2.6x plaintext with orders ordered
by date, 0.95x in source order, both measured under load).
"""

from __future__ import annotations

from sqlglot import exp

from veil.crypto.keys import KeyLabel, MasterKey
from veil.design.model import DET, OPE, TableDesign
from veil.sql.selectivity import distinct_rows

# A clustering pays off only when groups span many blocks of 64 ids: at most
# one group per this many rows on average (SF 1 lineitem: 1,465 groups).
MIN_ROWS_PER_GROUP = 4096
_SALT_LABEL = "cluster-order"
# what joins the keys in the hashed text: a byte no key holds
_SEPARATOR = "chr(31)"


def choose(table: TableDesign, rows: int | None, ordered: bool = True) -> None:
    """Set ``table.cluster_by`` and ``table.sort_by``; see the module's text.

    ``cluster_by``: the candidate keys with the fewest groups, if few enough.

    The keys' DET encryptions carry their distinct counts by now
    (``veil.load.statistics.record``); a candidate qualifies when
    the product of its counts is at most ``rows / MIN_ROWS_PER_GROUP``.
    Tables without ASHE sums are not clustered; tables with Paillier's packs,
    which are built in source order, keep source order altogether.
    """
    table.cluster_by, table.sort_by = [], ""
    if table.hom is not None:
        return  # Paillier's packs are built in source order
    if ordered:  # the server skips blocks of rows by min/max (``Backend.skips_row_blocks``)
        table.sort_by = next((c for c in table.sort_candidates if table.find(c, OPE)), "")
    if rows is None or table.sums is None:
        return
    sized = [(_groups(table, keys), keys) for keys in table.cluster_candidates]
    fit = [(n, keys) for n, keys in sized if n is not None and n * MIN_ROWS_PER_GROUP <= rows]
    if fit:
        table.cluster_by = list(min(fit, key=lambda item: item[0])[1])


def _groups(table: TableDesign, keys: list[str]) -> float | None:
    """At most how many groups ``keys`` make (None: a count is unknown)."""
    return distinct_rows([table.find(key, DET) for key in keys])


def order_by(table: TableDesign, master: MasterKey) -> str | None:
    """The source query's ORDER BY list that orders ``table``'s rows (None: source order)."""
    order = []
    if table.cluster_by:
        salt = master.derive(KeyLabel(_SALT_LABEL, table.name), 16).hex()
        keys = ", ".join(
            f"coalesce('v' || CAST({_quoted(key)} AS VARCHAR), 'n')" for key in table.cluster_by
        )
        order.append(f"md5(concat_ws({_SEPARATOR}, '{salt}', {keys}))")
    if table.sort_by:
        order.append(_quoted(table.sort_by))
    return ", ".join(order) or None


def _quoted(column: str) -> str:
    return exp.to_identifier(column, quoted=True).sql(dialect="duckdb")
