"""Who may do what through ``veil serve``: GRANT and REVOKE of table and column privileges.

The rights live beside the users in ``users.json`` (``veil.serve.users``).
An administrator may do everything, run DDL and GRANT/REVOKE; any other user
may do only what was granted: SELECT, INSERT, UPDATE or DELETE on a table, or
SELECT/INSERT/UPDATE on some of its columns. A statement is checked before it
runs, on the trusted side, against the plaintext schema: a column a user may
not read is never fetched or decrypted for that user. As in PostgreSQL, a
column a statement reads anywhere (its select list, WHERE, JOIN, SET's right
side, RETURNING) needs SELECT on it, and a table read without naming a column
(``count(*)``) needs SELECT on one of its columns at least. Refusals carry
PostgreSQL's SQLSTATE 42501.

What it protects against: a user of the wire server reading or changing what
they were not given. What not: anyone holding the key file reads everything
(docs/security.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import traverse_scope

from veil.serve.errors import WireError

PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")
ALL_COLUMNS = "*"
Schema = Mapping[str, Any]  # table -> {column -> type} (veil.serve.dialect.Schema)
Need = tuple[str, str, str | None]  # (privilege, table, column or None: any one column)


@dataclass
class Rights:
    """One user's rights: ``grants[table][privilege]`` lists columns (``*``: the table)."""

    admin: bool
    grants: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def allows(self, privilege: str, table: str, column: str | None) -> bool:
        if self.admin:
            return True
        columns = self.grants.get(table, {}).get(privilege, [])
        if ALL_COLUMNS in columns:
            return True
        return bool(columns) if column is None else column in columns

    def grant(self, privilege: str, table: str, columns: list[str] | None) -> None:
        held = self.grants.setdefault(table, {}).setdefault(privilege, [])
        for column in columns or [ALL_COLUMNS]:
            if column not in held:
                held.append(column)
        held.sort()

    def revoke(self, privilege: str, table: str, columns: list[str] | None) -> None:
        """Like PostgreSQL: a table-level REVOKE takes the column grants too; a column
        REVOKE takes that column's grant (a table-level grant stays)."""
        held = self.grants.get(table, {})
        if columns is None:
            held.pop(privilege, None)
        elif privilege in held:
            held[privilege] = [c for c in held[privilege] if c not in columns]
            if not held[privilege]:
                del held[privilege]
        if table in self.grants and not held:
            del self.grants[table]

    def to_json(self) -> dict[str, object]:
        return {"admin": self.admin, "grants": self.grants}


def rights_of(entry: Mapping[str, object] | None) -> Rights:
    """A user's rights from their ``users.json`` entry.

    No entry (``--insecure-local`` lets anyone in), or an entry made before
    rights were recorded: an administrator, as every user was then."""
    if entry is None or "admin" not in entry:
        return Rights(admin=True)
    grants = entry.get("grants") or {}
    assert isinstance(grants, dict)
    return Rights(admin=bool(entry["admin"]), grants={t: dict(p) for t, p in grants.items()})


def check(rights: Rights, tree: exp.Expr, schema: Schema, user: str) -> None:
    """Refuse ``tree`` (42501) unless ``rights`` cover every privilege it needs."""
    if rights.admin:
        return
    if not isinstance(tree, exp.Query | exp.Insert | exp.Update | exp.Delete):
        raise WireError(
            "42501",
            f'permission denied: {tree.key.upper()} needs an administrator, and "{user}" is '
            "not one (veil user add --admin)",
        )
    for privilege, table, column in sorted(needed(tree, schema), key=str):
        if not rights.allows(privilege, table, column):
            # PostgreSQL names the table when none of it is granted, else the column
            partly = column is not None and rights.allows(privilege, table, None)
            what = f"column {column} of table {table}" if partly else f"table {table}"
            raise WireError("42501", f"permission denied for {what} ({privilege})")


