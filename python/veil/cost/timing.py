"""Timing work on a shared machine: the least of a few runs."""

from __future__ import annotations

import time
from collections.abc import Callable

RUNS = 5


def fastest(work: Callable[[], object], runs: int = RUNS) -> float:
    """The least of ``runs`` runs' seconds: the work's own time, as free as it gets of other
    processes (a machine shared under load doubled medians, and skewed kinds apart)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)
