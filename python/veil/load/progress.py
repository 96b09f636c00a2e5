"""Progress of a load: messages, and a meter per long step (rows done of a total, rate, ETA).

On a terminal the meter redraws one line at most five times a second::

    lineitem: encrypting  3,145,728 / 6,001,215 rows  52%  812,000 rows/s  ETA 4 s

Elsewhere (logs, CI, tests) only the messages are printed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TextIO

Say = Callable[[str], None]
_REDRAW_SECONDS = 0.2


class Meter(Protocol):
    def advance(self, rows: int) -> None: ...

    def close(self) -> None: ...


class _Silent:
    def advance(self, rows: int) -> None:
        pass

    def close(self) -> None:
        pass


class TerminalMeter:
    def __init__(self, label: str, total: int | None, out: TextIO):
        self.label, self.total, self.out = label, total, out
        self.done, self.started, self.drawn = 0, time.perf_counter(), 0.0

    def advance(self, rows: int) -> None:
        self.done += rows
        now = time.perf_counter()
        if now - self.drawn >= _REDRAW_SECONDS:
            self.drawn = now
            self._draw(now)

    def close(self) -> None:
        self._draw(time.perf_counter())
        self.out.write("\n")
        self.out.flush()

    def _draw(self, now: float) -> None:
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        line = f"{self.label}  {self.done:,}"
        if self.total:
            share = min(self.done / self.total, 1.0)
            left = (self.total - self.done) / rate if rate else 0.0
            line += f" / {self.total:,} rows  {share:4.0%}  {rate:,.0f} rows/s  ETA {left:,.0f} s"
        else:
            line += f" rows  {rate:,.0f} rows/s"
        self.out.write(f"\r{line:<100}")
        self.out.flush()


@dataclass
class Reporter:
    """Where a load reports: ``say`` for messages, meters on a terminal when ``bars``."""

    say: Say
    bars: bool = False
    out: TextIO = sys.stderr

    def meter(self, label: str, total: int | Callable[[], int | None] | None) -> Meter:
        """A meter of ``total`` rows (a callable is asked only if a meter is drawn)."""
        if self.bars and self.out.isatty():
            return TerminalMeter(label, total() if callable(total) else total, self.out)
        return _Silent()


def to_stderr(text: str) -> None:
    print(text, file=sys.stderr)
