"""SQLite on-disk layout (issue 14): file bytes close to the packs' bytes."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import veil.kv
from veil.crypto.keys import MasterKey
from veil.kv.backends.sqlite import PAGE_SIZE, SQLiteBackend

MASTER = MasterKey.generate()


def _pragma(path: Path, name: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


def test_new_files_use_small_pages_rowid_tables_and_auto_vacuum(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "kv.db")
    backend.ensure_table("t")
    backend.close()
    assert _pragma(tmp_path / "kv.db", "page_size") == PAGE_SIZE
    assert _pragma(tmp_path / "kv.db", "auto_vacuum") == 2  # incremental


def test_file_stays_within_ten_percent_of_pack_bytes(tmp_path: Path) -> None:
    # ~4,000 packs of ~2 KB of incompressible bytes: the size where 4 KiB pages
    # of WITHOUT ROWID tables wasted half the file (a spilled overflow page per pack).
    records = [os.urandom(200) for _ in range(40_000)]  # 8 MB: the few fixed pages are <5%
    with veil.kv.open(f"sqlite:///{tmp_path}/kv.db", MASTER, pack_rows=10) as store:
        store.put_many(enumerate(records))
        store.compact()
        payload = store.backend.stored_bytes(store.packs.table)
        disk = store.backend.disk_bytes()  # type: ignore[attr-defined]
    assert disk <= 1.10 * payload, (disk, payload)


def test_a_small_table_stays_within_ten_percent_of_its_pack_bytes(tmp_path: Path) -> None:
    # 0.3 MB of packs: with the first round's 64 KiB pages the table's root, its
    # index and the last leaf's slack alone were 40% of that.
    records = [os.urandom(200) for _ in range(1_500)]
    with veil.kv.open(f"sqlite:///{tmp_path}/kv.db", MASTER, pack_rows=50) as store:
        store.put_many(enumerate(records))
        store.compact()
        payload = store.backend.stored_bytes(store.packs.table)
        disk = store.backend.table_disk_bytes(store.packs.table)  # type: ignore[attr-defined]
    assert disk <= 1.10 * payload, (disk, payload)


def test_deleted_epochs_give_their_pages_back(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "kv.db")
    backend.ensure_table("e")
    for i in range(400):
        backend.upsert("e", 7, i.to_bytes(4, "big"), os.urandom(3000), b"t")
    grown = backend.disk_bytes()
    backend.delete_partition("e", 7)
    assert backend.disk_bytes() < grown / 4
    assert _pragma(tmp_path / "kv.db", "freelist_count") == 0
    backend.close()


def test_big_changes_move_the_row_and_keep_the_tag_check(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "kv.db")
    backend.ensure_table("p")
    for i in range(50):
        backend.insert_if_not_exists("p", 0, bytes([i]), b"x" * 2000, b"t%d" % i)
    big = b"y" * (PAGE_SIZE * 3)
    assert not backend.update_if("p", 0, bytes([10]), big, b"new", b"wrong tag")
    assert backend.update_if("p", 0, bytes([10]), big, b"new", b"t10")
    assert backend.update_if("p", 0, bytes([10]), b"small", b"newer", b"new")
    assert backend.get("p", 0, bytes([10])) == (bytes([10]), b"small", b"newer")
    assert [r.key for r in backend.scan("p", 0)] == [bytes([i]) for i in range(50)]
    backend.close()


def test_tables_of_the_old_layout_still_work(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # as Veil created tables before issue 14
        conn.execute(
            "CREATE TABLE p (part INTEGER NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, "
            "tag BLOB NOT NULL, PRIMARY KEY (part, key)) WITHOUT ROWID"
        )
        conn.execute("INSERT INTO p VALUES (0, x'05', x'aa', x'01')")
    backend = SQLiteBackend(path)
    backend.ensure_table("p")
    assert backend.floor("p", 0, b"\x09") == (b"\x05", b"\xaa", b"\x01")
    assert backend.update_if("p", 0, b"\x05", b"z" * PAGE_SIZE, b"\x02", b"\x01")
    assert backend.insert_if_not_exists("p", 0, b"\x07", b"v", b"\x03")
    assert not backend.insert_if_not_exists("p", 0, b"\x07", b"w", b"\x04")
    assert [r.key for r in backend.scan("p", 0)] == [b"\x05", b"\x07"]
    backend.close()


def test_compact_if_sparse_vacuums_only_a_sparse_file(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "kv.db")
    backend.ensure_table("t")
    rows = (7 << 20) // (PAGE_SIZE // 4)  # 7 MB of rows, about four to a leaf
    for key in range(rows):
        backend.upsert("t", 0, key.to_bytes(4, "big"), os.urandom(PAGE_SIZE // 4 - 40), b"tag")
    assert not backend.compact_if_sparse()  # dense: nothing to do
    for key in range(0, rows, 2):  # half of every leaf emptied
        backend.delete("t", 0, key.to_bytes(4, "big"))
    before = backend.disk_bytes()
    assert backend.compact_if_sparse()
    assert backend.disk_bytes() < 0.7 * before
    assert not backend.compact_if_sparse()
    assert len(list(backend.scan("t", 0))) == rows // 2
    backend.close()


def test_bulk_loads_check_for_waste_unless_turned_off(tmp_path: Path, monkeypatch) -> None:
    import veil.kv.store

    monkeypatch.setattr(veil.kv.store, "AUTO_COMPACT_ROWS", 10)
    calls: list[str] = []
    monkeypatch.setattr(SQLiteBackend, "compact_if_sparse", lambda self: calls.append("x"))
    for auto, expected in ((True, ["x"]), (False, [])):
        calls.clear()
        url = f"sqlite:///{tmp_path}/{auto}.db"
        with veil.kv.open(url, MASTER, pack_rows=10, auto_compact=auto) as store:
            store.put_many({k: b"v" for k in range(20)})
            store.put_many({k: b"w" for k in range(20)})  # within the minute: not again
        assert calls == expected


def test_a_dense_file_gets_its_wal_checkpointed(tmp_path: Path) -> None:
    # Only the database file is memory-mapped: pages left in the WAL after a
    # bulk load are read with a system call each.
    backend = SQLiteBackend(tmp_path / "kv.db")
    backend.ensure_table("t")
    for key in range(200):
        backend.upsert("t", 0, key.to_bytes(4, "big"), os.urandom(5_000), b"tag")
    assert (tmp_path / "kv.db").stat().st_size < 500_000  # the rows are in the WAL
    assert not backend.compact_if_sparse()
    assert (tmp_path / "kv.db").stat().st_size > 1_000_000
    backend.close()
