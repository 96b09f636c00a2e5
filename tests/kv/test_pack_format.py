"""The stored pack: layout, codecs, padding, authentication, keys."""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import StoreFactory
from veil.errors import AuthenticationError, MalformedCiphertextError, WrongKeyError
from veil.kv import codec
from veil.kv.envelope import Envelope
from veil.kv.keys import ROOT_PACK_ID, decode_key, decode_keys, encode_key
from veil.kv.pack import (
    lookup,
    parse_entries,
    serialize_entries,
    serialize_entries_v1,
    serialize_entries_v2,
)

KEY = bytes(range(32))


@given(st.lists(st.tuples(st.binary(max_size=20), st.binary(max_size=50)), max_size=30))
def test_entries_round_trip(entries: list[tuple[bytes, bytes]]) -> None:
    for serialize in (serialize_entries, serialize_entries_v1, serialize_entries_v2):
        keys, values = parse_entries(serialize(entries))
        assert list(zip(keys, values, strict=True)) == entries


@pytest.mark.parametrize("old_format", [serialize_entries_v1, serialize_entries_v2])
def test_packs_of_older_formats_stay_readable_and_writable(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, old_format: Any
) -> None:
    import veil.kv.packs

    with monkeypatch.context() as patch:  # a store as an older Veil wrote it
        patch.setattr(veil.kv.packs, "serialize_entries", old_format)
        old = open_store(pack_rows=10, pack_cache=0)
        old.put_many({i: b"old %d" % i for i in range(100)})
    store = open_store(pack_rows=10, pack_cache=0)
    assert store.get(42) == b"old 42"
    store.put(42, b"new")  # rewrites that pack in format 3
    store.put_many({i: b"more %d" % i for i in range(100, 150)})
    assert [v for _, v in store.range(40, 44)] == [
        b"old 40",
        b"old 41",
        b"new",
        b"old 43",
        b"old 44",
    ]
    assert store.get(149) == b"more 149"


def test_format_two_costs_short_records_little() -> None:
    # 750 consecutive integer keys and 68-byte lines: the keys and lengths of
    # format 1 took a third of the compressed pack.
    entries = [
        (
            encode_key(i),
            b"2026-11-24 13:%02d status installed libfoo%d:amd64 1.%d" % (i % 60, i % 97, i),
        )
        for i in range(750)
    ]
    v1 = len(zlib.compress(serialize_entries_v1(entries)))
    v2 = len(zlib.compress(serialize_entries_v2(entries)))
    values_only = len(zlib.compress(b"".join(v for _, v in entries)))
    assert v2 < v1 and v2 - values_only < (v1 - values_only) / 2


def test_format_three_ends_values_with_a_byte_none_of_them_holds() -> None:
    lines = [(encode_key(i), b"2026-11-24 13:%02d status installed %d" % (i, i)) for i in range(50)]
    plaintext = serialize_entries(lines)
    assert plaintext[0] == 3 and plaintext[2:3] == b"\n"
    assert plaintext.count(b"\n") == 1 + 50 and plaintext.endswith(b"\n")  # header + values
    # Fewer compressed bytes than format 2's list of lengths.
    assert len(zlib.compress(plaintext)) < len(zlib.compress(serialize_entries_v2(lines)))
    with_newlines = [(b"a", b"x\ny"), (b"b", b"")]
    assert serialize_entries(with_newlines)[2] == 0
    every_byte = [(b"a", bytes(range(256))), (b"b", b"v")]
    assert serialize_entries(every_byte)[0] == 2  # no terminator left
    for entries in (lines, with_newlines, every_byte, []):
        keys, values = parse_entries(serialize_entries(entries))
        assert list(zip(keys, values, strict=True)) == entries


def test_malformed_format_three_is_refused() -> None:
    good = serialize_entries([(b"k", b"v"), (b"l", b"w")])
    for bad in (good[:-1], good + b"x", good[:2]):
        with pytest.raises(MalformedCiphertextError):
            parse_entries(bad)


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=2, max_size=20))
def test_int_encoding_preserves_order(keys: list[int]) -> None:
    encoded = [encode_key(k) for k in keys]
    assert sorted(encoded) == [encode_key(k) for k in sorted(keys)]
    assert [decode_key(e) for e in encoded] == keys
    assert decode_keys(encoded) == keys
    assert min(encoded) > ROOT_PACK_ID


def test_malformed_pack_plaintext_is_refused() -> None:
    good = serialize_entries([(b"k", b"v")])
    with pytest.raises(MalformedCiphertextError, match="version"):
        parse_entries(b"\x09" + good[1:])
    with pytest.raises(MalformedCiphertextError):
        parse_entries(good[:-1])


