"""What a CREATE TABLE declares beyond its columns' types: NOT NULL, DEFAULT, identity, CHECK, keys.

Each is kept in the design and enforced by the client, which alone reads
values (``veil.session.constraints``):

- ``DEFAULT expr`` (constants, ``now()``, expressions of constants): the
  client's catalogue table carries it, so an INSERT that omits the column gets
  it exactly as DuckDB computes it;
- ``serial`` / ``bigserial`` / ``smallserial`` and ``GENERATED {BY DEFAULT |
  ALWAYS} AS IDENTITY``: an omitted value is taken from a one-row counter
  table on the server, advanced atomically as row ids are (``veil.session.row_ids``);
  like PostgreSQL's sequences, values a rolled-back statement took are skipped;
- ``CHECK (expr)``, on a column or the table: evaluated on every written row;
- ``REFERENCES`` / ``FOREIGN KEY`` (ON DELETE / ON UPDATE NO ACTION, RESTRICT,
  CASCADE, SET NULL, SET DEFAULT): ``veil.session.references``;
- ``PRIMARY KEY`` / ``UNIQUE``: ``veil.load.keys``.

The declarations are checked here on a scratch DuckDB table (an unknown
column in a CHECK, a DEFAULT that reads a column), so a table is created only
if DuckDB would accept its definition.
"""

from __future__ import annotations

import dataclasses

import duckdb
from sqlglot import exp

from veil.design.model import Column, Reference
from veil.encoding import normalize_type
from veil.exec.local_duckdb import local_duckdb
from veil.load import keys
from veil.load.sources import label_of
from veil.sql.errors import QueryError, UnsupportedStatementError

_SERIALS = {
    "SMALLSERIAL": "SMALLINT", "SERIAL2": "SMALLINT",
    "SERIAL": "INTEGER", "SERIAL4": "INTEGER",
    "BIGSERIAL": "BIGINT", "SERIAL8": "BIGINT",
}  # fmt: skip
IDENTITY_TYPES = ("SMALLINT", "INTEGER", "BIGINT")


@dataclasses.dataclass
class Declared:
    """A CREATE TABLE's columns (types from DuckDB) and what it declares about them."""

    columns: list[Column]
    keys: list[keys.Key]
    checks: list[list[str]]  # [name, DuckDB SQL]
    starts: dict[str, int]  # identity column -> its first value
    references: list[Reference]  # parent_columns empty: the parent's primary key


@dataclasses.dataclass
class _ColumnFacts:
    not_null: bool = False
    default: str | None = None
    identity: str = ""
    start: int = 1


def declared_table(table: str, schema: exp.Schema) -> Declared:
    """What ``CREATE TABLE table (schema)`` declares; errors in the user's terms."""
    definitions: list[str] = []
    facts: dict[str, _ColumnFacts] = {}
    found_keys: list[keys.Key] = []
    checks: list[list[str]] = []
    references: list[Reference] = []
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            name = item.name.lower()
            fact, sql, column_checks = _column(table, item)
            facts[name] = fact
            definitions.append(sql)
            found_keys.extend(keys.column_keys(item))
            checks.extend(column_checks)
            references.extend(_column_references(table, item))
            continue
        key = keys.table_key(item)
        if key is not None:
            found_keys.append(key)
            continue
        reference = table_reference(table, item)
        if reference is not None:
            references.append(reference)
            continue
        check = _table_check(table, item, len(checks))
        if check is None:
            raise UnsupportedStatementError(
                f"Veil enforces PRIMARY KEY, UNIQUE, CHECK and FOREIGN KEY table constraints, not "
                f"{item.sql(dialect='duckdb')}; declare the columns alone"
            )
        checks.append(check)
    scratch = local_duckdb()  # the user's definitions: closed to files
    body = ", ".join(definitions + [f"CHECK ({sql})" for _, sql in checks])
    try:
        scratch.execute(f"CREATE TABLE t ({body})")
        described = scratch.sql("DESCRIBE SELECT * FROM t").fetchall()
    except duckdb.Error as exc:
        raise QueryError(str(exc).split("\n")[0]) from None
    finally:
        scratch.close()
    columns = []
    for row in described:
        name = str(row[0]).lower()
        fact = facts[name]
        column = Column(name, normalize_type(str(row[1])), label=label_of(str(row[0])))
        if fact.identity and column.type not in IDENTITY_TYPES:
            raise QueryError(
                f"identity column {name} of {table} must be smallint, integer or bigint, "
                f"not {column.type}"
            )
        columns.append(
            dataclasses.replace(
                column, not_null=fact.not_null, default=fact.default, identity=fact.identity
            )
        )
    seen = [c.name for c in columns]
    if len(set(seen)) != len(seen):
        raise QueryError(f"column names must differ (case aside): {', '.join(seen)}")
    starts = {name: fact.start for name, fact in facts.items() if fact.identity}
    return Declared(columns, found_keys, checks, starts, references)


def _column_references(table: str, item: exp.ColumnDef) -> list[Reference]:
    """``col INT REFERENCES parent [(key)]``."""
    found = []
    for constraint in item.args.get("constraints") or []:
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.Reference):
            name = _constraint_name(constraint, f"{table}_{item.name.lower()}_fkey")
            found.append(_reference(table, name, [item.name.lower()], kind))
    return found


def table_reference(table: str, item: exp.Expr) -> Reference | None:
    """``[CONSTRAINT name] FOREIGN KEY (cols) REFERENCES parent [(key)]``; else None."""
    named = item if isinstance(item, exp.Constraint) else None
    if named is not None and len(named.expressions) == 1:
        item = named.expressions[0]
    if not isinstance(item, exp.ForeignKey):
        return None
    columns = [c.name.lower() for c in item.expressions]
    name = named.name if named is not None and named.name else f"{table}_{columns[0]}_fkey"
    return _reference(table, name, columns, item.args["reference"])


