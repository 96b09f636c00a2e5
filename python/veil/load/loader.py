"""``veil load``: plaintext source -> encode -> encrypt column-wise -> bulk load.

Each table is loaded atomically (the backend loads a staging table and renames
it), and the design file is rewritten after each table, so the design always
describes exactly the tables on the server. A failed load can simply be run
again: the table is designed afresh under new opaque names and the old
server table, if any, is dropped once the new one is in place.

OPE and HOM widths come from the columns' value domains: their SQL types', or
narrower ones the user declares (``domains=``, ``veil load --domain``; see
``veil.design.domains`` and docs/sql.md). Every declared domain is checked
against the whole source before anything is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot

from veil.backends import Backend, canonical_url, connect
from veil.backends.duckdb import DuckDBBackend
from veil.ciphers.blocks import blocks_schema
from veil.ciphers.columns import BYTES_FORM, available_schemes
from veil.ciphers.encrypt import TableEncryptor
from veil.ciphers.hom_group import HomGroupCipher, side_schema
from veil.crypto.hom_pool import EncryptionPool
from veil.crypto.keys import MasterKey
from veil.design import SUM_SCHEMES
from veil.design.domains import check_declared, declare_domains, parse_domain_specs
from veil.design.model import (
    DET,
    OPE,
    Column,
    DesignError,
    Encryption,
    PhysicalDesign,
    TableDesign,
)
from veil.design.policy import Policy, check_policy_columns
from veil.designer.files import chosen_design
from veil.designer.greedy import greedy_design
from veil.designer.onions import onion_design, vocabulary
from veil.encoding import BOOL_KIND, STRING_KIND, SqlType, no_values
from veil.keys.generations import writing
from veil.load import (
    ashe_widths,
    cipher_order,
    clusters,
    fitted_copies,
    narrow_det,
    narrow_ope,
    ope_warm,
    pending,
    plain_size,
    statistics,
)
from veil.load.prefetch import in_order, prefetched, workers
from veil.load.progress import Reporter, to_stderr
from veil.load.sources import SourceTable, open_source
from veil.load.zones import ZoneRecorder
from veil.session.clientdir import DESIGN_FILE, ClientDir, create_client_dir
from veil.session.onions import defer_layers, layers_rows
from veil.session.row_ids import counter_table
from veil.sql.errors import ClientDirectoryError

BATCH_ROWS = 65536
HOM_CHUNK_PACKS = 16384  # Paillier encryptions per progress step (a few seconds' work)

Progress = Callable[[str], None]  # receives each message of a load
# ``{"table.column": (low, high)}``, or ``["table.column=LOW..HIGH", ...]``
Domains = Mapping[str, tuple[object, object]] | Iterable[str]


@dataclass
class LoadReport:
    table: str
    rows: int
    seconds: float


def read_workload(paths: list[str]) -> list[str]:
    """The statements of the given SQL files (several per file, ``;``-separated)."""
    queries: list[str] = []
    for path in paths:
        text = Path(path).read_text()
        queries += [s.sql(dialect="duckdb") for s in sqlglot.parse(text, read="duckdb") if s]
    return queries


def load(
    source: str,
    server_url: str,
    client_dir: str,
    workload: list[str] | None = None,
    progress: Progress | None = None,
    *,
    sums: str = "ashe",
    domains: Domains | None = None,
    key_file: str | None = None,
    key_provider: str | None = None,
    policy: Policy | None = None,
    design: PhysicalDesign | None = None,
    replace: bool = True,
    skip: Collection[str] = (),
) -> list[LoadReport]:
    """Load every table of ``source`` (but those named in ``skip``); returns what was loaded.

    A table the client directory holds already is loaded anew, losing rows
    written to it since, only with ``replace``; without it the load is refused
    before anything is written (``veil load`` refuses unless ``--replace``;
    ``--append`` skips such tables here and inserts their rows instead).

    Without a ``workload`` every column is stored as onions whose layers come
    off when queries first need them (``veil.designer.onions``); with one,
    the greedy designer stores what its queries use. Either way ``policy``
    (default: the client directory's ``policy.json``, else OPE allowed
    everywhere) bounds what any column may reveal.

    ``sums`` says how the server adds the workload's SUM/AVG arguments:
    ``"ashe"`` (symmetric, 8 or 16 bytes per value and row, the default),
    ``"paillier"`` (packed Paillier groups, which a party without the key
    can add too; their encryption dominates load time: ~0.2 ms per
    ciphertext and core, one ciphertext per few rows) or ``"none"`` (every
    SUM runs on the client).

    ``domains`` declares narrower value domains than the columns' types
    (``{"lineitem.l_quantity": (0, 100)}`` or ``["lineitem.l_quantity=0..100"]``):
    narrower OPE and HOM widths, and later INSERT/UPDATE of a value outside
    the domain is refused. A source value outside its declared domain fails
    the load before anything is written. ``key_file`` (from ``veil keygen``)
    is the key to encrypt with; without it the client directory gets a new one,
    kept by ``key_provider`` (``kmip://...``, ``pkcs11:...``; docs/keys.md) if given.
    ``design`` (from ``veil design``) is the design to load under instead of
    one made here; it must name the source's tables and columns and stay
    within ``policy``.
    """
    say = Reporter(progress or to_stderr, bars=progress is None)
    server_url = canonical_url(server_url)  # stored: the same file from any directory
    declared = (
        dict(domains)
        if isinstance(domains, Mapping)
        else parse_domain_specs([domains] if isinstance(domains, str) else domains or [])
    )
    con, tables = open_source(source, say.say)
    tables = [t for t in tables if t.name not in {name.lower() for name in skip}]
    again = sorted(loaded_tables(client_dir) & {t.name for t in tables})
    if again and not replace:
        con.close()
        raise ClientDirectoryError(
            f"{client_dir} holds table(s) {', '.join(again)} already: loading again would "
            "replace them, losing every row written to them since; give --replace to load "
            "them anew, or --append to add the source's rows to them"
        )
    schema = {t.name: t.columns(con) for t in tables}
    declare_domains(schema, declared)
    for table in tables:
        _check_declared_domains(table, con, schema[table.name])
    made = _new_directory(client_dir)
    # into a client directory in use: no re-key's final switch (which destroys the old
    # key) between reading its keys here and saving the tables encrypted under them
    in_use = (Path(client_dir) / DESIGN_FILE).exists()
    held = writing(Path(client_dir)) if in_use else contextlib.nullcontext()
    try:
        with held:
            client, master = create_client_dir(client_dir, server_url, key_file, key_provider)
            return _designed_and_loaded(
                con, tables, schema, client, master, server_url, say,
                workload=workload, sums=sums, policy=policy, design=design,
            )  # fmt: skip
    except BaseException:
        if made is not None:  # a first load that failed leaves no half-made directory
            _remove_made(made)
        raise
    finally:
        con.close()


def _designed_and_loaded(
    con: duckdb.DuckDBPyConnection,
    tables: list[SourceTable],
    schema: dict[str, list[Column]],
    client: ClientDir,
    master: MasterKey,
    server_url: str,
    say: Reporter,
    *,
    workload: list[str] | None,
    sums: str,
    policy: Policy | None,
    design: PhysicalDesign | None,
) -> list[LoadReport]:
    if sums not in SUM_SCHEMES:
        raise DesignError(f"sums={sums!r} is not one of {', '.join(SUM_SCHEMES)}")
    if policy is None:
        policy = client.policy()
    check_policy_columns(policy, schema)
    fresh: PhysicalDesign | None = None
    # the plaintext's size sampled while the greedy designer works (``plain_size.Sampling``)
    sampling = (
        plain_size.Sampling(tables, con)
        if design is None and workload and _sizes_plaintext(server_url)
        else None
    )
    try:
        if design is not None:
            fresh = chosen_design(design, schema, policy, master.fingerprint())
        elif workload:
            fresh = greedy_design(
                schema, workload, available_schemes(), master.fingerprint(), sums=sums,
                policy=policy,
            )  # fmt: skip
        backend = connect(server_url)
        try:
            if fresh is None:  # onions, whose number copies depend on the server's storage
                fresh = onion_design(
                    schema, available_schemes(), master.fingerprint(), policy, sums=sums == "ashe",
                    vocabularies=_vocabularies(con, tables, schema),
                    narrow_copies=backend.compresses_repeated_bytes,
                )  # fmt: skip
            return load_into(con, tables, fresh, client, master, backend, say, sampling=sampling)
        finally:
            backend.close()
    finally:
        if sampling is not None:
            sampling.close()


def _sizes_plaintext(server_url: str) -> bool:
    """Whether the load measures the plaintext's size for this server (DuckDB's: where
    it compresses, ``load_into``), known without connecting to it."""
    return server_url.startswith("duckdb:") and DuckDBBackend.compresses_repeated_bytes


def _new_directory(client_dir: str) -> tuple[Path, bool] | None:
    """(the directory, whether it exists) when a load would make it; None if it has files."""
    path = Path(client_dir)
    if not path.exists():
        return path, False
    return (path, True) if path.is_dir() and not any(path.iterdir()) else None


def _remove_made(made: tuple[Path, bool]) -> None:
    """Undo what a failed first load made in the client directory (the directory too,
    unless it was there, empty, before)."""
    path, existed = made
    if existed:
        for child in path.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def loaded_tables(client_dir: str | os.PathLike[str]) -> set[str]:
    """The tables a client directory holds (none for a new one); read without the key."""
    path = Path(client_dir) / DESIGN_FILE
    return set(PhysicalDesign.load(path).tables) if path.exists() else set()


def load_into(
    con: duckdb.DuckDBPyConnection,
    tables: list[SourceTable],
    fresh: PhysicalDesign,
    client: ClientDir,
    master: MasterKey,
    backend: Backend,
    say: Reporter,
    *,
    in_source_order: bool = False,
    before_swap: Callable[[TableDesign], None] | None = None,
    sampling: plain_size.Sampling | None = None,
) -> list[LoadReport]:
    """Encrypt and load ``tables`` (read through ``con``) under their ``fresh`` designs.

    Each table replaces one of the same name atomically: the design names its
    new server tables only once they are complete (``_load_table``). Also
    the way DDL creates and rebuilds tables (``veil.load.ddl``).

    ``in_source_order``: row i of a source gets row id i, its design's
    ``cluster_by`` and ``sort_by`` kept (a re-key, ``veil.load.rekey_copy``,
    maps old ids to new ones so). ``before_swap(table)``: called once a
    table's server tables are complete, before the design names them.
    ``sampling``: the plaintext's size, sampled already (``plain_size.Sampling``).
    """
    design = client.design(master) if client.has_design() else PhysicalDesign(master.fingerprint())
    if not backend.in_transaction:  # a rollback would bring back what it drops
        cleared = pending.sweep(client, backend, design)
        if cleared:
            say.say(f"dropped {cleared} server tables an interrupted load had left")
    ranges: dict[int, tuple[int | None, int | None]] = {}  # DET integers', by id(encryption)
    counts: dict[str, int | None] = {}
    for table in tables:
        summed, keys = statistics.record(table, con, fresh.tables[table.name])
        counts[table.name] = table.row_count(con)
        if not in_source_order:
            clusters.choose(fresh.tables[table.name], counts[table.name], backend.skips_row_blocks)
        ashe_widths.fit(fresh.tables[table.name], summed)
        fitted_copies.choose(
            fresh.tables[table.name], keys, packed=backend.compresses_repeated_bytes
        )
        ranges.update(keys)
    if backend.compresses_repeated_bytes:
        _store_few_values_as_bytes(fresh, design, counts)
        narrow_det.choose(fresh, design, ranges)
        narrow_ope.choose(fresh, design)
        # the space budget's unit: the plaintext as this server stores it
        measured = [(t, fresh.tables[t.name], counts[t.name]) for t in tables]
        if sampling is not None and sampling.names == [t.name for t in tables]:
            sizes = sampling.sizes()
            plain_size.set_sizes(measured, [sizes[t.name] for t in tables], con)
        else:
            plain_size.measure_all(measured, con)
    else:  # 4-byte DET ciphertexts where the SQL types bound them (PostgreSQL)
        narrow_det.choose_by_type(fresh, design)
    loaded = _Loaded(in_source_order, before_swap)
    # each batch in the order of a key's ciphertexts, where the server bit-packs them
    if not in_source_order and backend.compresses_repeated_bytes:
        for table in tables:
            key = cipher_order.key_of(fresh.tables[table.name], counts[table.name])
            if key is not None:
                loaded.cipher_keys[table.name] = key
    return [
        _load_table(t, con, fresh.tables[t.name], design, client, master, backend, say, loaded)
        for t in tables
    ]


@dataclass
class _Loaded:
    """How a table is loaded (``load_into``'s options)."""

    in_source_order: bool = False
    before_swap: Callable[[TableDesign], None] | None = None
    # per table, the key whose ciphertexts order each batch (``veil.load.cipher_order``)
    cipher_keys: dict[str, Encryption] = dataclasses.field(default_factory=dict)


def _load_table(
    source: SourceTable,
    con: duckdb.DuckDBPyConnection,
    table: TableDesign,
    design: PhysicalDesign,
    client: ClientDir,
    master: MasterKey,
    backend: Backend,
    say: Reporter,
    options: _Loaded,
) -> LoadReport:
    started = time.perf_counter()
    schema = TableEncryptor(master, table).server_schema(_empty(table.columns))
    # the JOIN-ADJ, OPE and SEARCH onions, and the DET onions of columns fetched from
    # a copy (blocks, RND), are built by their first peel, if any (most never are): the load
    # stores NULLs in their columns
    deferred = {e.name for e in defer_layers(table)}
    built = [e for e in table.encryptions if e.name not in deferred]
    # an onion load's ASHE words too (``AsheSums.lazy``), by the first SUM/AVG of one
    sums = table.sums if table.sums is not None and not table.sums.lazy else None
    loaded = dataclasses.replace(table, encryptions=built, sums=sums)
    key = options.cipher_keys.get(table.name)
    # many-valued OPE columns' values, encrypted in order by each thread first (``ope_warm``)
    warm = ope_warm.distinct_values(source, con, table, {e.name for e in built})

    def batch_work() -> _BatchWork:  # one per encrypting thread: nothing shared
        reorder = cipher_order.CipherOrder(master, table, key).reorder if key else None
        encryptor = TableEncryptor(master, loaded)
        encryptor.prime(warm)
        return _BatchWork(encryptor, schema, reorder)

    blocks: list[pa.Table] = []
    zones = ZoneRecorder(table) if backend.skips_row_blocks else None
    order = None if options.in_source_order else clusters.order_by(table, master)
    encrypted = _encrypted_batches(source, con, batch_work, say, blocks, order, zones)
    # a pending record names the new tables until the design does (``veil.load.pending``)
    with pending.creating(client, table) as record:
        rows = backend.bulk_load(table.server_name, prefetched(encrypted), schema=schema)
        table.row_count = rows
        if zones is not None:
            zones.finish()
        backend.bulk_load(table.id_counter, counter_table(rows))
        if table.layers_table:
            backend.bulk_load(table.layers_table, layers_rows(table, master))
        if table.blocks_table:
            backend.bulk_load(
                table.blocks_table,
                (b for sealed in blocks for b in sealed.to_batches()),
                schema=blocks_schema(),
            )
        if table.hom is not None:
            _load_hom_group(source, con, table, master, backend, say)
        if options.before_swap is not None:
            options.before_swap(table)
        # The new tables have fresh random names: until the design names them,
        # the old design (and its tables) stay valid, so the swap is atomic. The
        # design is read again under its lock, so that what other sessions changed
        # meanwhile (peels, DDL, a re-key's other tables) is kept.
        with client.design_lock():
            design = _current(client, master, design)
            previous = design.tables.get(table.name)
            design.tables[table.name] = table
            design.save(client.design_path)
        if previous is not None and previous.server_name != table.server_name:
            old = [previous.server_name, *previous.side_tables()]
            record.dropping(old)
            for name in old:
                backend.drop_table(name)
    seconds = time.perf_counter() - started
    say.say(f"{table.name}: {rows:,} rows loaded in {seconds:.1f} s")
    return LoadReport(table.name, rows, seconds)


def _current(client: ClientDir, master: MasterKey, design: PhysicalDesign) -> PhysicalDesign:
    """The design on disk now (``design`` for a first load, which has none yet)."""
    return client.design(master) if client.has_design() else design


def _encrypted_batches(
    source: SourceTable,
    con: duckdb.DuckDBPyConnection,
    batch_work: Callable[[], _BatchWork],
    say: Reporter,
    blocks: list[pa.Table],
    order: str | None,
    zones: ZoneRecorder | None,
) -> Iterator[pa.RecordBatch]:
    """The main table's encrypted batches; the BLOCKS columns' blocks go to ``blocks``.

    ``order`` clusters the rows (``veil.load.clusters``); the ids follow it, and
    ``zones`` records each block's span of the range-filtered columns in it.
    The batches are encrypted on every core (``prefetch.in_order``), each thread
    with its own ``batch_work()``, and come out in the source's order.
    """
    meter = say.meter(f"{source.name}: encrypting", lambda: source.row_count(con))

    def numbered() -> Iterator[tuple[pa.Table, int]]:
        done = 0  # row i of the source gets row id i (and is in Paillier pack i // R)
        for batch in source.batches(con, BATCH_ROWS, order):
            yield (
                pa.Table.from_batches([batch]).rename_columns(
                    [c.lower() for c in batch.schema.names]
                ),
                done,
            )
            done += batch.num_rows

    for done in in_order(numbered(), batch_work, workers()):
        yield from done.rows.to_batches()
        if done.sealed is not None:
            blocks.append(done.sealed)
        if zones is not None:
            zones.add(done.plain, done.first_id)
        meter.advance(len(done.plain))
    meter.close()


@dataclass
class _Encrypted:
    """One batch of a table, encrypted (``_BatchWork``)."""

    plain: pa.Table  # its plaintext rows, in the order of their ids
    first_id: int
    rows: pa.Table  # the main table's
    sealed: pa.Table | None  # the BLOCKS side table's


@dataclass
class _BatchWork:
    """Encrypts one batch of plaintext rows and its first row id.

    ``reorder`` orders the batch's rows before they get their ids
    (``veil.load.cipher_order``). The rows have the columns of ``schema``: NULL
    for those ``encryptor`` leaves out (``defer_layers``).
    """

    encryptor: TableEncryptor
    schema: pa.Schema
    reorder: Callable[[pa.Table], pa.Table] | None

    def __call__(self, batch: tuple[pa.Table, int]) -> _Encrypted:
        plain, first_id = batch
        if self.reorder is not None:
            plain = self.reorder(plain)
        rows = _with_nulls(self.encryptor.encrypt(plain, first_id=first_id), self.schema)
        return _Encrypted(plain, first_id, rows, self.encryptor.blocks(plain, first_id=first_id))


def _with_nulls(encrypted: pa.Table, schema: pa.Schema) -> pa.Table:
    """``encrypted`` with the columns of ``schema`` in its order, NULL where it has none."""
    if encrypted.num_columns == len(schema):
        return encrypted
    have = set(encrypted.column_names)
    return pa.table(
        {
            f.name: encrypted.column(f.name) if f.name in have else pa.nulls(len(encrypted), f.type)
            for f in schema
        }
    )


def _load_hom_group(
    source: SourceTable,
    con: duckdb.DuckDBPyConnection,
    table: TableDesign,
    master: MasterKey,
    backend: Backend,
    say: Reporter,
) -> None:
    """Second pass over the source: pack and encrypt the summed expressions.

    DuckDB scans the source in the same order both times, so the packs follow
    the slots the first pass gave the rows (``pack = slot // R``).
    """
    group = table.hom
    assert group is not None
    cipher = HomGroupCipher.sized(master, group)
    encryptor = TableEncryptor(master, table)
    with EncryptionPool(master, group.key_scope) as pool:
        backend.bulk_load(
            group.server_name,
            prefetched(_hom_batches(source, con, encryptor, cipher, pool, say)),
            schema=side_schema(),
        )


def _hom_batches(
    source: SourceTable,
    con: duckdb.DuckDBPyConnection,
    encryptor: TableEncryptor,
    cipher: HomGroupCipher,
    pool: EncryptionPool,
    say: Reporter,
) -> Iterator[pa.RecordBatch]:
    chunk = cipher.rows * HOM_CHUNK_PACKS
    meter = say.meter(f"{source.name}: Paillier packs", lambda: source.row_count(con))
    pending, packs, done = np.zeros((0, cipher.packer.columns), np.int64), 0, 0
    for batch in source.batches(con, BATCH_ROWS):
        plain = pa.Table.from_batches([batch]).rename_columns(
            [c.lower() for c in batch.schema.names]
        )
        pending = np.concatenate([pending, cipher.values(encryptor.sources(plain))])
        while len(pending) >= chunk:
            yield from cipher.encrypt_packs(pending[:chunk], packs, pool).to_batches()
            pending, packs, done = pending[chunk:], packs + HOM_CHUNK_PACKS, done + chunk
            meter.advance(chunk)
    if len(pending):
        yield from cipher.encrypt_packs(pending, packs, pool).to_batches()
        meter.advance(len(pending))
    meter.close()


def _vocabularies(
    con: duckdb.DuckDBPyConnection, tables: list[SourceTable], schema: dict[str, list[Column]]
) -> set[tuple[str, str]]:
    """The text columns holding a short fixed vocabulary (``veil.designer.onions.vocabulary``),
    one scan of each table with text columns."""
    found: set[tuple[str, str]] = set()
    for table in tables:
        texts = [c.name for c in schema[table.name] if SqlType(c.type).kind == STRING_KIND]
        if not texts:
            continue
        counts = "".join(f', approx_count_distinct("{c}")' for c in texts)
        sql = f"SELECT count(*){counts} FROM {table.relation_sql}"
        rows, *distinct = con.execute(sql).fetchall()[0]
        found |= {
            (table.name, c) for c, d in zip(texts, distinct, strict=True) if vocabulary(d, rows)
        }
    return found


# At most this many distinct values, an int64 OPE column is stored as 8-byte
# binaries where the server compresses those (``OrderedBytesForm``). Measured on
# DuckDB 2.0, 6M rows: 11 distinct values take 4 MB as bytes against 51 MB as
# BIGINT, 2,400 take 13 MB, 9,442 take 19 MB, 195,000 take 64 MB (worse). TPC-DS SF 1's
# store_sales list and sales prices (19,720 and 18,195 values in 2.9M rows) take 13 MB
# less as bytes; q28's ranges over them compare bytes (1.6x -> 2.0x its plaintext).
BYTES_FORM_MAX_DISTINCT = 32768
# A DET-only scope, whose integers can instead be narrow (20+ bits, ``narrow_det``),
# takes the bytes form only below this: DuckDB joins, filters and scans BLOB keys
# more slowly than BIGINT ones, and above ~1,000 values the dictionary saves under
# 10 of narrow DET's 20 bits a row. TPC-H SF 1 with l_suppkey (9,442 values) and the
# DET dates (~2,400) as narrow BIGINT: median ratio 2.35 -> 1.84 (A/B, one process),
# server space x1.93 -> x1.98 (bench/RESULTS.md, issue 9).
BYTES_FORM_MAX_DISTINCT_DET = 1024
# ... and only when its tables hold at least this many rows together: below, the
# dictionary saves a few MB at most, and joins and filters of BLOB keys cost 2-3x
# those of BIGINT ones (TPC-H Q5's join of customer's and supplier's nation keys:
# 16.4 ms as bytes against 5.0 ms for the plaintext integers at SF 1).
BYTES_FORM_MIN_ROWS = 1_000_000


def _store_few_values_as_bytes(
    fresh: PhysicalDesign, loaded: PhysicalDesign, counts: dict[str, int | None]
) -> None:
    """Choose the bytes form for the integer key scopes whose columns hold few values.

    Every column of a scope (an equi-join group, or OPE columns compared
    with each other) must store the same type: a scope gets the bytes form
    when each of its columns is a DET integer, or an int64 OPE, of at most
    ``BYTES_FORM_MAX_DISTINCT`` values (``BYTES_FORM_MAX_DISTINCT_DET`` for a
    scope of DET columns only: TPC-H's l_quantity, 50 values, but not
    l_suppkey's, 10,000 at SF 1; OPE's bytes sort as its integers,
    ``OrderedBytesForm``: TPC-H's OPE dates, 2,526 values), and its tables hold
    ``BYTES_FORM_MIN_ROWS`` rows together (not the n_nationkey group's
    160,025). A scope that tables loaded earlier (and not reloaded now)
    already use keeps their form. A scope of only columns that order their
    tables' rows (``TableDesign.sort_by``: TPC-H's o_orderdate, not
    l_shipdate, which shares its key with l_commitdate) keeps the int64 form.
    """
    members: dict[str, list[Encryption]] = {}
    unordered: set[str] = set()  # scopes with a column that does not order its table's rows
    rows: dict[str, int] = {}  # the rows of each scope's tables, together
    for table in fresh.tables.values():
        for enc in table.encryptions:
            members.setdefault(enc.key_scope, []).append(enc)
            rows[enc.key_scope] = rows.get(enc.key_scope, 0) + (counts.get(table.name) or 0)
            if enc.scheme != OPE or enc.source != table.sort_by:
                unordered.add(enc.key_scope)
    earlier = {
        enc.key_scope: enc.params.get("form")
        for table in loaded.tables.values()
        if table.name not in fresh.tables
        for enc in table.encryptions
    }
    for scope, encs in members.items():
        if scope in earlier:
            few = earlier[scope] == BYTES_FORM
        elif rows[scope] < BYTES_FORM_MIN_ROWS or scope not in unordered:
            # small: little to save; ordering rows: its integers come in runs, which the
            # server compresses by itself (and int64 compares faster than bytes)
            few = False
        else:
            limit = (
                BYTES_FORM_MAX_DISTINCT_DET
                if all(e.scheme == DET for e in encs)
                else BYTES_FORM_MAX_DISTINCT
            )
            few = all(
                (e.scheme == DET or (e.scheme == OPE and not e.ope_binary))
                and not e.onion  # wrapped, its values are random: nothing to compress
                and e.sql_type.is_integral
                and e.sql_type.kind != BOOL_KIND  # narrow instead: filtered faster
                and isinstance(distinct := e.params.get("distinct"), int)
                and distinct <= limit
                for e in encs
            )
        if few:
            for enc in encs:
                enc.params["form"] = BYTES_FORM


def _check_declared_domains(
    source: SourceTable, con: duckdb.DuckDBPyConnection, columns: list[Column]
) -> None:
    """Refuse a source whose values leave a declared domain (one scan per table)."""
    declared = [c for c in columns if c.bounds is not None]
    ranges = statistics.encoded_ranges(source, con, [(c.name, c.type) for c in declared])
    for column, (low, high, _) in zip(declared, ranges, strict=True):
        check_declared(
            column,
            low,
            high,
            f"table {source.name!r} of the source holds values outside the domain declared "
            "for this column; nothing was loaded (widen or drop the --domain)",
            table=source.name,
        )


def _empty(columns: list[Column]) -> pa.Table:
    return pa.table({c.name: no_values(c.sql_type) for c in columns})
