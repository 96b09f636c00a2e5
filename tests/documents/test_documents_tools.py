"""The tooling: `veil documents server start|status|stop DIR` and a tiny `veil documents bench`."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from typing import Any

from veil.cli import main
from veil_dev.bench.documents.bench import run
from veil_dev.bench.documents.report import overheads, table


def test_server_commands(tmp_path, capsys):
    """`start` leaves the server running after the command exits; `stop` stops it."""
    directory = tmp_path / "server"
    command = [sys.executable, "-m", "veil.cli", "documents", "server", "start", str(directory)]
    started = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    assert started.returncode == 0, started.stderr
    try:
        assert "ferretdb running" in started.stdout
        assert main(["documents", "server", "status", str(directory)]) == 0
        port = json.loads((directory / "server.json").read_text())["port"]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        assert main(["documents", "server", "stop", str(directory)]) == 0
    assert main(["documents", "server", "status", str(directory)]) == 1


def test_small_bench(ferretdb):
    result = run(
        ferretdb.url, 60, 20, [1, 2], 5, 1, "test", timed_inserts=10, scan_budget=600,
        processes=[2],
    )  # fmt: skip
    assert result["range"]["veil"]["round_trips"] == 1.0
    assert set(result["sum"]) == {
        "plain", "veil_server", "veil_fetch", "veil_paillier", "veil_chain",
        "veil_chain_revealed", "load_docs_per_s", "inc", "after_inc", "filtered",
    }  # fmt: skip
    assert set(result["sum"]["filtered"]) == {"plain", "veil_server", "veil_fetch", "veil_chain"}
    assert set(result["sum"]["inc"]) == {
        "plain", "veil", "veil_paillier", "veil_chain", "veil_chain_revealed",
    }  # fmt: skip
    # still one $group after the blind increments (the chains have no holes), then one
    # parallel wave of reads: the 10 chains' ends and the field's drift counter
    assert result["sum"]["after_inc"]["veil_chain_revealed"]["round_trips"] == 12
    # one $group, then one parallel wave of reads by _id: past each of the 10 chains' ends
    # (where this client's own claims left them) and of the field's drift counter (whose
    # hint the untimed warm-up run reads too: this client has claimed no drift there)
    assert result["sum"]["veil_chain"]["round_trips"] == 12
    assert {"retries", "errors"} <= set(result["ycsb"]["uniform_2t"]["veil"])
    processes = result["ycsb"]["zipfian_2p"]  # two client processes of each system
    assert processes["veil"]["errors"] == processes["plain"]["errors"] == 0
    assert processes["veil"]["read_p50_us"] and processes["plain"]["update_p50_us"]
    result["overheads"] = overheads(result)
    assert "benchmarkdb read" in table(result)


def test_group_probe(ferretdb):
    from veil_dev.bench.documents.probe import probe

    result = probe(ferretdb.url, 130, 1, 1)
    assert result["chunk_bitmaps"]["rows"] == 26  # 10 keys in each full chunk of 62, 6 in the last
    assert {"group_ms", "find_ms"} <= set(result["flat"])
    assert {"group_ms", "ids_find_ms", "parallel_ms"} <= set(result["server_path"])
    assert result["capabilities"]["count"] == "yes"  # every MongoDB-wire server has $count
    assert "chunk_bitmaps" not in probe(ferretdb.url, 20, 1, 1, bitmaps=False)


def test_named_only_sections(ferretdb):
    """`writes` and `inc`, the parts that fit a 1M run, run only when named."""
    result = run(
        ferretdb.url, 40, 10, [1], 5, 1, "test", timed_inserts=5, only=["writes", "inc"], incs=3
    )
    assert set(result["inc"]) == {"plain", "veil", "veil_chain_revealed"}
    assert len(result["writes"]["write"]) == 2 and "benchmarkdb" not in result
    overheads(result)
    assert "writes" not in run(ferretdb.url, 20, 5, [1], 5, 1, "test", only=["range"])


def test_ope_ranges_reported_before_the_ore_load(ferretdb):
    """At 1M the `ore` load takes half an hour: the `ope` figures are written before it."""
    reports: list[dict[str, Any]] = []
    result = run(
        ferretdb.url, 30, 10, [1], 5, 1, "test", only=["range"],
        progress=lambda partial: reports.append(json.loads(json.dumps(partial))),
    )  # fmt: skip
    first = reports[0]["range"]
    assert set(first) == {"plain", "veil"} and first["veil"]["round_trips"] == 1.0
    assert {"plain_ranked", "veil_ore", "ore_load_docs_per_s"} <= set(result["range"])
    assert set(overheads(result)) == {"range ope", "range ore"}


def test_ore_section_alone_and_ycsb_workloads_reported_as_they_end(ferretdb):
    """`ore` (named only) loads the ranked documents in one insert_many each, so the
    tree is bulk-built; each YCSB workload's figures are written as soon as it ends."""
    reports: list[dict[str, Any]] = []
    result = run(
        ferretdb.url, 300, 10, [1, 2], 5, 1, "test", only=["ore", "ycsb"],
        progress=lambda partial: reports.append(json.loads(json.dumps(partial))),
    )  # fmt: skip
    ore = result["ore"]
    assert ore["ore_tree"] == {"levels": 2, "nodes": 5}  # 300 keys: a root over 4 leaves
    assert ore["veil_ore"]["sequential_round_trips"] <= 3
    assert set(ore["load_docs_per_s"]) == {"plain", "veil"}
    workloads = [set(r.get("ycsb", {})) - {"load_docs_per_s"} for r in reports]
    assert {"uniform_1t"} in workloads and {"uniform_1t", "uniform_2t"} in workloads
    assert {"range ore", "ore load", "ycsb uniform_1t"} <= set(overheads(result))


def test_each_ycsb_workload_writes_values_of_its_own(ferretdb):
    """The second workload over the same keys must not rewrite the first one's values:
    FerretDB skips an update that changes nothing (plain's would cost no write), while
    Veil's fresh ciphertext is always written."""
    import os

    import pymongo

    run(ferretdb.url, 31, 12, [1, 2], 5, 1, "test", only=["ycsb"])  # a database of its own
    with pymongo.MongoClient(ferretdb.url) as client:
        values = [d["field3"] for d in client[f"bench_plain_31_{os.getpid()}"].usertable.find()]
    written = {v[:4] for v in values if v.startswith("u")}
    # each distribution's second workload updates the first one's records with values
    # of its own (workloads 1-2 uniform, 3-4 Zipfian), so only those are left
    assert written == {"u002", "u004"}
    assert all(len(v) == 100 for v in values)