def needed(tree: exp.Expr, schema: Schema) -> set[Need]:
    """The privileges ``tree`` needs: (privilege, table, column or None for any column)."""
    if isinstance(tree, exp.Query):
        return _reads(tree, schema)
    target = tree.this
    while isinstance(target, exp.Schema):  # INSERT INTO t (a, b): the table inside
        target = target.this
    if not isinstance(target, exp.Table):
        return _all_tables(tree, schema)
    name = target.name.lower()
    columns = list(schema.get(name, {}))
    needs: set[Need] = set()
    if isinstance(tree, exp.Insert):
        listed = tree.this if isinstance(tree.this, exp.Schema) else None
        inserted = [c.name.lower() for c in listed.expressions] if listed else columns
        needs |= {("INSERT", name, c) for c in inserted}
        source = tree.expression
        if isinstance(source, exp.Query) and not isinstance(source, exp.Values):
            needs |= _reads(source, schema)
        conflict = tree.args.get("conflict")
        if isinstance(conflict, exp.Expr):
            for assignment in conflict.find_all(exp.EQ):
                if isinstance(assignment.this, exp.Column):
                    needs.add(("UPDATE", name, assignment.this.name.lower()))
            needs |= _target_reads(conflict, name, target.alias_or_name, columns)
    elif isinstance(tree, exp.Update):
        for assignment in tree.expressions:
            if isinstance(assignment, exp.EQ) and isinstance(assignment.this, exp.Column):
                needs.add(("UPDATE", name, assignment.this.name.lower()))
                needs |= _target_reads(assignment.expression, name, target.alias_or_name, columns)
        for part in ("where", "from", "from_"):
            if isinstance(tree.args.get(part), exp.Expr):
                needs |= _target_reads(tree.args[part], name, target.alias_or_name, columns)
    else:
        needs.add(("DELETE", name, None))
        for part in ("where", "using"):
            if isinstance(tree.args.get(part), exp.Expr):
                needs |= _target_reads(tree.args[part], name, target.alias_or_name, columns)
    returning = tree.args.get("returning")
    if isinstance(returning, exp.Expr):
        if returning.find(exp.Star):
            needs |= {("SELECT", name, c) for c in columns}
        needs |= _target_reads(returning, name, target.alias_or_name, columns)
    others = {t for t in _tables(tree, schema) if t != name}
    return needs | _every_column(schema, others)


def _reads(query: exp.Expr, schema: Schema) -> set[Need]:
    """SELECT on each column the query reads, resolved scope by scope."""
    try:
        qualified = qualify(query.copy(), schema=_lower(schema), dialect="duckdb")
        scopes = traverse_scope(qualified)
    except (SqlglotError, KeyError, ValueError):  # unresolvable: every column it could read
        return _all_tables(query, schema)
    needs: set[Need] = set()
    for scope in scopes:
        for column in scope.columns:
            source = scope.sources.get(column.table)
            if isinstance(source, exp.Table) and source.name.lower() in schema:
                needs.add(("SELECT", source.name.lower(), column.name.lower()))
        for source in scope.sources.values():
            if isinstance(source, exp.Table) and source.name.lower() in schema:
                needs.add(("SELECT", source.name.lower(), None))
    return needs


def _target_reads(node: exp.Expr, table: str, alias: str, columns: list[str]) -> set[Need]:
    """SELECT on the target's columns ``node`` reads (unqualified, or by its name or
    alias), and what its subqueries read of other tables is added by the caller."""
    names = {table, alias.lower(), ""}
    return {
        ("SELECT", table, column.name.lower())
        for column in node.find_all(exp.Column)
        if column.table.lower() in names and column.name.lower() in columns
    }


def _tables(tree: exp.Expr, schema: Schema) -> set[str]:
    return {t.name.lower() for t in tree.find_all(exp.Table) if t.name.lower() in schema}


