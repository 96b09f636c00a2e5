"""Several writer processes against one server, each reporting its traceback to the test."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from pathlib import Path


def run_writers(
    target: Callable[[str, str, int, int, str], None],
    url: str, key_file: Path, workers: int, count: int, tmp_path: Path,
) -> None:  # fmt: skip
    """Run ``target(url, key_file, worker, count, report)`` in ``workers`` spawned processes
    and fail with the first failing writer's traceback (its ``report`` file)."""
    context = multiprocessing.get_context("spawn")
    reports = [tmp_path / f"writer-{w}.txt" for w in range(workers)]
    processes = [
        context.Process(target=target, args=(url, str(key_file), w, count, str(r)))
        for w, r in zip(range(workers), reports, strict=True)
    ]
    for process in processes:
        process.start()
    for process, report in zip(processes, reports, strict=True):
        process.join(timeout=600)
        why = report.read_text() if report.exists() else "no report (killed or timed out)"
        assert process.exitcode == 0, why
