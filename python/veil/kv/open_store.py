"""``veil.kv.open``: a MiniCrypt store over SQLite or Cassandra.

>>> with veil.kv.open("sqlite:///tmp/kv.db", "veil.key") as store:   # doctest: +SKIP
...     store.put(42, b"hello")
...     store.get(42)
b'hello'

Keys are 64-bit signed integers or byte strings (one type per table); values
are bytes. ``mode="generic"`` allows any write (paper §5,
:class:`~veil.kv.store.Store`); ``mode="append"`` makes puts single inserts
into epochs that clients merge into packs in the background (§6,
:class:`~veil.kv.append.AppendStore`). See ``docs/kv.md`` for the protocols
and what the server learns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from os import PathLike

from veil.crypto.keys import KeyLabel, MasterKey
from veil.errors import ParameterError
from veil.keys import load_key
from veil.kv import catalog
from veil.kv.append import AppendStore
from veil.kv.backends import open_backend
from veil.kv.codec import codec_id, pad_tiers
from veil.kv.envelope import DICTIONARY_CODEC, Envelope
from veil.kv.layout import bucket_bits_for
from veil.kv.store import DEFAULT_PACK_CACHE, Store

DEFAULT_EPOCH_SECONDS = 10.0
# A new table's compression: zstd with a dictionary trained on the table's own rows
# reaches the whole data set's ratio (101% on 100,000 JSON records, where zlib's
# packs reached 81%). Tables made before keep what they were made with.
DEFAULT_COMPRESSION = DICTIONARY_CODEC
LEGACY_COMPRESSION = "zlib"  # tables whose catalog entry does not record it
MODES = ("generic", "append")


def open(
    url: str,
    key_file: str | PathLike[str] | MasterKey,
    mode: str = "generic",
    *,
    pack_rows: int | None = None,
    block_rows: int | None = None,
    compression: str | None = None,
    table: str = "default",
    padding: str | Sequence[int] | None = None,
    prf_pack_ids: bool = False,
    partitions: int | None = None,
    passphrase: str | None = None,
    background: bool = True,
    epoch_seconds: float | None = None,
    clock: Callable[[], float] | None = None,
    client_id: str | None = None,
    pack_cache: int = DEFAULT_PACK_CACHE,
    auto_compact: bool = True,
) -> Store:
    """Open (creating if needed) the MiniCrypt table ``table`` at ``url``.

    ``compression``: ``"zstd-dict"`` (a new table's default: zstd with a
    dictionary trained on the table's rows), ``"zstd"``, ``"zlib"`` or ``"lz4"``;
    omitted, an existing table's own (recorded when it was created; ``"zlib"``
    for tables older than that record). Every pack names its codec, so clients
    that differ still read each other's packs.
    ``pack_rows`` is the target keys per pack, fixed when the table is
    created; packs split past 1.5 x that. ``block_rows`` (with
    ``compression="zstd-dict"``): rows per independently compressed block of
    a pack, the most a point read inflates (default: chosen with the pack
    size, or ``pack_rows`` when that is given). Without ``pack_rows``, the first batch written
    chooses it from the data: the smallest pack whose compression reaches 90%
    of the whole batch's, within a 64 KiB read cap (:mod:`veil.kv.packsize`;
    a first write of a single key takes the default, 50). ``padding`` pads every
    compressed pack to a size tier (``"pow2"`` or a list of byte sizes).
    ``prf_pack_ids`` hides keys behind pseudorandom packIDs (GENERIC mode
    only; no range queries). ``partitions`` overrides the backend's number of
    hash partitions for a new table. APPEND-mode options: ``epoch_seconds``
    (epoch length, default 10, fixed when the table is created; must exceed
    the time keys may arrive out of order plus client clock drift), ``background`` (run merges and epoch management in a
    background thread; tests turn it off and call ``maintain()``), ``clock``
    and ``client_id`` (for tests). ``pack_cache`` is how many opened packs
    this client keeps in memory (0 = none; see :mod:`veil.kv.cache`).
    ``auto_compact`` (default on): after a bulk load of 10,000 keys or more and
    after APPEND merges, compact the database when the backend finds more than
    15% of it free or unused (SQLite ``VACUUM``; at most once a minute).
    """
    if mode not in MODES:
        raise ParameterError(f"unknown mode {mode!r}; use 'generic' or 'append'")
    if prf_pack_ids and mode != "generic":
        raise ParameterError("pseudorandom packIDs are supported only in GENERIC mode (§2.5)")
    for name, rows in (("pack_rows", pack_rows), ("block_rows", block_rows)):
        if rows is not None and rows < 1:
            raise ParameterError(f"{name} must be at least 1, got {rows}")
    if compression is not None and compression != DICTIONARY_CODEC:
        codec_id(compression)  # reject unknown names before touching the store
    tiers = pad_tiers(padding)
    master = key_file if isinstance(key_file, MasterKey) else load_key(key_file, passphrase)
    backend = open_backend(url)
    try:
        catalog.check_fingerprint(backend, master)
        spread = (partitions or backend.default_partitions) > 1 and not prf_pack_ids
        # Given a pack size but no data, the keys' spacing is unknown: dense keys.
        bits = bucket_bits_for(pack_rows) if pack_rows is not None and spread else None
        wanted = catalog.TableConfig(
            mode=mode,
            pack_rows=pack_rows,
            partitions=partitions or backend.default_partitions,
            prf_pack_ids=prf_pack_ids,
            epoch_seconds=epoch_seconds or DEFAULT_EPOCH_SECONDS,
            block_rows=block_rows,
            bucket_bits=bits,
            compression=compression or DEFAULT_COMPRESSION,
        )
        base = catalog.physical_base(master, table)
        config = catalog.load_config(backend, base, wanted, table)
        if config.pack_rows is None and pack_rows is not None:  # created without, not yet chosen
            config = catalog.record_pack_rows(
                backend, base, lambda: (pack_rows, block_rows, None, bits)
            )
        _check_fixed(table, config, pack_rows=pack_rows, epoch_seconds=epoch_seconds)
        chosen = compression or config.compression or LEGACY_COMPRESSION
        envelope = Envelope(master.derive(KeyLabel("kv-pack", table)), table, chosen, tiers)
        table_args = (backend, master, table, config, envelope)
        if mode == "generic":
            return Store(*table_args, pack_cache=pack_cache, auto_compact=auto_compact)
        return AppendStore(
            *table_args,
            background=background,
            pack_cache=pack_cache,
            auto_compact=auto_compact,
            clock=clock,
            client_id=client_id,
        )
    except BaseException:
        backend.close()
        raise


def _check_fixed(table: str, config: catalog.TableConfig, **given: object) -> None:
    """Settings every client must share: refuse an explicit different value."""
    for name, value in given.items():
        if value is not None and getattr(config, name) != value:
            raise ParameterError(
                f"key-value table {table!r} was created with {name}={getattr(config, name)}; "
                f"every client must use the same value (omit {name} to adopt it)"
            )
