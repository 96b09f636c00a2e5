"""The adaptive design: every column stored as onions, no workload needed (CryptDB, SEEED).

Each column gets, within its policy (``veil.design.policy``):

- an equality onion: DET under a key of its own, wrapped in a row-bound RND
  layer (``Encryption.outer``); it is also how a number is fetched (the
  client removes both layers). A number whose type fits fewer than 64 bits
  (DATE, INTEGER, DECIMAL(15,2)) is fetched from a row-bound RND copy in
  its type's bits instead, and a text (bytes) column from sealed blocks of
  rows (BLOCKS, compressed: DET adds a 17-byte tag to every value, an RND
  copy keeps its length), and its DET onion, like the join, order and
  search onions, is built by its first peel
  (``veil.session.onions.defer_layers``). A column whose policy is RND gets
  plain row-bound RND only: it is only ever fetched;
- a join onion for integers: JOIN-ADJ under a key of its own, wrapped in RND;
  a join between two columns re-keys one onto the other on the server
  (``veil.session.onions``), and they stay joinable (one join class) for good;
- an order onion for numbers and dates: OPE, wrapped in RND the same way;
- a search onion for free text: SWP words, which reveal nothing until a
  query sends a word's token. Not for a text column of a short fixed
  vocabulary (flags, modes, codes: ``vocabulary``): SEARCH only ever
  pre-filters a LIKE the client checks again (``veil.sql.prefilter_like``),
  and over a handful of values it would keep a large share of the rows while
  its words were the largest layer stored (TPC-H's four such lineitem columns:
  65 of 592 MB at SF 0.1); such a LIKE runs on the client instead;
- an additive onion for exact numbers: ASHE words (``AsheSums``), which
  the server sums blind, built by the first SUM or AVG of one of them
  (``AsheSums.lazy``).

Nothing is revealed at load: the server learns equality or order of a
column only when a query first needs it and the runtime peels the RND layer
(``veil.session.onions``). DET keys are per column and per load, so no two
columns are joinable on the server until a join asks for it.
"""

from __future__ import annotations

from collections.abc import Collection

from veil.design.domains import column_domain, rnd_bits, signed_bits
from veil.design.model import (
    BLOCKS,
    DET,
    JOIN,
    OPE,
    RND,
    RND_BITS,
    SEARCH,
    Column,
    Encryption,
    PhysicalDesign,
    TableDesign,
    opaque_name,
)
from veil.design.policy import PLAIN, Policy
from veil.designer.greedy import _ashe_sums, _summed
from veil.encoding import DECIMAL_KIND, INT_KIND, STRING_KIND, SqlType
from veil.sql.workload import WorkloadNeeds

WRAPPED = {"onion": True, "outer": RND}

# A text column is a vocabulary when its distinct values are at most the square
# root of its rows, in a table of at least this many rows (a small table's SWP
# words cost little, and its few values say nothing about the column).
VOCABULARY_MIN_ROWS = 10_000


def vocabulary(distinct: int, rows: int) -> bool:
    """Does a text column of ``rows`` rows and ``distinct`` values hold a short fixed vocabulary?

    TPC-H SF 0.1: l_shipmode (7 of 600,000), o_orderpriority (5 of 150,000) and
    c_mktsegment are; every comment, name, address and phone column is not.
    """
    return rows >= VOCABULARY_MIN_ROWS and distinct * distinct <= rows


