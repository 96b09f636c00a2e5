"""What ``veil design`` prints: the space used, the designer's time, and each query's plan."""

from __future__ import annotations

from collections import Counter

from veil.design.model import PhysicalDesign
from veil.designer.candidates import ASHE
from veil.frontend.design import DesignReport
from veil.frontend.output import format_grid
from veil.load.redesign import design_changes


def format_report(report: DesignReport, *, verbose: bool = False) -> str:
    solution, problem = report.solution, report.problem
    budget = "unbounded" if report.budget is None else f"{report.budget:g} x plaintext"
    stored = Counter(key.split(" ", 1)[0] for key in solution.enabled)
    kinds = ", ".join(f"{n} {scheme}" for scheme, n in sorted(stored.items())) or "none"
    times = report.seconds
    lines = [
        f"design for {len(report.queries)} queries, budget {budget}: "
        f"{report.space_factor:.3f} x the plaintext "
        f"({solution.space_bytes / 1e6:,.1f} MB of {problem.plain_bytes / 1e6:,.1f} MB"
        f"{' on disk' if report.on_disk else ' of values (no sizes on disk measured)'}; "
        f"the greedy design: {report.greedy_factor:.3f} x)",
        f"optional encryptions stored: {kinds} (of {len(problem.sizes)} candidates; "
        f"{ASHE}: summed expressions)",
        f"estimated workload cost: {solution.seconds * 1e3:,.1f} ms; designer: "
        f"{times['total']:.2f} s (planning {times['plans']:.2f} s, ILP {times['ilp']:.3f} s: "
        f"{solution.variables} variables, {solution.constraints} constraints)",
        "",
        format_grid(
            [
                "query",
                "estimated ms",
                "at run time ms",
                "fetch-all ms",
                "plans",
                "chosen plan",
                "needs",
            ],
            [
                [
                    number,
                    f"{q.chosen.seconds * 1e3:,.1f}",
                    f"{q.run_time_seconds * 1e3:,.1f}",
                    f"{q.fetch_all_seconds * 1e3:,.1f}",
                    q.alternatives,
                    q.chosen.summary,
                    len(q.chosen.needs),
                ]
                for number, q in enumerate(report.queries, 1)
            ],
        ),
    ]
    if verbose:
        lines.append("what each chosen plan reads on the server:")
        for number, q in enumerate(report.queries, 1):
            lines.append(
                f"  {number}: {', '.join(sorted(q.chosen.needs)) or 'no optional encryption'}"
            )
    return "\n".join(lines)


def format_changes(current: PhysicalDesign, target: PhysicalDesign) -> str:
    """What moving from ``current`` to ``target`` adds and drops, per table."""
    changes = design_changes(current, target)
    if not changes:
        return "change from the current design: none"
    lines = [f"change from the current design: {len(changes)} table(s) to rebuild"]
    for change in changes:
        added = ", ".join(change.added) or "nothing"
        dropped = ", ".join(change.dropped) or "nothing"
        lines.append(f"  {change.table}: add {added}; drop {dropped}")
    lines.append("apply with: veil redesign CLIENT_DIR --design FILE")
    return "\n".join(lines)
