"""Run MiniCrypt client code in a separate process, optionally crashing it.

Crash tests need a client that dies between two protocol writes with no
cleanup; ``run_client`` starts a fresh interpreter that opens the store and
runs ``code`` (with ``store`` bound), with ``VEIL_KV_CRASH_AT`` set so that the
named crash point SIGKILLs it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from veil.kv.hooks import CRASH_ENV

PRELUDE = """
import sys, veil.kv
store = veil.kv.open(sys.argv[1], sys.argv[2], sys.argv[3], table=sys.argv[4], background=False)
"""


def run_client(
    url: str, key_file: Path, table: str, code: str, *, mode: str = "generic", crash_at: str = ""
) -> int:
    """Run ``code`` in a client process; returns its exit code (-9 if it crashed)."""
    env = dict(os.environ)
    env[CRASH_ENV] = crash_at
    script = PRELUDE + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", script, url, str(key_file), mode, table],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if done.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"client failed: {done.stderr.decode()[-2000:]}")
    return done.returncode


def start_client(
    url: str, key_file: Path, table: str, code: str, *, mode: str = "generic"
) -> subprocess.Popen[bytes]:
    """Start ``code`` in a client process without waiting (concurrency tests)."""
    env = dict(os.environ)
    env.pop(CRASH_ENV, None)
    script = PRELUDE + textwrap.dedent(code)
    return subprocess.Popen(
        [sys.executable, "-c", script, url, str(key_file), mode, table],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