@pytest.mark.parametrize("name", ["zlib", "zstd", "lz4"])
def test_envelope_round_trip_and_binding(name: str) -> None:
    envelope = Envelope(KEY, "table", name, ())
    stored = envelope.seal(b"pack", b"id-1", b"plaintext " * 20)
    assert stored[0] == 0x01 and stored[1] == codec.CODEC_IDS[name]
    assert envelope.open(b"pack", b"id-1", stored) == b"plaintext " * 20
    with pytest.raises(AuthenticationError, match="tampered"):
        envelope.open(b"pack", b"id-2", stored)  # moved to another packID
    with pytest.raises(AuthenticationError):
        Envelope(KEY, "other", name, ()).open(b"pack", b"id-1", stored)  # other table
    flipped = bytearray(stored)
    flipped[-20] ^= 1
    with pytest.raises(AuthenticationError):
        envelope.open(b"pack", b"id-1", bytes(flipped))
    with pytest.raises(MalformedCiphertextError, match="version"):
        envelope.open(b"pack", b"id-1", b"\x07" + stored[1:])


def test_padding_hides_the_compressed_size() -> None:
    tiers = codec.pad_tiers([512, 4096])
    envelope = Envelope(KEY, "t", "zlib", tiers)
    small = envelope.seal(b"pack", b"a", b"x" * 10)
    varied = envelope.seal(b"pack", b"a", bytes(range(256)))
    assert len(small) == len(varied) == 2 + 12 + 512 + 16
    big = envelope.seal(b"pack", b"a", os.urandom(10_000))  # past the largest tier
    assert (len(big) - 30) % 4096 == 0
    assert envelope.open(b"pack", b"a", varied) == bytes(range(256))
    assert len(codec.pad_tiers("pow2")) > 10


def test_tampered_pack_in_store_raises(open_store: StoreFactory) -> None:
    store = open_store()
    store.put(1, b"secret")
    backend, table = store.backend, store.packs.table
    row = next(iter(backend.scan(table, 0)))
    tampered = row.value[:-1] + bytes([row.value[-1] ^ 0x80])
    assert backend.update_if(table, 0, row.key, tampered, row.tag, row.tag)
    with pytest.raises(AuthenticationError):
        store.get(1)


def test_swapped_packs_raise(open_store: StoreFactory) -> None:
    store = open_store(pack_rows=1)
    for key in range(6):
        store.put(key, b"v%d" % key)
    backend, table = store.backend, store.packs.table
    rows = list(backend.scan(table, 0))
    assert len(rows) >= 3
    a, b = rows[1], rows[2]
    backend.upsert(table, 0, a.key, b.value, b.tag)
    with pytest.raises(AuthenticationError):
        list(store.range(0, 5))


def test_wrong_key_file_is_refused(open_store: StoreFactory, other_key_file: Path) -> None:
    open_store().put(1, b"x")
    with pytest.raises(WrongKeyError, match="different key file"):
        open_store(key_file=other_key_file)


def test_server_sees_no_plaintext(open_store: StoreFactory) -> None:
    store = open_store(table="customers")
    store.put(b"alice", b"card 4111-1111-1111-1111")
    names = [store.packs.table]
    stored = b"".join(r.value for r in store.backend.scan(store.packs.table, 0))
    assert b"4111" not in stored and b"card" not in stored
    assert all("customers" not in n for n in names)


def test_prf_pack_ids_hide_keys(open_store: StoreFactory) -> None:
    store = open_store(prf_pack_ids=True, pack_rows=2)
    for key in range(30):
        store.put(key, b"v%d" % key)
    store.delete(3)
    assert [store.get(k) for k in (0, 3, 29, 99)] == [b"v0", None, b"v29", None]
    ids = [r.key for r in store.backend.scan(store.packs.table, 0)]
    assert len(ids) > 5
    assert all(i == ROOT_PACK_ID or (i[:1] == b"\x03" and len(i) == 17) for i in ids)
    with pytest.raises(Exception, match="pseudorandom"):
        store.range(0, 10)


@pytest.mark.parametrize("name", ["zlib", "zstd", "lz4"])
@given(entries=st.dictionaries(st.binary(max_size=12), st.binary(max_size=3000), max_size=40))
def test_point_lookup_matches_full_parse(name: str, entries: dict[bytes, bytes]) -> None:
    ordered = sorted(entries.items())
    compressed = codec.compress(codec.codec_id(name), serialize_entries(ordered))
    for key in [*entries, b"absent", b""]:
        inflater = codec.Inflater(codec.codec_id(name), compressed)
        assert lookup(inflater, key) == entries.get(key)


def test_pack_cache_never_serves_a_tampered_pack(open_store: StoreFactory) -> None:
    store = open_store(pack_cache=16)
    store.put(1, b"secret")
    assert store.get(1) == b"secret"  # the pack is now cached
    assert store.get(1) == b"secret"
    backend, table = store.backend, store.packs.table
    row = next(iter(backend.scan(table, 0)))
    tampered = row.value[:-1] + bytes([row.value[-1] ^ 0x01])
    backend.update_if(table, 0, row.key, tampered, row.tag, row.tag)  # same tag column
    with pytest.raises(AuthenticationError):
        store.get(1)


def test_uncached_store_reads_the_same(open_store: StoreFactory) -> None:
    writer = open_store(pack_rows=4)
    writer.put_many({k: b"%d" % k for k in range(50)})
    reader = open_store(pack_cache=0)
    assert [reader.get(k) for k in (0, 17, 49, 50)] == [b"0", b"17", b"49", None]
    assert dict(reader.range(10, 12)) == {10: b"10", 11: b"11", 12: b"12"}
