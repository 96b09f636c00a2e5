"""``veil audit CDIR``: the statements the audit log recorded, filtered and shown.

Only the standard library is imported here: ``veil --help`` registers this
command without loading Arrow, DuckDB or sqlglot.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from pathlib import Path
from typing import Any

from veil.errors import ParameterError

_AGO = re.compile(r"^(\d+)\s*([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = subparsers.add_parser(
        "audit",
        help="the statements `veil serve` and audited DB-API connections ran (audit.jsonl)",
        description="List the audit log of a client directory: who ran which statement "
        "(literals and parameters shown as ?), when, the tables and columns it decrypted, "
        "the rows it returned and its outcome. Oldest first.",
    )
    audit.add_argument("client_dir")
    audit.add_argument("--user", help="only this user's statements")
    audit.add_argument(
        "--since",
        metavar="T",
        help="only statements from T on: an ISO time (2026-12-05T18:00, UTC unless it has an "
        "offset), a date, or an age (30s, 15m, 2h, 7d)",
    )
    audit.add_argument("--table", help="only statements that decrypted columns of this table")
    audit.add_argument("--json", action="store_true", help="the records as JSON lines")
    audit.set_defaults(handler=run_audit)


def run_audit(args: argparse.Namespace) -> int:
    from veil.audit.log import AUDIT_FILE, read_records
    from veil.sql.errors import ClientDirectoryError

    directory = Path(args.client_dir)
    if not directory.is_dir():
        raise ClientDirectoryError(
            f"{args.client_dir} is not a client directory (no such directory)"
        )
    path = directory / AUDIT_FILE
    if not path.exists():
        raise ClientDirectoryError(
            f"{args.client_dir} has no audit log yet ({AUDIT_FILE}): `veil serve` writes one "
            "unless started with --no-audit, and the DB-API with veil.connect(..., audit=True)"
        )
    since = parse_since(args.since) if args.since else None
    records, damaged = read_records(path)
    chosen = [r for r in records if _matches(r, args.user, since, args.table)]
    if args.json:
        for record in chosen:
            print(json.dumps(record, ensure_ascii=False))
    else:
        print(_table(chosen))
    if damaged:
        print(
            f"veil: skipped {damaged} damaged line(s) of {path} (a writer stopped mid-line)",
            file=sys.stderr,
        )
    return 0


def parse_since(text: str) -> dt.datetime:
    """``--since``: an age (``2h``) before now, or an ISO time or date (UTC without offset)."""
    ago = _AGO.match(text.strip())
    if ago:
        return _now() - dt.timedelta(**{_UNITS[ago[2]]: int(ago[1])})
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ParameterError(
            f"--since {text!r} is neither an ISO time (2026-12-05T18:00), a date (2026-12-05) "
            "nor an age (30s, 15m, 2h, 7d)"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _matches(
    record: dict[str, Any], user: str | None, since: dt.datetime | None, table: str | None
) -> bool:
    if user is not None and record.get("user") != user:
        return False
    if table is not None and table not in (record.get("tables") or {}):
        return False
    if since is not None:
        try:
            when = dt.datetime.fromisoformat(str(record.get("time")).replace("Z", "+00:00"))
        except ValueError:
            return False
        return when >= since
    return True


_COLUMNS = ("time", "user", "outcome", "rows", "ms", "tables", "statement")


def _table(records: list[dict[str, Any]]) -> str:
    if not records:
        return "(no statements match)"
    rows = [_row(r) for r in records]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(_COLUMNS)]
    lines = [_line(_COLUMNS, widths), _line(["-" * w for w in widths], widths)]
    lines += [_line(r, widths) for r in rows]
    return "\n".join(lines) + f"\n({len(records)} statement{'s' if len(records) != 1 else ''})"


def _row(record: dict[str, Any]) -> list[str]:
    outcome = str(record.get("outcome", ""))
    if outcome != "ok":
        outcome = f"{outcome} {record.get('sqlstate', '')}".strip()
    rows = record.get("rows")
    tables = record.get("tables") or {}
    return [
        str(record.get("time", "")),
        str(record.get("user", "")),
        outcome,
        "" if rows is None else str(rows),
        f"{float(record.get('seconds') or 0) * 1000:.1f}",
        " ".join(f"{t}({','.join(c)})" for t, c in tables.items()),
        str(record.get("statement", "")),
    ]


def _line(cells: Any, widths: list[int]) -> str:
    *first, last = [str(c) for c in cells]
    return "  ".join([c.ljust(w) for c, w in zip(first, widths, strict=False)] + [last]).rstrip()
