"""``veil shell CDIR``: an interactive SQL prompt over a client directory.

Statements end with ``;`` and may span lines; history is kept in
``~/.veil_history`` (readline). ``\\dt`` lists the tables, ``\\d TABLE``
describes one, ``\\q`` (or Ctrl-D) quits. Errors are printed and the prompt
goes on. Without a terminal, statements are read from standard input.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from veil.errors import VeilError
from veil.frontend.output import print_table
from veil.session.session import Session
from veil.statements import run

HISTORY = Path.home() / ".veil_history"
_COMMANDS = {"\\dt": "SHOW TABLES", "\\d": "DESCRIBE {}"}


def shell(client_dir: str, source: TextIO = sys.stdin, out: TextIO = sys.stdout) -> int:
    interactive = source.isatty()
    if interactive:
        _with_history()
    session = Session(client_dir)
    failures = 0
    try:
        for statement in _statements(source, interactive, out):
            failures += not _run(session, statement, out, timed=interactive)
    finally:
        session.close()
        if interactive:
            _save_history()
    return 1 if failures and not interactive else 0


def _statements(source: TextIO, interactive: bool, out: TextIO) -> Iterator[str]:
    """Each statement or backslash command, as the user ends it."""
    pending: list[str] = []
    while True:
        prompt = ("veil> " if not pending else "  ... ") if interactive else ""
        try:
            line = input(prompt) if interactive else source.readline()
        except EOFError:
            line = ""
        if not interactive and line == "":
            break
        if interactive and line == "" and not pending:
            continue
        stripped = line.strip()
        if not pending and stripped.startswith("\\"):
            command = _command(stripped)
            if command is None:
                break
            yield command
            continue
        pending.append(line.rstrip("\n"))
        if stripped.endswith(";"):
            yield "\n".join(pending).strip().rstrip(";")
            pending = []
    if pending and "".join(pending).strip():
        yield "\n".join(pending).strip().rstrip(";")


def _command(text: str) -> str | None:
    name, _, argument = text.partition(" ")
    if name in ("\\q", "\\quit"):
        return None
    if name == "\\d" and argument.strip():
        return _COMMANDS["\\d"].format(argument.strip().rstrip(";"))
    return _COMMANDS.get(name, "SHOW TABLES")


def _run(session: Session, sql: str, out: TextIO, *, timed: bool) -> bool:
    started = time.perf_counter()
    try:
        result = run(session, sql)
    except VeilError as exc:
        print(f"error: {exc}", file=out)
        return False
    if result.table.num_columns:
        print_table(result.table, "table", out)
    else:
        print(f"{result.rowcount} row(s) affected", file=out)
    if timed:
        print(f"({(time.perf_counter() - started) * 1000:.1f} ms)", file=out)
    return True


def _with_history() -> None:
    try:
        import readline

        if HISTORY.exists():
            readline.read_history_file(HISTORY)
    except (ImportError, OSError):
        pass


def _save_history() -> None:
    try:
        import readline

        readline.set_history_length(1000)
        readline.write_history_file(HISTORY)
    except (ImportError, OSError):
        pass
