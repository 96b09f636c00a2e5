"""Pack size chosen from the data (issue 14): the curve, the cap, the catalogue."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from conftest import StoreFactory
from veil.errors import ParameterError
from veil.kv import catalog
from veil.kv.keys import encode_key
from veil.kv.packsize import CANDIDATE_ROWS, choose_pack_rows


def _records(count: int, size: int = 120, seed: int = 3) -> list[bytes]:
    """Log-like records: repetitive structure, some variety (compress ~3-6x)."""
    rng = random.Random(seed)
    words = ["install", "status", "half-configured", "unpacked", "libc6", "amd64", "ok"]
    out = []
    for i in range(count):
        text = f"2026-11-{i % 28 + 1:02d} {i:08d} " + " ".join(rng.choice(words) for _ in range(30))
        out.append(text.encode()[:size])
    return out


def _entries(records: list[bytes]) -> list[tuple[bytes, bytes]]:
    return [(encode_key(i), r) for i, r in enumerate(records)]


def test_choice_is_deterministic_for_a_given_sample() -> None:
    entries = _entries(_records(20_000))
    first = choose_pack_rows(entries, "zlib")
    assert choose_pack_rows(list(entries), "zlib") == first
    assert first.pack_rows in CANDIDATE_ROWS
    assert first.sample_rows == 8000  # four evenly spaced runs of 2,000 rows


def test_smallest_pack_reaching_the_target() -> None:
    entries = _entries(_records(3000))
    choice = choose_pack_rows(entries, "zlib", target=0.5)
    assert choice.reached_target and choice.ratio >= 0.5 * choice.whole_ratio
    smaller = [n for n in CANDIDATE_ROWS if n < choice.pack_rows]
    if smaller:  # the next smaller candidate falls short
        below = choose_pack_rows(entries, "zlib", target=0.5, max_pack_bytes=smaller[-1] * 140)
        assert below.pack_rows == smaller[-1] and not below.reached_target
    assert choose_pack_rows(entries, "zlib", target=0.8).pack_rows >= choice.pack_rows


def test_read_cap_bounds_the_pack() -> None:
    # Near-copies of one random block: only a pack of many rows would approach
    # the whole blob's ratio, and the cap allows at most 16 rows of 4 KB.
    block = os.urandom(4000)
    entries = [(encode_key(i), i.to_bytes(4, "big") + block) for i in range(500)]
    choice = choose_pack_rows(entries, "zstd", max_pack_bytes=64 * 1024)
    assert choice.pack_rows == max(n for n in CANDIDATE_ROWS if n * 4013 <= 64 * 1024)
    assert not choice.reached_target


def test_too_small_a_sample_takes_the_default() -> None:
    choice = choose_pack_rows(_entries(_records(3)), "zlib", default=50)
    assert choice.pack_rows == 50 and choice.sample_rows == 3


def test_first_batch_chooses_and_the_catalogue_records_it(open_store: StoreFactory) -> None:
    records = _records(3000)
    store = open_store(compression="zlib")
    assert store.config.pack_rows is None
    store.put_many(enumerate(records))
    # Chosen on the batch in pack order: by hash partition, then key.
    in_packs = sorted(_entries(records), key=lambda kv: store.layout.locate(kv[0]))
    reference = sorted(_entries(records))  # the whole ratio: the batch in key order
    expected = choose_pack_rows(in_packs, "zlib", reference=reference).pack_rows
    assert store.config.pack_rows == expected == store.packs.pack_rows
    assert store.config.pack_choice is not None
    assert store.config.pack_choice["pack_rows"] == expected
    other = open_store()  # a second client adopts the recorded size
    assert other.config.pack_rows == expected
    assert [store.get(i) for i in (0, 1499, 2999)] == [records[0], records[1499], records[2999]]
    with pytest.raises(ParameterError, match="pack_rows"):
        open_store(pack_rows=expected + 1)


def test_a_client_opened_before_the_choice_adopts_it(open_store: StoreFactory) -> None:
    early, chooser = open_store(), open_store()
    chooser.put_many(enumerate(_records(2000)))
    early.put_many({5000 + i: b"late %d" % i for i in range(100)})  # its own batch differs
    assert early.config.pack_rows == chooser.config.pack_rows == early.packs.pack_rows
    assert early.get(5050) == b"late 50"


def test_explicit_pack_rows_fixes_an_undecided_table(open_store: StoreFactory) -> None:
    open_store()
    fixed = open_store(pack_rows=20)
    assert fixed.config.pack_rows == 20 and fixed.config.pack_choice is None
    fixed.put_many(enumerate(_records(500)))
    assert fixed.config.pack_rows == 20


def test_single_put_on_a_new_table_takes_the_default(open_store: StoreFactory) -> None:
    store = open_store()
    store.put(1, b"one")
    assert store.config.pack_rows == 50


def test_append_merge_chooses_from_the_epoch(open_store: StoreFactory) -> None:
    clock = [1000.0]
    store = open_store("append", epoch_seconds=1.0, clock=lambda: clock[0])
    records = _records(600)
    for i, record in enumerate(records):
        store.put(i, record)
    assert store.config.pack_rows is None  # single APPEND puts cut no pack
    clock[0] += 10
    store.settle()
    assert store.config.pack_rows is not None
    assert store.get(599) == records[599]
    assert list(store.range(0, 599)) == list(enumerate(records))


def test_catalogue_entry_is_json_with_the_choice(tmp_path: Path, key_file: Path) -> None:
    import veil.kv

    url = f"sqlite:///{tmp_path}/c.db"
    with veil.kv.open(url, key_file, table="t") as store:
        store.put_many(enumerate(_records(400)))
        row = store.backend.get(catalog.CATALOG_TABLE, 0, f"table/{store._base}".encode())
    assert row is not None
    stored = json.loads(row.value)
    assert stored["pack_rows"] == stored["pack_choice"]["pack_rows"]
    assert stored["pack_choice"]["codec"] == stored["compression"] == "zstd-dict"


def test_the_default_codec_is_the_tables_own(tmp_path: Path, key_file: Path) -> None:
    """New tables get zstd-dict; a table keeps what it was made with; older tables
    (no recorded codec) are zlib; an explicit codec wins and is read back by all."""
    import veil.kv

    url = f"sqlite:///{tmp_path}/c.db"
    with veil.kv.open(url, key_file, table="new") as store:
        assert store.packs.envelope.codec_name == "zstd-dict"
    with veil.kv.open(url, key_file, table="made-zlib", compression="zlib") as store:
        store.put_many(enumerate(_records(400)))
    with veil.kv.open(url, key_file, table="made-zlib") as store:
        assert store.packs.envelope.codec_name == "zlib"
        store.put(7, b"rewritten")
    with veil.kv.open(url, key_file, table="made-zlib", compression="lz4") as store:
        store.put(8, b"by an lz4 client")
        assert store.get(7) == b"rewritten" and store.get(9) == _records(400)[9]
    with veil.kv.open(url, key_file, table="old") as store:  # as a Veil before the record
        key = f"table/{store._base}".encode()
        row = store.backend.get(catalog.CATALOG_TABLE, 0, key)
        assert row is not None
        entry = json.loads(row.value)
        del entry["compression"]
        store.backend.upsert(catalog.CATALOG_TABLE, 0, key, json.dumps(entry).encode(), b"t")
    with veil.kv.open(url, key_file, table="old") as store:
        assert store.packs.envelope.codec_name == "zlib"


def test_the_curve_is_charged_the_servers_page_slack(monkeypatch: pytest.MonkeyPatch) -> None:
    # The target is a share of the whole ratio *on disk*: every curve point
    # pays SERVER_SLACK on top of the packs' own bytes, packed or blocked.
    import veil.kv.packsize as packsize

    runs, slack = [_entries(_records(600))], packsize.SERVER_SLACK
    compress = packsize.codec_compress("zstd")
    charged = packsize.stored_ratio(runs, compress, 50), packsize.blocked_point(runs, compress, 8)
    monkeypatch.setattr(packsize, "SERVER_SLACK", 1.0)
    bare = packsize.stored_ratio(runs, compress, 50), packsize.blocked_point(runs, compress, 8)
    assert charged[0] == pytest.approx(bare[0] / slack)
    assert charged[1][0] == pytest.approx(bare[1][0] / slack)
    assert charged[1][1] == bare[1][1]  # the rows per pack do not change