_ACTIONS = ("no action", "restrict", "cascade", "set null", "set default")


def _reference(table: str, name: str, columns: list[str], found: exp.Reference) -> Reference:
    actions = {"delete": "no action", "update": "no action"}
    for option in found.args.get("options") or []:
        spelled = " ".join(str(option).lower().split())
        if spelled == "match simple":
            continue
        event, _, action = spelled.removeprefix("on ").partition(" ")
        if event not in actions or action not in _ACTIONS:
            raise UnsupportedStatementError(
                f"foreign key {name} of {table}: Veil enforces MATCH SIMPLE and ON DELETE / "
                f"ON UPDATE NO ACTION, RESTRICT, CASCADE, SET NULL or SET DEFAULT, not "
                f"{spelled.upper()}"
            )
        actions[event] = action
    target = found.this
    parent = target.this if isinstance(target, exp.Schema) else target
    listed = [c.name.lower() for c in target.expressions] if isinstance(target, exp.Schema) else []
    if listed and len(listed) != len(columns):
        raise QueryError(
            f"foreign key {name} of {table}: {len(columns)} referencing columns, "
            f"{len(listed)} referenced"
        )
    return Reference(
        name, columns, parent.name.lower(), listed, actions["delete"], actions["update"]
    )


def _column(table: str, item: exp.ColumnDef) -> tuple[_ColumnFacts, str, list[list[str]]]:
    """One column's facts, its definition for the scratch table, and its CHECKs."""
    name = item.name.lower()
    fact = _ColumnFacts()
    kind = item.args.get("kind")
    if kind is None:
        raise QueryError(f"column {item.name} of {table} needs a type")
    type_sql = kind.sql(dialect="duckdb")
    if type_sql.upper() in _SERIALS:  # PostgreSQL's: an integer numbered by a counter
        fact.identity, fact.not_null, type_sql = "by default", True, _SERIALS[type_sql.upper()]
    sql = f"{exp.to_identifier(item.name).sql(dialect='duckdb')} {type_sql}"
    checks = []
    for constraint in item.args.get("constraints") or []:
        found = constraint.args.get("kind")
        if isinstance(found, exp.NotNullColumnConstraint):
            fact.not_null = fact.not_null or not found.args.get("allow_null")
        elif isinstance(
            found, exp.PrimaryKeyColumnConstraint | exp.UniqueColumnConstraint | exp.Reference
        ):
            continue  # veil.load.keys, _column_references
        elif isinstance(found, exp.DefaultColumnConstraint):
            fact.default = found.this.sql(dialect="duckdb")
            _no_subquery(found.this, f"the DEFAULT of column {name}")
            sql += f" DEFAULT {fact.default}"
        elif isinstance(found, exp.GeneratedAsIdentityColumnConstraint):
            fact.identity, fact.not_null = _identity(name, found, fact)
        elif isinstance(found, exp.CheckColumnConstraint):
            _no_subquery(found.this, f"the CHECK of column {name}")
            check = found.this.sql(dialect="duckdb")
            checks.append([_constraint_name(constraint, f"{table}_{name}_check"), check])
        else:
            raise UnsupportedStatementError(
                f"Veil enforces NOT NULL, DEFAULT, identity, CHECK, PRIMARY KEY, UNIQUE and "
                f"REFERENCES column constraints, not {constraint.sql(dialect='duckdb')} "
                f"(column {item.name}); declare the column without it"
            )
    if fact.identity and fact.default is not None:
        raise QueryError(f"both default and identity specified for column {name} of {table}")
    return fact, sql, checks


def _identity(
    name: str, found: exp.GeneratedAsIdentityColumnConstraint, fact: _ColumnFacts
) -> tuple[str, bool]:
    increment = found.args.get("increment")
    if increment is not None and int(increment.name) != 1:
        raise UnsupportedStatementError(
            f"identity column {name}: Veil's identity counters step by 1 (INCREMENT BY 1)"
        )
    others = {"minvalue", "maxvalue", "cycle", "expression"} & {
        k for k, v in found.args.items() if v is not None and v is not False
    }
    if others:
        raise UnsupportedStatementError(
            f"identity column {name}: Veil's identity counters take START WITH only, "
            f"not {', '.join(sorted(others)).upper()}"
        )
    start = found.args.get("start")
    if start is not None:
        fact.start = int(start.name)
    return ("always" if found.this else "by default"), True


def _table_check(table: str, item: exp.Expr, count: int) -> list[str] | None:
    """``CHECK (expr)`` or ``CONSTRAINT name CHECK (expr)`` as [name, sql]; else None."""
    named = item if isinstance(item, exp.Constraint) else None
    if named is not None and len(named.expressions) == 1:
        item = named.expressions[0]
    if not isinstance(item, exp.CheckColumnConstraint):
        return None
    _no_subquery(item.this, f"a CHECK of {table}")
    fallback = f"{table}_check" + (str(count) if count else "")
    name = named.name if named is not None and named.name else fallback
    return [name, item.this.sql(dialect="duckdb")]


def _constraint_name(constraint: exp.Expr, fallback: str) -> str:
    given = constraint.args.get("this")
    return given.name if isinstance(given, exp.Identifier) and given.name else fallback


def _no_subquery(tree: exp.Expr, what: str) -> None:
    if tree.find(exp.Subquery, exp.Select) is not None:
        raise QueryError(f"cannot use a subquery in {what}")
