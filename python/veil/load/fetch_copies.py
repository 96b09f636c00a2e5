"""Which DET fetch copies a load leaves out, the column fetched from its OPE copy instead.

The greedy designer stores a DET copy beside each OPE column, to fetch it from
(``veil.designer.greedy``): FF1 decrypts ~30x faster than OPE's tree walk. Where
no query compares the column for equality, groups or joins by it, that copy
serves only fetches (``FETCH_COPY``), and OPE decrypts them as well, its
ciphertexts being as deterministic, only more slowly: ~4.5 us a distinct value on
its first fetch, then a hash lookup (``veil.crypto.ope``'s cache). So on a server
that bit-packs integers, where the copy costs narrow DET's 20 bits or more a row
whatever its values, a column of few values keeps only its OPE copy (stored as a
dictionary where its values are few, ``OrderedBytesForm``). TPC-DS SF 1:
inventory's inv_quantity_on_hand (978 values, 11.7M rows), store_sales'
ss_quantity, ss_wholesale_cost and ss_sales_price (102 to 18,195 values): 686 -> 640 MB
in all. The 16 of its queries reading those OPE copies ran as fast, warm (their Veil
medians summed 6.25 -> 6.35 s and 7.07 -> 6.90 s in two A/B pairs). A fresh session's
first query pays the first decryption: TPC-DS SF 0.1's q01 (sr_return_amt, 18,901
values) 0.46 -> 0.52 s, its next runs unchanged (0.024 s).

Less is stored, and nothing more is learnt: the OPE copy shows the equality
pattern the DET copy did. On PostgreSQL (8 bytes a BIGINT) nothing changes.
"""

from __future__ import annotations

from veil.design.model import DET, FETCH_COPY, OPE, PhysicalDesign

# At most this many distinct loaded values, a fetch reads the OPE copy: its first
# decryption in a process costs up to ~0.15 s (4.5 us a value), then a lookup. Without
# the bound, TPC-DS SF 1 on DuckDB stores 640 -> 602 MB (2.15x -> 2.02x of plaintext; the
# copies of ss_net_paid, ss_net_profit, ss_coupon_amt, cs_/ws_net_paid, _net_profit and the
# returns' amounts, 212k-554k values) but its 25 queries reading them decrypt up to 5x
# longer, warm: q74 0.23 -> 1.08 s, q64 0.42 -> 1.60 s in all (median 1.93x -> 1.99x)
MAX_DISTINCT = 32768


def choose(fresh: PhysicalDesign) -> None:
    """Leave out of ``fresh`` the DET fetch copies whose column's OPE copy has few values.

    Run after the distinct counts (``params["distinct"]``) are recorded.
    """
    for table in fresh.tables.values():
        fetched = {
            e.source
            for e in table.encryptions
            if e.scheme == OPE
            and not e.is_expression
            and not e.onion
            and not e.params.get("lazy")
            and isinstance(distinct := e.params.get("distinct"), int)
            and distinct <= MAX_DISTINCT
        }
        table.encryptions = [
            e
            for e in table.encryptions
            if not (e.scheme == DET and e.params.get(FETCH_COPY) and e.source in fetched)
        ]
