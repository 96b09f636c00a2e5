"""Canaries: distinctive plaintext values and field names never reach the server, neither in
what it was sent (recorded by a proxy) nor in its SQLite files."""

from __future__ import annotations

import datetime as dt
import struct
from pathlib import Path

import pytest
from documents_wire import RecordingProxy

import veil.documents
from veil_dev.servers.ferretdb import FerretDBServer

INT_CANARY = 0x1D2C3B4A59687756
STRING_CANARY = "Quokka-Zanzibar-91"
STATIC_CANARY = "Platypus-Kilimanjaro-37"
CHAIN_CANARY = 0x9A8B7C6D5E  # a chained h_add's domain is narrow: 40 bits here
NAME_CANARIES = (
    "wombatfield",
    "echidnanested",
    "numbatsum",
    "bilbyindex",
    "quollore",
    "potoroopail",
    "dingochain",
)
SCHEMA = {
    "fields": {
        "wombatfield": "static",
        "echidnanested.bilbyindex": "index",
        "numbatsum": "h_add",
        "title": {"attr": "index", "type": "string"},
        "when": {"attr": "index", "type": "datetime"},
        "public": "do_nothing",
        "quollore": {"attr": "index", "scheme": "ore"},
        "potoroopail": {"attr": "h_add", "scheme": "paillier"},
        "dingochain": {"attr": "h_add", "chain": "public", "domain": [0, 2**40]},
    },
    "default": "static",
}


@pytest.fixture
def recorded(tmp_path: Path, key_file: Path):
    server = FerretDBServer(tmp_path / "server").start()
    proxy = RecordingProxy(server.port)
    try:
        yield server, proxy
    finally:
        proxy.close()
        server.stop()


def exercise(url: str, key_file: Path) -> None:
    with veil.documents.connect(url + "zoo", key_file, {"animals": SCHEMA}) as database:
        animals = database.animals
        animals.insert_many(
            [
                {
                    "wombatfield": {"note": STATIC_CANARY, "n": INT_CANARY},
                    "echidnanested": {"bilbyindex": INT_CANARY + i},
                    "numbatsum": INT_CANARY // 1000 + i,
                    "title": STRING_CANARY + str(i),
                    "when": dt.datetime(2001, 2, 3),
                    "public": "visible",
                    "quollore": INT_CANARY - i,
                    "potoroopail": INT_CANARY,
                    "dingochain": CHAIN_CANARY - i,
                    "extra_wallaby": STATIC_CANARY,
                }
                for i in range(5)
            ]
        )
        animals.create_index("echidnanested.bilbyindex")
        assert animals.count_documents({"quollore": {"$gt": INT_CANARY - 3}}) == 3
        assert animals.count_documents({"title": STRING_CANARY + "1"}) == 1
        assert animals.count_documents({"echidnanested.bilbyindex": {"$gte": INT_CANARY}}) == 5
        animals.update_many({}, {"$inc": {"numbatsum": INT_CANARY // 1000}})
        animals.update_one({"title": STRING_CANARY + "2"}, {"$set": {"wombatfield": STATIC_CANARY}})
        animals.update_one({}, {"$inc": {"echidnanested.bilbyindex": 1}})
        rows = animals.aggregate(
            [
                {"$match": {"title": {"$gt": STRING_CANARY}}},
                {"$group": {"_id": "$public", "s": {"$sum": "$numbatsum"}}},
            ]
        )
        assert rows[0]["s"] == sum(2 * (INT_CANARY // 1000) + i for i in range(5))
        chained = animals.aggregate([{"$group": {"_id": "$public", "s": {"$sum": "$dingochain"}}}])
        assert chained == [{"_id": "visible", "s": sum(CHAIN_CANARY - i for i in range(5))}]
        animals.update_one({}, {"$inc": {"dingochain": 1}})
        pinned = animals.find_one({"title": STRING_CANARY + "0"})["_id"]
        animals.update_one({"_id": pinned}, {"$inc": {"potoroopail": INT_CANARY}})  # one push
        assert animals.find_one({"_id": pinned})["potoroopail"] == 2 * INT_CANARY
        assert animals.find_one({"dingochain": {"$exists": True}})["dingochain"] >= CHAIN_CANARY - 4
        assert (
            animals.find_one({"title": STRING_CANARY + "3"})["wombatfield"]["note"] == STATIC_CANARY
        )


def forbidden() -> list[bytes]:
    """Byte strings that would betray a plaintext: texts, names, and BSON's int64 encoding."""
    texts = [STATIC_CANARY, STRING_CANARY, "extra_wallaby", *NAME_CANARIES]
    out = [t.encode() for t in texts]
    for value in (INT_CANARY, INT_CANARY // 1000, CHAIN_CANARY, 5 * CHAIN_CANARY - 10):
        out += [struct.pack("<q", value), str(value).encode()]
    out += [STATIC_CANARY[:6].encode(), b"Kilimanjaro", b"Zanzibar"]
    return out


def test_nothing_plaintext_on_the_wire_or_disk(recorded, key_file):
    server, proxy = recorded
    exercise(proxy.url, key_file)
    wire = bytes(proxy.sent) + bytes(proxy.received)
    assert b"visible" in wire  # do_nothing goes in the clear, so the recording works
    disk = b"".join(path.read_bytes() for path in server.sqlite_files())
    assert b"visible" in disk
    for canary in forbidden():
        assert canary not in wire, canary
        assert canary not in disk, canary


def test_ope_string_prefix_leak_is_bounded(recorded, key_file):
    """BCLO OPE shows roughly the first half of a string's 8-byte order key (docs/security.md);
    nothing from the 9th byte on ever reaches the server."""
    _server, proxy = recorded
    exercise(proxy.url, key_file)
    wire = bytes(proxy.sent) + bytes(proxy.received)
    assert STRING_CANARY[8:].encode() not in wire
