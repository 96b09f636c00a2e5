"""The analytic benchmarks ``veil bench tpch`` and ``veil bench tpcds`` run: what differs.

One :class:`Suite` per benchmark says where its data comes from, which tables it
has, its queries (by name: TPC-H's by number, TPC-DS's by file stem) and the
indexes both sides get; loading, running, checking and reporting are shared
(``tpch_servers``, ``analytic``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

QueryName = int | str


@dataclass(frozen=True)
class Suite:
    name: str  # "tpch": the bench folder, file stems and the JSON's "benchmark"
    title: str  # "TPC-H"
    tables: tuple[str, ...]
    generate: Callable[[float, Path], object]
    queries: dict[QueryName, str]
    primary_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    secondary_indexes: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def label(self, query: QueryName) -> str:
        """How tables and logs name a query: Q6, q54."""
        return f"Q{query}" if isinstance(query, int) else query


# TPC-H's primary keys, and lineitem's two foreign-key indexes, without which PostgreSQL
# runs Q17/Q20 as a scan of lineitem per outer row
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "region": ("r_regionkey",),
    "nation": ("n_nationkey",),
    "part": ("p_partkey",),
    "supplier": ("s_suppkey",),
    "partsupp": ("ps_partkey", "ps_suppkey"),
    "customer": ("c_custkey",),
    "orders": ("o_orderkey",),
    "lineitem": ("l_orderkey", "l_linenumber"),
}
SECONDARY_INDEXES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("lineitem", ("l_partkey", "l_suppkey")),
    ("lineitem", ("l_suppkey",)),
)


def tpch_suite() -> Suite:
    from veil_dev.tpch.gen import TABLES, generate
    from veil_dev.tpch.queries import query_texts

    def generate_fresh(sf: float, out: Path) -> object:
        return generate(sf, out, overwrite=True)

    queries: dict[QueryName, str] = {n: sql for n, sql in query_texts().items()}
    return Suite("tpch", "TPC-H", TABLES, generate_fresh, queries, PRIMARY_KEYS, SECONDARY_INDEXES)


# TPC-DS's keys (specification §2): each dimension's surrogate key; each sales and returns
# table by item and ticket/order number; inventory by date, item and warehouse.
TPCDS_PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "call_center": ("cc_call_center_sk",),
    "catalog_page": ("cp_catalog_page_sk",),
    "customer": ("c_customer_sk",),
    "customer_address": ("ca_address_sk",),
    "customer_demographics": ("cd_demo_sk",),
    "date_dim": ("d_date_sk",),
    "household_demographics": ("hd_demo_sk",),
    "income_band": ("ib_income_band_sk",),
    "item": ("i_item_sk",),
    "promotion": ("p_promo_sk",),
    "reason": ("r_reason_sk",),
    "ship_mode": ("sm_ship_mode_sk",),
    "store": ("s_store_sk",),
    "time_dim": ("t_time_sk",),
    "warehouse": ("w_warehouse_sk",),
    "web_page": ("wp_web_page_sk",),
    "web_site": ("web_site_sk",),
    "store_sales": ("ss_item_sk", "ss_ticket_number"),
    "store_returns": ("sr_item_sk", "sr_ticket_number"),
    "catalog_sales": ("cs_item_sk", "cs_order_number"),
    "catalog_returns": ("cr_item_sk", "cr_order_number"),
    "web_sales": ("ws_item_sk", "ws_order_number"),
    "web_returns": ("wr_item_sk", "wr_order_number"),
    "inventory": ("inv_date_sk", "inv_item_sk", "inv_warehouse_sk"),
}


def tpcds_suite(query_dir: Path | None = None) -> Suite:
    from veil_dev.tpcds.gen import generate
    from veil_dev.tpcds.queries import DEFAULT_QUERY_DIR, query_texts

    def generate_fresh(sf: float, out: Path) -> object:
        return generate(sf, out, overwrite=True)

    texts = query_texts(query_dir or DEFAULT_QUERY_DIR)
    queries: dict[QueryName, str] = {n: sql for n, sql in texts.items()}
    tables = tuple(sorted(TPCDS_PRIMARY_KEYS))
    return Suite("tpcds", "TPC-DS", tables, generate_fresh, queries, TPCDS_PRIMARY_KEYS)
