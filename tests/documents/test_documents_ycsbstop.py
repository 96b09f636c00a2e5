"""Stopping a YCSB run: SIGTERM or Ctrl-C ends its client threads, not only the main one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pymongo
import pytest

from veil_dev.bench.documents.ycsbrun import Stopped, run_slot, stop_on_signals

#: Generous bounds, not timings: a run that ignores the signal goes on for far longer
#: (a million operations a workload).
STARTED_S = 300
EXITED_S = 120


def test_stop_on_signals_sets_the_event_raises_after_and_restores():
    before = signal.getsignal(signal.SIGTERM)
    stop = threading.Event()
    with pytest.raises(Stopped) as stopped, stop_on_signals(stop):
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(EXITED_S)  # the handler set it; the block went on
    assert stopped.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_stopped_slot_runs_no_operation():
    stop = threading.Event()
    stop.set()
    keys = np.zeros(10, dtype=np.int64)
    slot = run_slot(None, keys, keys, 0, 1, False, stop)  # no collection: none is touched
    assert slot.reads == slot.updates == [] and not slot.errors


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_bench_and_its_threads(ferretdb, signum):
    """The bench's 4 threads run a million operations; once plain's first update is on the
    server, the signal ends the process (threads and all) with its message and status."""
    command = [
        sys.executable, "-m", "veil.cli", "documents", "bench", "--url", ferretdb.url,
        "--docs", "50", "--ops", "1000000", "--threads", "4", "--sections", "ycsb",
    ]  # fmt: skip
    bench = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client: pymongo.MongoClient = pymongo.MongoClient(ferretdb.url)
    try:
        usertable = client[f"bench_plain_50_{bench.pid}"].usertable
        _wait_for(lambda: usertable.find_one({"field3": {"$regex": "^u001"}}), bench)
        bench.send_signal(signum)
        _, stderr = bench.communicate(timeout=EXITED_S)
    finally:
        bench.kill()
        client.close()
    assert bench.returncode == 128 + signum, stderr
    assert f"stopped by {signal.Signals(signum).name}" in stderr


def _wait_for(condition, bench: subprocess.Popen) -> None:
    deadline = time.monotonic() + STARTED_S
    while not condition():
        assert bench.poll() is None, bench.communicate()[1]
        assert time.monotonic() < deadline, "the bench's YCSB updates never started"
        time.sleep(0.2)
