"""``python -m tests.docfuzz SEED N``: run N generated cases from SEED.

    python -m tests.docfuzz 0 200                      # on a FerretDB started for the run
    python -m tests.docfuzz 0 200 --url mongodb://127.0.0.1:PORT/
    python -m tests.docfuzz 0 50 --kind mongo-java-server

Each case inserts its documents through Veil and through plain pymongo into
databases of their own, runs its operations on both and compares every result
and, after each write, both collections. Prints each failure (the seed, the
step, the operation) and a summary; ``--sums`` picks how grouped sums run
(default: each case takes auto, server and fetch in turn).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pymongo

import veil.documents
from tests.docfuzz.generator import SCHEMA, make_case
from tests.docfuzz.harness import Failure, run_case
from veil.crypto.keys import write_key_file

SUMS = ("auto", "server", "fetch")


@contextlib.contextmanager
def server_url(url: str | None, kind: str, root: Path) -> Iterator[str]:
    if url:
        yield url.rstrip("/") + "/"
        return
    if kind == "ferretdb":
        from veil_dev.servers.ferretdb import FerretDBServer as Server
    else:
        from veil_dev.servers.mongojava import MongoJavaServer as Server  # type: ignore[assignment]
    server = Server(root / kind)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def run_seed(
    url: str, key_file: Path, seed: int, sums: str, documents: int = 40, operations: int = 25
) -> Failure | None:
    case = make_case(seed, documents, operations)
    name = f"docfuzz_{seed}"
    plain_client: pymongo.MongoClient = pymongo.MongoClient(url)
    try:
        plain_client.drop_database(name + "_plain")
        plain_client.drop_database(name)
        with veil.documents.connect(url + name, key_file, {"items": SCHEMA}, sums=sums) as db:
            return run_case(case, db.items, plain_client[name + "_plain"].items)
    finally:
        plain_client.drop_database(name + "_plain")
        plain_client.drop_database(name)
        plain_client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.docfuzz", description=__doc__)
    parser.add_argument("seed", type=int, nargs="?", default=0)
    parser.add_argument("n", type=int, nargs="?", default=100)
    parser.add_argument("--url", help="a running MongoDB-wire server (default: start one)")
    parser.add_argument("--kind", choices=["ferretdb", "mongo-java-server"], default="ferretdb")
    parser.add_argument("--sums", choices=SUMS, help="how grouped sums run (default: rotate)")
    parser.add_argument("--docs", type=int, default=40, help="starting documents a case")
    parser.add_argument("--ops", type=int, default=25, help="operations a case")
    args = parser.parse_args(argv)
    failures: list[Failure] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="veil-docfuzz-") as tmp:
        root = Path(tmp)
        key_file = root / "veil.key"
        write_key_file(key_file)
        with server_url(args.url, args.kind, root) as url:
            for i, seed in enumerate(range(args.seed, args.seed + args.n)):
                sums = args.sums or SUMS[seed % len(SUMS)]
                failure = run_seed(url, key_file, seed, sums, args.docs, args.ops)
                if failure is not None:
                    failures.append(failure)
                    print(f"FAIL (sums={sums}) {failure}", flush=True)
                if (i + 1) % 10 == 0:
                    print(f"  {i + 1}/{args.n}: failed {len(failures)}", flush=True)
    elapsed = time.monotonic() - started
    print(f"{args.n} cases from seed {args.seed} in {elapsed:.0f} s: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
