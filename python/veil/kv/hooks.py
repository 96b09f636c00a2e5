"""Crash-injection points for tests of the split and merge protocols.

The protocols must leave a correct store behind whenever a client dies between
two of their writes (paper §5.2, §6.3). Tests prove it by killing a real client
process at a named point: set ``VEIL_KV_CRASH_AT`` to the point's name in the
child's environment and the process kills itself with SIGKILL there -- no
cleanup, no ``finally`` blocks, as with a power cut. Unset (always, in
production), :func:`crash_point` is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "VEIL_KV_CRASH_AT"

# The points, in protocol order.
SPLIT_AFTER_FIRST_PIECE = "split-after-first-piece"
SPLIT_BEFORE_LEFT = "split-before-left"
MERGE_AFTER_FIRST_PACK = "merge-after-first-pack"
MERGE_BEFORE_STATUS = "merge-before-status"
DELETE_AFTER_STATUS = "delete-after-status"


def crash_point(name: str) -> None:
    """Kill this process now if the test asked for a crash at ``name``."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
