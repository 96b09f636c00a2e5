"""``veil explain --analyze``: the plan's estimated cost beside what running it took."""

from __future__ import annotations

import time
from collections.abc import Callable

from veil.cost.calibration import calibration_of
from veil.cost.model import PlanCost, estimate_plan
from veil.exec.server import FetchStats, StepRun
from veil.frontend.explain import checked_query, explain_plan
from veil.frontend.output import format_grid
from veil.session.session import Session


def explain_analyze(
    session: Session,
    sql: str,
    params: list[object] | None = None,
    bandwidth: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> str:
    """Run ``sql`` and show its plan with estimated and actual figures per statement.

    The query really runs (and peels what it needs, as any run would); its
    rows are not shown. Any failure is a ``VeilError``.
    """
    analyzed = session.guarded(sql, lambda: _analyze(session, sql, params, bandwidth, progress))
    return "\n".join(
        [
            analyzed,
            "",
            "where a statement's time goes, run as an application runs it (ms):",
            _phases(session, sql, params),  # Session.run guards itself
        ]
    )


def _analyze(
    session: Session,
    sql: str,
    params: list[object] | None,
    bandwidth: float | None,
    progress: Callable[[str], None] | None,
) -> str:
    tree = checked_query(session, sql, params)
    calibration = calibration_of(session, progress=progress)  # measured on first use
    plan = session.plan(tree)
    estimated = estimate_plan(session, plan, calibration, bandwidth)
    stats = FetchStats()
    started = time.perf_counter()
    result = session.execute_plan(plan, stats)
    wall = time.perf_counter() - started
    link = f"{bandwidth / 1e6:g} Mbit/s" if bandwidth else "this machine's, as calibrated"
    lines = [
        explain_plan(session, plan),
        "",
        f"estimated vs actual ({result.num_rows:,} result rows; calibrated "
        f"{calibration.measured}; link: {link}):",
        _figures(estimated, stats, wall),
    ]
    return "\n".join(lines)


PHASES = ("parse", "plan", "encrypt", "server", "decrypt", "local")


def _phases(session: Session, sql: str, params: list[object] | None) -> str:
    """The statement run twice more through ``Session.run``: its parts of the time, the
    second with its plan from the plan cache (when the plan can be cached)."""
    rows: list[list[object]] = []
    for label in ("again", "once more"):
        started = time.perf_counter()
        stats = session.run(sql, params).stats
        wall = time.perf_counter() - started
        parts = [getattr(stats, f"{phase}_seconds") for phase in PHASES]
        hit = {True: "hit", False: "miss", None: "-"}[stats.plan_hit]
        other = max(0.0, wall - sum(parts))
        rows.append([label, hit, *(_ms(p) for p in parts), _ms(other), _ms(wall)])
    header = ["run", "plan cache", *PHASES, "other", "total"]
    grid = format_grid(header, rows).rsplit("\n", 1)[0]
    return (
        "  " + grid.replace("\n", "\n  ") + "\n  (server: its statements and their transfer; "
        "other: binding, result assembly and Python between the parts)"
    )


def _figures(estimated: PlanCost, stats: FetchStats, wall: float) -> str:
    """One row per step, then the local plan and the whole query: estimate / actual."""
    rows: list[list[object]] = []
    for number, step in enumerate(estimated.steps, 1):
        ran = stats.steps.get(step.key, StepRun())
        rows.append(
            [
                f"RemoteSQL {number}: {step.label}",
                f"{step.rows:,.0f} / {ran.rows:,}",
                f"{_mb(step.bytes)} / {_mb(ran.bytes)}",
                f"{_ms(step.server_seconds + step.transfer_seconds)} / {_ms(ran.server_seconds)}",
                f"{_ms(step.decrypt_seconds)} / {_ms(ran.decrypt_seconds)}",
                f"{_ms(step.seconds)} / {_ms(ran.server_seconds + ran.decrypt_seconds)}",
            ]
        )
    local = f"{_ms(estimated.local_seconds)} / {_ms(stats.local_seconds)}"
    rows.append(["local plan (client DuckDB)", "", "", "", "", local])
    rows.append(["whole query", "", "", "", "", f"{_ms(estimated.seconds)} / {_ms(wall)}"])
    header = ["step", "rows", "MB", "server + fetch ms", "decrypt ms", "total ms"]
    grid = format_grid(header, rows).rsplit("\n", 1)[0]  # without the row count
    return "  " + grid.replace("\n", "\n  ") + "\n  (each cell: estimated / actual)"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f}"


def _mb(size: float) -> str:
    return f"{size / 2**20:,.2f}"
