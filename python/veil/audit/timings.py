"""``veil serve --log-level debug``: one log line per statement with its time by phase.

The same record the audit log and the metrics get (``veil.audit.observe``):
the statement's shape (parameters redacted), its user, the plan cache's hit or
miss, and its time split into parse, plan, encrypt, server, fetch, decrypt and
local, so an operator sees where a slow statement's time went without a
profiler. Logged on the trusted side only; it holds no value and no key.
"""

from __future__ import annotations

import logging
from typing import Any

from veil.audit.observe import PHASES

log = logging.getLogger("veil.statements")


class PhaseLog:
    """An ``Observer`` sink writing each statement's phases at DEBUG level."""

    def record(self, record: dict[str, Any]) -> None:
        phases = record.get("phases") or {}
        split = ", ".join(f"{p} {phases[p] * 1e3:.2f}" for p in PHASES if p in phases)
        log.debug(
            "%s %.2f ms (%s; plan %s; rows %s; %s %s): %s",
            record.get("outcome"),
            record.get("seconds", 0.0) * 1e3,
            split or "no phase measured",
            "cached" if record.get("plan_cache") else "not cached",
            record.get("rows"),
            record.get("user"),
            record.get("sqlstate"),
            record.get("statement"),
        )


def wanted() -> bool:
    """Whether phases are logged: the ``veil.statements`` logger is at DEBUG."""
    return log.isEnabledFor(logging.DEBUG)
