"""A MiniCrypt table in GENERIC mode (paper §5): the :class:`Store` that ``veil.kv.open`` returns.

Every write goes to its pack: a put or delete rewrites the pack that holds the
key, a bulk load cuts sorted keys into packs. The APPEND mode
(:mod:`veil.kv.append`) subclasses it; :mod:`veil.kv.open_store` opens either.
See ``docs/kv.md`` for the protocols and what the server learns.

Thread safety: a store may be shared by the threads of one process (each call
is a self-contained protocol run; the backend serialises its connection).
Several processes or machines each open their own store on the same URL.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType

from veil.crypto.keys import KeyLabel, MasterKey
from veil.errors import ParameterError
from veil.kv import catalog
from veil.kv.backends import KVBackend
from veil.kv.cache import PackCache
from veil.kv.dictionary import MIN_DICTIONARY_ROWS, Dictionaries, block_compressor, refresh
from veil.kv.envelope import Envelope
from veil.kv.keys import Key, decode_keys, encode_key, encoded_kind, key_kind
from veil.kv.layout import Layout, bucket_bits_for
from veil.kv.packs import Batch, PackTable
from veil.kv.packsize import choose_blocked, choose_pack_rows

DEFAULT_PACK_ROWS = 50
DEFAULT_PACK_CACHE = 1024  # packs; memory ~ this x one pack's plaintext
# Range results: keys decoded per numpy pass. A pass costs ~10 us however
# few keys it takes; a 1,000-key range of debian-packages took 1.107 ms of CPU
# with 1,024 against 1.123 ms with 256 (ten interleaved rounds).
DECODE_KEYS = 1024
AUTO_COMPACT_ROWS = 10_000  # a bulk load at least this large checks the file's waste
AUTO_COMPACT_SECONDS = 60.0  # and at most once a minute per store


class Store:
    """A GENERIC-mode MiniCrypt table (the APPEND mode subclasses it)."""

    def __init__(
        self,
        backend: KVBackend,
        master: MasterKey,
        table: str,
        config: catalog.TableConfig,
        envelope: Envelope,
        *,
        pack_cache: int = DEFAULT_PACK_CACHE,
        owns_backend: bool = True,
        auto_compact: bool = True,
    ):
        self.backend = backend
        self.table = table
        self.config = config
        self._master = master
        self._owns_backend = owns_backend
        self._base = catalog.physical_base(master, table)
        prf_key = master.derive(KeyLabel("kv-packid", table)) if config.prf_pack_ids else None
        self._part_key, self._prf_key = master.derive(KeyLabel("kv-part", table)), prf_key
        self.layout = Layout(config.partitions, self._part_key, prf_key, config.bucket_bits)
        self.packs = PackTable(
            backend,
            self._base + "p",
            envelope,
            self.layout,
            config.pack_rows or DEFAULT_PACK_ROWS,  # until the first write chooses
            config.max_keys,
            PackCache(pack_cache),
        )
        self.packs.block_rows = config.block_rows or self.packs.pack_rows
        backend.ensure_table(self.packs.table)
        # Dictionaries are written once and counted in the table's bytes: sealed dense.
        dense_seal = functools.partial(envelope.seal, dense=True)
        self._dictionaries = Dictionaries(backend, self._base, dense_seal, envelope.open)
        envelope.dictionaries = self._dictionaries
        if envelope.wants_dictionary:
            envelope.dictionary = self._dictionaries.current()
        self.auto_compact = auto_compact
        self._compact_checked = float("-inf")
        self._closed = False

    # -- the API ----------------------------------------------------------
    def get(self, key: Key) -> bytes | None:
        """The value of ``key``, or None if it has none."""
        encoded = self._encode(key, writing=False)
        return None if encoded is None else self._get_packed(encoded)

    def _get_packed(self, encoded: bytes) -> bytes | None:
        value = self.packs.get(encoded)
        if value is None and self.config.pack_rows is None and self._refresh_layout():
            value = self.packs.get(encoded)  # the first write chose buckets meanwhile
        return value

    def _settled(self) -> PackTable:
        """The pack table, cut by the stored choices, for a write that skips ``_prepare_batch``."""
        if self.config.pack_rows is None:
            self._refresh_layout()
        return self.packs

    def _refresh_layout(self) -> bool:
        """Adopt the stored configuration; True if the key buckets changed.

        A client that opened the table before its first write has no key
        buckets yet; the writer's choice may since have put keys into other
        partitions than per-key hashing would. Reads call this while the pack
        size is unchosen: on a miss (a get) or before a range.
        """
        before = self.layout.bucket_bits
        self._adopt(catalog.reload(self.backend, self._base))
        return self.layout.bucket_bits != before

    def put(self, key: Key, value: bytes) -> None:
        """Set ``key`` to ``value``."""
        encoded, value = self._encode_for_write(key), checked_value(value)
        self._prepare_batch([(encoded, value)])
        self.packs.write(encoded, value)

    def delete(self, key: Key) -> None:
        """Remove ``key`` (nothing happens if it is absent)."""
        encoded = self._encode(key, writing=False)
        if encoded is not None:
            self._settled().write(encoded, None)

    def put_many(self, items: Iterable[tuple[Key, bytes]] | Mapping[Key, bytes]) -> None:
        """Bulk load: sort, cut into packs, write (later duplicates win)."""
        pairs = items.items() if isinstance(items, Mapping) else items
        encoded = {self._encode_for_write(k): checked_value(v) for k, v in pairs}
        if encoded:
            self._prepare_batch(sorted(encoded.items()))
            self.packs.write_many(encoded)
            if len(encoded) >= AUTO_COMPACT_ROWS:
                self._auto_compact()

    def _prepare_batch(self, entries: Sequence[tuple[bytes, bytes]]) -> None:
        """Before cutting packs from a batch: the dictionary, then the pack size.

        Every write path calls this first: splits and merges are deterministic
        only once every client uses the recorded pack size. With
        ``compression="zstd-dict"`` the batch trains the table's first
        dictionary, or a new version when it compresses markedly worse than the
        current one did (:mod:`veil.kv.dictionary`). Both see the batch in pack
        order -- by hash partition, then packID position -- since that is which
        rows share a pack. A new table on several partitions gets key buckets
        with its pack size (:func:`~veil.kv.layout.bucket_bits_for`), so its
        packs will hold consecutive keys and its first batch is taken in key
        order; tables without buckets put keys ~N apart into a pack, where a
        choice made on consecutive keys had overstated their compression.
        Writes that skip this (deletes, APPEND writes into merged packs) call
        :meth:`_settled` instead.
        """
        envelope = self.packs.envelope
        by_key = entries  # the whole-dataset reference stays the batch in key order
        # A new table's first batch on several partitions will get key buckets:
        # its packs will hold consecutive keys, so the choice sees key order.
        buckets = self.layout.ordered and self.layout.partitions > 1
        first = buckets and self.config.pack_rows is None
        if not first and (self.layout.partitions > 1 or not self.layout.ordered):
            entries = sorted(entries, key=lambda kv: self.layout.locate(kv[0]))
        if envelope.wants_dictionary and len(entries) >= MIN_DICTIONARY_ROWS:
            envelope.dictionary = refresh(self._dictionaries, entries)
        dictionary = envelope.dictionary

        def choose() -> tuple[int, int | None, dict[str, object], int | None]:
            if envelope.blocked:
                blocks = dictionary.block_compressor() if dictionary else block_compressor()
                choice = choose_blocked(
                    entries, blocks.compress, block_rows=self.config.block_rows, reference=by_key
                )
            else:
                compress = dictionary.compressor().compress if dictionary else None
                choice = choose_pack_rows(
                    entries, envelope.codec_name, compress=compress, reference=by_key
                )
            bits = bucket_bits_for(choice.pack_rows, [k for k, _ in by_key]) if buckets else None
            return choice.pack_rows, choice.block_rows, choice.record(), bits

        if self.config.pack_rows is None:
            self._adopt(catalog.record_pack_rows(self.backend, self._base, choose))
        else:
            self._adopt(self.config)

    def _adopt(self, config: catalog.TableConfig) -> None:
        """Take ``config`` (possibly another client's choices) and cut packs by it."""
        self.config = config
        pack_rows = config.pack_rows or DEFAULT_PACK_ROWS
        self.packs.pack_rows, self.packs.max_keys = pack_rows, catalog.max_keys(pack_rows)
        self.packs.block_rows = config.block_rows or pack_rows
        if config.bucket_bits != self.layout.bucket_bits:
            layout = Layout(config.partitions, self._part_key, self._prf_key, config.bucket_bits)
            self.layout = self.packs.layout = layout

    def range(self, low: Key, high: Key) -> Iterator[tuple[Key, bytes]]:
        """Pairs with ``low <= key <= high``, ascending, across pack borders."""
        if not self.layout.ordered:
            raise ParameterError(
                "range queries need ordered packIDs; this table uses pseudorandom "
                "packIDs (prf_pack_ids=True), which hide key order from the server"
            )
        low_e, high_e = self._encode(low, writing=False), self._encode(high, writing=False)
        if low_e is None or high_e is None or low_e > high_e:
            return iter(())
        if self.config.pack_rows is None:
            self._refresh_layout()
        return self._pairs(low_e, high_e)

    def _pairs(self, low: bytes, high: bytes) -> Iterator[tuple[Key, bytes]]:
        if encoded_kind(low) == "int":
            # Integer keys come out of the packs decoded (no bytes object per
            # key, no decoding pass in Python).
            return itertools.chain.from_iterable(
                zip(keys, values, strict=True)
                for keys, values in self.packs.range_batches(low, high, int_keys=True)
            )
        return self._decoded(self._range_batches(low, high))

    def _range_batches(self, low: bytes, high: bytes) -> Iterator[Batch]:
        return self.packs.range_batches(low, high)

    def _decoded(self, batches: Iterator[Batch]) -> Iterator[tuple[Key, bytes]]:
        # Pairs come out of C-level zips chained together, not out of a
        # generator resumed once per pair (~7% of a 1,000-key range's CPU).
        return itertools.chain.from_iterable(
            zip(decode_keys(keys), values, strict=True)
            for keys, values in _regrouped(batches, DECODE_KEYS)
        )

    def dictionary_bytes(self) -> int:
        """Bytes the server stores for this table's compression dictionaries (all versions)."""
        return self._dictionaries.stored_bytes()

    def compact(self) -> None:
        """Ask the server to store this database densely (SQLite: ``VACUUM``).

        Worth running after a large bulk load or many updates: B-tree pages
        that splits and rewrites left part-empty are rewritten full. A no-op on
        backends that compact by themselves (Cassandra).
        """
        compact = getattr(self.backend, "compact", None)
        if compact is not None:
            compact()

    def _auto_compact(self) -> None:
        """Compact when the backend finds its file sparse (at most once a minute).

        Bulk loads into existing packs split them, and merges and epoch
        deletions free pages; a backend that compacts by itself (Cassandra)
        has no ``compact_if_sparse``. ``auto_compact=False`` turns this off.
        """
        check = getattr(self.backend, "compact_if_sparse", None)
        now = time.monotonic()
        if (
            check is None
            or not self.auto_compact
            or now - self._compact_checked < AUTO_COMPACT_SECONDS
        ):
            return
        self._compact_checked = now
        check()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.packs.close()
            if self._owns_backend:
                self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(table={self.table!r}, mode={self.config.mode!r})"

    # -- keys -------------------------------------------------------------
    def _encode(self, key: Key, *, writing: bool) -> bytes | None:
        """Encode ``key``; None when the table holds no key yet (reads)."""
        kind = key_kind(key)
        if self.config.key_kind != kind:
            if self.config.key_kind is None:
                self._refresh_key_kind()
            if self.config.key_kind is None:
                if not writing:
                    return None
                self._adopt(catalog.record_key_kind(self.backend, self._base, self.config, kind))
            if self.config.key_kind != kind:
                raise ParameterError(
                    f"key-value table {self.table!r} holds {self.config.key_kind} keys; "
                    f"got a {kind} key (one table holds one key type)"
                )
        return encode_key(key, kind)

    def _encode_for_write(self, key: Key) -> bytes:
        encoded = self._encode(key, writing=True)
        assert encoded is not None
        return encoded

    def _refresh_key_kind(self) -> None:
        wanted = self.config
        self._adopt(catalog.load_config(self.backend, self._base, wanted, self.table))


def checked_value(value: object) -> bytes:
    """``value`` as bytes; a value of any other type is refused."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ParameterError(f"a value must be bytes, got {type(value).__name__}")
    return bytes(value)


def _regrouped(batches: Iterable[Batch], size: int) -> Iterator[Batch]:
    """The same (keys, values) in batches of at least ``size`` (the last may be smaller).

    Keys are decoded a few packs at a time: one numpy pass costs about as
    much for 20 keys as for 500, and small packs make many batches.
    """
    keys: list[bytes] = []
    values: list[bytes] = []
    for batch_keys, batch_values in batches:
        keys += batch_keys
        values += batch_values
        if len(keys) >= size:
            yield keys, values
            keys, values = [], []
    if keys:
        yield keys, values