def _all_tables(tree: exp.Expr, schema: Schema) -> set[Need]:
    """The safe side: SELECT on every column of every table ``tree`` names."""
    return _every_column(schema, _tables(tree, schema))


def _every_column(schema: Schema, tables: Iterable[str]) -> set[Need]:
    return {("SELECT", t, c) for t in tables for c in schema[t]}


def _lower(schema: Schema) -> dict[str, object]:
    return {t.lower(): {c.lower(): kind for c, kind in cols.items()} for t, cols in schema.items()}


# -- GRANT and REVOKE --------------------------------------------------------------

_STATEMENT = re.compile(
    r"^\s*(?P<verb>GRANT|REVOKE)\s+(?P<privileges>.+?)\s+ON\s+(?P<objects>.+?)\s+"
    r"(?:TO|FROM)\s+(?P<users>.+?)\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_PRIVILEGE = re.compile(r"^(?P<name>[A-Za-z]+)(?:\s+PRIVILEGES)?\s*(?:\((?P<columns>[^)]*)\))?$")
_ALL_IN_SCHEMA = re.compile(r"^ALL\s+TABLES\s+IN\s+SCHEMA\s+\S+$", re.IGNORECASE)


@dataclass
class GrantStatement:
    grant: bool  # GRANT (else REVOKE)
    privileges: list[tuple[str, list[str] | None]]  # (privilege, columns or None: the table)
    tables: list[str]
    users: list[str]


def parse_grant(text: str, schema: Schema) -> GrantStatement:
    """``GRANT|REVOKE privileges ON [TABLE] t, ... | ALL TABLES IN SCHEMA s TO|FROM users``."""
    found = _STATEMENT.match(text)
    if found is None:
        raise WireError(
            "42601",
            "Veil's GRANT is GRANT {SELECT | INSERT | UPDATE | DELETE | ALL} [(columns)] ON "
            "[TABLE] t [, ...] | ALL TABLES IN SCHEMA main TO user [, ...] (REVOKE ... FROM)",
        )
    tables = _objects(found["objects"].strip(), schema)
    privileges = []
    for part in _split(found["privileges"]):
        privilege = _PRIVILEGE.match(part.strip())
        name = privilege["name"].upper() if privilege else ""
        if privilege is None or name not in (*PRIVILEGES, "ALL"):
            raise WireError(
                "42601", f"unknown privilege {part.strip()!r}: Veil grants {', '.join(PRIVILEGES)}"
            )
        columns = None
        if privilege["columns"] is not None:
            columns = [_name(c) for c in privilege["columns"].split(",") if c.strip()]
            if name == "DELETE":
                raise WireError("0LP01", "DELETE is granted on a whole table, not on columns")
            for table in tables:
                for column in columns:
                    if column not in schema[table]:
                        raise WireError(
                            "42703", f'column "{column}" of relation "{table}" does not exist'
                        )
        for each in PRIVILEGES if name == "ALL" else (name,):
            if not (columns is not None and each == "DELETE"):
                privileges.append((each, columns))
    users = [_name(u) for u in _split(found["users"])]
    return GrantStatement(found["verb"].upper() == "GRANT", privileges, tables, users)


def _objects(text: str, schema: Schema) -> list[str]:
    if _ALL_IN_SCHEMA.match(text):
        return sorted(schema)
    text = re.sub(r"^TABLE\s+", "", text, flags=re.IGNORECASE)
    tables = []
    for part in _split(text):
        name = _name(part.split(".")[-1])
        if name not in schema:
            raise WireError("42P01", f'relation "{name}" does not exist')
        tables.append(name)
    return tables


def _split(text: str) -> list[str]:
    """``text`` cut at top-level commas (not inside a column list)."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p for p in (*parts, current) if p.strip()]


def _name(text: str) -> str:
    text = text.strip()
    if len(text) > 1 and text[0] == text[-1] == '"':
        return text[1:-1].replace('""', '"')
    return text.lower()
