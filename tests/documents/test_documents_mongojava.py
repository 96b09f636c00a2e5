"""mongo-java-server, the second MongoDB-wire server: what Veil needs of it, and its commands."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pymongo
import pytest

import veil.documents
from veil.cli import main
from veil_dev.servers.ferretdb import FerretDBServer
from veil_dev.servers.mongojava import MongoJavaServer, MongoJavaServerError


def test_reports_mongodb_4_4_for_pymongo(mongo_java):
    """pymongo 4 refuses wire versions below 9; the launcher reports 4.4 (wire 9)."""
    with pymongo.MongoClient(mongo_java.url) as client:
        assert client.admin.command("buildInfo")["version"] == "4.4.0"
        assert client.admin.command("isMaster")["maxWireVersion"] == 9  # no "hello"


def test_group_computes_every_accumulator_and_push(mongo_java_plain):
    """What FerretDB 1.24 lacks: $push, and accumulators past the first of a $group."""
    mongo_java_plain.t.insert_many([{"_id": i, "g": i % 2, "v": i} for i in range(6)])
    groups = mongo_java_plain.t.aggregate(
        [
            {"$sort": {"_id": 1}},
            {"$group": {
                "_id": "$g", "total": {"$sum": "$v"}, "count": {"$sum": 1},
                "top": {"$max": "$v"}, "values": {"$push": "$v"},
            }},
            {"$sort": {"_id": 1}},
        ]
    )  # fmt: skip
    assert list(groups) == [
        {"_id": 0, "total": 6, "count": 3, "top": 4, "values": [0, 2, 4]},
        {"_id": 1, "total": 9, "count": 3, "top": 5, "values": [1, 3, 5]},
    ]


@pytest.mark.parametrize("sums", ["server", "fetch"])
def test_veil_groups_match_plain(mongo_java_url, mongo_java_plain, key_file, sums):
    """Veil's encrypted documents on this server give plain pymongo's answers."""
    documents = [{"_id": i, "g": i % 3, "v": (i * 7919) % 1000 - 500} for i in range(30)]
    mongo_java_plain.t.insert_many(documents)
    pipeline = [
        {"$group": {"_id": "$g", "s": {"$sum": "$v"}, "n": {"$sum": 1}, "top": {"$max": "$v"}}},
        {"$sort": {"_id": 1}},
    ]
    schema = {"t": {"g": "index", "v": "h_add"}}
    with veil.documents.connect(mongo_java_url, key_file, schema, sums=sums) as database:
        database.t.insert_many(documents)
        assert list(database.t.aggregate(pipeline)) == list(mongo_java_plain.t.aggregate(pipeline))


def test_data_survives_a_stop_and_start(tmp_path):
    server = MongoJavaServer(tmp_path / "server").start()
    assert MongoJavaServer.running(server.directory).pid == server.pid
    assert FerretDBServer.running(server.directory) is None  # the record names its kind
    with pymongo.MongoClient(server.url) as client:
        client.kept.t.insert_one({"_id": 1, "note": "canary-plaintext"})
    server.stop()
    server.stop()  # a second stop does nothing
    assert MongoJavaServer.running(server.directory) is None
    # the MVStore file holds plaintext as sent, so the canary tests can look for it there
    assert any(b"canary-plaintext" in path.read_bytes() for path in server.data_files())
    again = MongoJavaServer(server.directory).start()
    try:
        with pymongo.MongoClient(again.url) as client:
            assert client.kept.t.find_one({"_id": 1}) == {"_id": 1, "note": "canary-plaintext"}
    finally:
        again.stop()


def test_missing_java_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(MongoJavaServerError, match="apt-get install openjdk-17-jdk-headless maven"):
        MongoJavaServer(tmp_path).command()


def test_server_commands_with_kind(tmp_path, capsys):
    """`start --kind mongo-java-server`; `status` and `stop` find the kind in server.json."""
    directory = tmp_path / "server"
    command = [
        sys.executable, "-m", "veil.cli", "documents", "server", "start", str(directory),
        "--kind", "mongo-java-server",
    ]  # fmt: skip
    started = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    assert started.returncode == 0, started.stderr
    try:
        assert "mongo-java-server running" in started.stdout
        assert json.loads((directory / "server.json").read_text())["kind"] == "mongo-java-server"
        assert main(["documents", "server", "status", str(directory)]) == 0
        assert "mongo-java-server running" in capsys.readouterr().out
        with pymongo.MongoClient(MongoJavaServer.running(directory).url) as client:
            assert client.admin.command("ping")["ok"] == 1
    finally:
        assert main(["documents", "server", "stop", str(directory)]) == 0
    assert "mongo-java-server stopped" in capsys.readouterr().out
    assert main(["documents", "server", "status", str(directory)]) == 1