def onion_design(
    schema: dict[str, list[Column]],
    schemes: frozenset[str],
    key_fingerprint: str,
    policy: Policy | None = None,
    *,
    sums: bool = True,
    vocabularies: Collection[tuple[str, str]] = (),
    narrow_copies: bool = True,
) -> PhysicalDesign:
    """Onions for every column of ``schema``, within ``policy`` (default: OPE allowed).

    ``vocabularies``: the ``(table, column)`` text columns the data shows to be
    short fixed vocabularies (``vocabulary``), stored without a search onion.
    ``narrow_copies``: numbers of under 64 bits get an RND copy in their type's
    bits, for a server that bit-packs integers (DuckDB); PostgreSQL stores 8
    bytes a BIGINT anyway, where the copy would only make a DET peel a build.
    """
    policy = policy or Policy()
    design = PhysicalDesign(key_fingerprint=key_fingerprint)
    for table, columns in schema.items():
        load = opaque_name("k")  # per load: a reload's columns share no key with the old ones
        encryptions: list[Encryption] = []
        for column in columns:
            searchable = (table, column.name) not in vocabularies
            highest = policy.layer(table, column.name)
            encryptions += _onions(
                table, column, highest, schemes, load, searchable=searchable, narrow=narrow_copies
            )
        summed = WorkloadNeeds(sums={(table, c.name) for c in columns if _additive(c)})
        ashe = _ashe_sums(_summed(table, columns, summed)) if sums else None
        if ashe is not None:
            # built by the first SUM/AVG that needs them (``veil.session.onions``): most
            # numbers are never summed, and their words were 90 of TPC-DS SF 0.1's 229 MB
            ashe.lazy = True
        design.tables[table] = TableDesign(
            name=table,
            server_name=opaque_name("t"),
            row_id=opaque_name("c"),
            columns=list(columns),
            encryptions=encryptions,
            sums=ashe,
            id_counter=opaque_name("t"),
            layers_table=opaque_name("t"),
            blocks_table=opaque_name("t") if any(e.scheme == BLOCKS for e in encryptions) else "",
        )
    return design


def _onions(
    table: str,
    column: Column,
    highest: str,
    schemes: frozenset[str],
    load: str,
    *,
    searchable: bool = True,
    narrow: bool = True,
) -> list[Encryption]:
    kind = SqlType(column.type).kind
    chosen: list[Encryption] = []
    peeled = highest == PLAIN  # the user let the server see it: nothing to wrap

    def add(scheme: str, scope: str, **params: object) -> None:
        if not column.name.isidentifier():
            params["column"] = True  # a name, not an expression (Encryption.is_expression)
        chosen.append(
            Encryption(opaque_name("c"), column.name, scheme, column.type, scope, params, "onion")
        )

    where = f"{table}.{column.name}@{load}"
    layers = {"onion": True} if peeled else dict(WRAPPED)
    if highest == RND or DET not in schemes or not SqlType(column.type).has_equality:
        add(RND, f"rnd:{where}")
        return chosen
    add(DET, f"det:{where}", **layers)
    bits = rnd_bits(SqlType(column.type), column.bounds) if narrow else None
    if not peeled and not SqlType(column.type).is_integral:
        # text is fetched from sealed blocks of rows (``veil.crypto.rowblocks``), which
        # compress as the plaintext does, until its DET onion is built by a first peel:
        # wrapped DET adds 17 bytes (AES-SIV) a value and its RND layer makes every row's
        # bytes differ (TPC-H's l_returnflag took 21.5 bytes a row), and a row-bound RND
        # copy keeps every value's length (l_shipinstruct's four values: 15 bytes a row,
        # 9.1 MB of the SF 0.1 onion load's 130 MB; sealed, its blocks take a few KB)
        add(BLOCKS, f"blocks:{where}")
    elif not peeled and bits is not None:
        # a number is fetched as row-bound RND in its type's bits where DET takes 64 (a
        # DATE or INTEGER: 32), until its DET onion is built by a first peel. Not from
        # blocks, though they compress (TPC-DS SF 0.1's onion load: 229 -> 152 MB): a
        # query fetches numbers from most rows or scattered ones, and a block is fetched,
        # opened and cut whole (TPC-H SF 1, later runs: Q1 1.5 -> 8.9 s, Q3 0.13 -> 0.64 s)
        add(RND, f"rnd:{where}", **{RND_BITS: bits})
    if kind == INT_KIND and JOIN in schemes:
        add(JOIN, f"join:{where}", **layers)
    if SqlType(column.type).is_integral and OPE in schemes and highest in (OPE, PLAIN):
        domain = column_domain(column)
        assert domain is not None
        add(OPE, f"ope:{where}", bits=signed_bits(*domain), **layers)
    if kind == STRING_KIND and SEARCH in schemes and searchable:
        add(SEARCH, f"search:{where}", onion=True)
    return chosen


def _additive(column: Column) -> bool:
    return column.name.isidentifier() and SqlType(column.type).kind in (INT_KIND, DECIMAL_KIND)
