"""``python -m tests.concurrency.soak --minutes 10``: the concurrency suite, again and again.

Each round runs ``tests/concurrency`` (every race, on DuckDB and PostgreSQL:
banks, lost updates, keys, upserts, job queues, writers beside rebuilds,
killed clients, pgbench, documents) in a fresh pytest process, until the time
is up; every test checks its invariants, so a failure is an anomaly. The
summary (rounds, tests run, failures by test) is printed and, with
``--json``, written for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path


def _round(selection: list[str]) -> tuple[int, list[str]]:
    """One run of the suite: how many tests ran, and the ids of those that failed."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "round.xml"
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             f"--junitxml={report}", *selection],
            check=False, capture_output=True,
        )  # fmt: skip
        if not report.exists():
            return 0, ["<pytest did not run>"]
        root = ElementTree.parse(report).getroot()
    ran, failed = 0, []
    for case in root.iter("testcase"):
        if case.find("skipped") is not None:
            continue
        ran += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname')}::{case.get('name')}")
    return ran, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--json", metavar="PATH", help="write the summary here")
    parser.add_argument("tests", nargs="*", default=["tests/concurrency"])
    args = parser.parse_args()
    started = time.monotonic()
    rounds, ran, failures = 0, 0, Counter[str]()
    while rounds == 0 or time.monotonic() - started < args.minutes * 60:
        count, failed = _round(args.tests)
        rounds, ran = rounds + 1, ran + count
        failures.update(failed)
        print(f"round {rounds}: {count} tests, {len(failed)} failed {failed or ''}", flush=True)
    summary = {
        "minutes": round((time.monotonic() - started) / 60, 1),
        "rounds": rounds,
        "tests_run": ran,
        "anomalies": sum(failures.values()),
        "failures": dict(failures),
        "selection": args.tests,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
