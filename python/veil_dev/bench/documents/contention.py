"""Concurrent ``$inc`` of one document, per attribute kind: throughput and lost updates.

    python -m veil_dev.bench.documents.contention --url mongodb://127.0.0.1:PORT/ [--runs 3]

For each attribute that takes ``$inc`` a fresh collection holds one document;
``threads`` clients (each its own connection) send ``n`` ``update_one({"_id": 1},
{"$inc": {field: 1}})`` each, at once. Reports, per field and thread count, the
median ops/s over ``runs`` runs and the increments lost (``threads · n`` minus the
final value) in each run. ``--writes`` picks ``veil.documents.connect``'s write mode
(omitted: the server's default; an older Veil without the option takes none); the
script imports only ``veil.documents``, so it also runs against an older checkout
(``PYTHONPATH``) for a before/after comparison in one session.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import veil.documents
from veil.crypto.keys import write_key_file

FIELDS: dict[str, Any] = {
    "plain": "do_nothing",
    "static": {"attr": "static", "type": "int"},
    "ope": "index",
    "ore": {"attr": "index", "scheme": "ore"},
    "ashe": "h_add",
    "paillier": {"attr": "h_add", "scheme": "paillier"},
}


def run_once(url: str, key: Path, field: str, threads: int, n: int, writes: str | None,
             tag: str) -> tuple[float, int, int]:  # fmt: skip
    """(ops/s, increments lost, calls failed) of one race on a fresh collection."""
    schema = {"c": {"fields": {field: FIELDS[field]}}}
    options: dict[str, Any] = {} if writes is None else {"writes": writes}
    clients = [veil.documents.connect(url, key, schema, **options) for _ in range(threads)]
    name = f"c{tag}"
    collection = clients[0].get_collection(name, schema["c"])
    collection.insert_one({"_id": 1, field: 0})
    barrier = threading.Barrier(threads + 1)
    failed: list[str] = []

    def work(client: Any) -> None:
        mine = client.get_collection(name, schema["c"])
        barrier.wait()
        for _ in range(n):
            try:
                mine.update_one({"_id": 1}, {"$inc": {field: 1}})
            except Exception as exc:  # counted, not lost
                failed.append(type(exc).__name__)

    workers = [threading.Thread(target=work, args=(c,)) for c in clients]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - started
    final = collection.find_one({"_id": 1})[field]
    collection.drop()
    for client in clients:
        client.close()
    return threads * n / seconds, threads * n - len(failed) - final, len(failed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="server URL ending in /")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--n", type=int, default=25, help="increments per thread")
    parser.add_argument("--threads", default="1,4")
    parser.add_argument("--writes", choices=["claimed", "conditional"])
    parser.add_argument("--fields", default=",".join(FIELDS))
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    key = Path(tempfile.mkdtemp()) / "veil.key"
    write_key_file(key)
    url = args.url + f"bench_concurrent_{int(time.time() * 1000)}"
    out: dict[str, Any] = {"label": args.label, "writes": args.writes, "results": {}}
    for field in args.fields.split(","):
        for threads in (int(t) for t in args.threads.split(",")):
            runs = [
                run_once(url, key, field, threads, args.n, args.writes, f"{field}{threads}{r}")
                for r in range(args.runs)
            ]
            rate = statistics.median(r[0] for r in runs)
            lost, failed = [r[1] for r in runs], [r[2] for r in runs]
            out["results"][f"{field}/{threads}"] = {
                "ops_per_s": round(rate, 1), "lost": lost, "failed": failed,
            }  # fmt: skip
            print(f"{args.label} {field:9} threads={threads}: {rate:7.1f} ops/s, lost {lost}, "
                  f"failed {failed}", flush=True)  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()
