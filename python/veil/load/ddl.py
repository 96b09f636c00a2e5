"""DDL through Veil: CREATE TABLE [AS SELECT], DROP TABLE, TRUNCATE, ALTER TABLE, CREATE INDEX.

A new table gets a physical design from its declared types: with no
workload known, every column is stored for fetching only (RND), so nothing
beyond sizes is revealed and every query still runs (the client filters).
``WITH (det = 'a, b', ope = 'c', search = 'd', sum = 'e')`` asks for server
equality, order, word search or sums on those columns (and reveals what
``docs/security.md`` says each scheme reveals)::

    CREATE TABLE visits (id BIGINT, day DATE, note VARCHAR) WITH (det = 'id', ope = 'day')

Changing a table's columns or emptying it re-encrypts it whole under a new
design that keeps every server operation the old one allowed (the rows are
read through Veil, then loaded as by ``veil load``). Like a load, each change
is atomic: the client directory's design names the new server tables only
once they are complete, so a failure leaves the table as it was. NOT NULL,
DEFAULT, identity columns and CHECK (``veil.load.declared``) and PRIMARY KEY /
UNIQUE (``veil.load.keys``) are kept in the design, through every rebuild,
and enforced on every write (``veil.session.constraints``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.design.model import (
    DET,
    JOIN,
    OPE,
    SEARCH,
    Column,
    PhysicalDesign,
    Reference,
    TableDesign,
    opaque_name,
)
from veil.designer.greedy import greedy_design
from veil.designer.onions import onion_design
from veil.encoding import normalize_type
from veil.exec.local_duckdb import local_duckdb, source_duckdb
from veil.keys.generations import writing
from veil.load import keys
from veil.load.declared import declared_table, table_reference
from veil.load.loader import available_schemes, load_into
from veil.load.progress import Reporter
from veil.load.sources import SourceTable, label_of
from veil.session import references
from veil.session.defaults import restart, restart_statement
from veil.session.row_ids import counter_table
from veil.session.table_locks import exclusive
from veil.sql.errors import QueryError, UnsupportedStatementError

if TYPE_CHECKING:
    from veil.session.result import Result
    from veil.session.session import Session

_OPTIONS = ("det", "ope", "search", "sum")
_SOURCE = "__veil_ddl_source"


log = logging.getLogger(__name__)
DDL = (exp.Create, exp.Drop, exp.TruncateTable, exp.Alter)


def run_ddl(session: Session, tree: exp.Expr) -> Result:
    """One DDL statement (a parsed, parameter-bound tree) on ``session``'s client directory."""
    # a re-key's final switch destroys the old key: not while this statement encrypts
    # under the keys its session reads next (``veil.keys.generations``)
    with writing(session.client.path):
        return _run_ddl(session, tree)


def _run_ddl(session: Session, tree: exp.Expr) -> Result:
    session.follow_design()
    session.plans.clear()
    kind = str(tree.args.get("kind") or "").upper()
    if isinstance(tree, exp.Create) and kind == "TABLE":
        return _create_table(session, tree)
    if isinstance(tree, exp.Create) and kind == "INDEX":
        return _create_index(session, tree)
    if isinstance(tree, exp.Drop) and kind == "TABLE":
        with rebuilding(session, tree.args.get("tables") or []):
            return _drop_tables(session, tree)
    if isinstance(tree, exp.TruncateTable):
        with rebuilding(session, tree.expressions):
            for table in tree.expressions:
                _unreferenced(session, _existing(session, table), "truncate")
                _rebuild(
                    session,
                    _existing(session, table).name,
                    f'SELECT * FROM "{table.name}" LIMIT 0',
                )
                if str(tree.args.get("identity") or "").upper() == "RESTART":
                    for column in _existing(session, table).columns:
                        if column.sequence:  # RESTART IDENTITY: numbered from 1 again
                            restart(session, column, 1)
        return _done(session)
    if isinstance(tree, exp.Alter) and kind == "TABLE":
        with rebuilding(session, [tree.this]):
            return _alter(session, tree)
    raise UnsupportedStatementError(
        f"Veil's DDL is CREATE TABLE [AS SELECT], DROP TABLE, TRUNCATE, ALTER TABLE "
        f"ADD/DROP/RENAME COLUMN and CREATE INDEX; not {tree.sql(dialect='duckdb')[:60]}"
    )


def _unreferenced(
    session: Session, table: TableDesign, verb: str, columns: set[str] | None = None
) -> None:
    """Refuse to ``verb`` ``table`` (or ``columns`` of it) while a foreign key names it."""
    for child, reference in references.referencing(session.design, table.name):
        if columns is None or columns & set(reference.parent_columns):
            raise QueryError(
                f"cannot {verb} {table.name}: foreign key {reference.name} of table "
                f"{child.name} references it"
            )


@contextlib.contextmanager
def rebuilding(session: Session, tables: list[exp.Table]) -> Iterator[None]:
    """Hold ``tables``' locks alone while they are rebuilt or dropped: writers wait
    (``veil.session.table_locks``); the design is read again once they are held."""
    with exclusive(session.client.path, [t.name.lower() for t in tables]):
        session.follow_design()
        yield


def _done(session: Session, rows: int = 0) -> Result:
    from veil.session.result import Result

    session.reload_design()
    return Result(pa.table({}), rows)


def _existing(session: Session, table: exp.Table) -> TableDesign:
    found = session.design.tables.get(table.name.lower())
    if found is None:
        raise QueryError(f"table {table.name} does not exist; SHOW TABLES lists the tables")
    return found


# -- CREATE TABLE -------------------------------------------------------------


def _create_table(session: Session, tree: exp.Create) -> Result:
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    name = target.name.lower()
    if name in session.design.tables:
        if tree.args.get("exists"):
            return _done(session)
        raise QueryError(f"table {target.name} already exists; DROP TABLE it first")
    options = _options(tree)
    query = tree.args.get("expression")
    checks: list[list[str]] = []
    named: list[Reference] = []
    if query is not None:
        data = session.query(query).table
        columns = _columns_of(session.catalog, query.sql(dialect="duckdb"))
        declared: list[keys.Key] = []
    else:
        assert isinstance(tree.this, exp.Schema)
        found = declared_table(name, tree.this)
        declared = keys.checked(found.keys, found.columns, name)
        columns = _with_counters(session, keys.with_keys(found.columns, declared), found.starts)
        checks = found.checks
        named = _references(session, name, columns, found.references, declared)
        data = _empty(columns)
    looked_up = _key_columns(declared) + [c for r in named for c in r.columns]
    options["det"] = list(dict.fromkeys(options.get("det", []) + looked_up))
    workload = _workload(name, columns, options)
    _load(session, name, columns, data, workload, checks=checks, named=named)
    keys.install(session, name, declared)
    return _done(session, len(data) if query is not None else 0)


def _references(
    session: Session,
    name: str,
    columns: list[Column],
    found: list[Reference],
    declared: list[keys.Key],
) -> list[Reference]:
    """The table's foreign keys, their columns and parents checked."""
    names = {c.name for c in columns}
    for reference in found:
        unknown = [c for c in reference.columns if c not in names]
        if unknown:
            raise QueryError(
                f"foreign key {reference.name}: column {unknown[0]} does not exist in {name}"
            )
    return references.resolved(session.design, name, found, [k.columns for k in declared])


def _with_counters(session: Session, columns: list[Column], starts: dict[str, int]) -> list[Column]:
    """The columns, each identity column with a fresh server counter at its first value.

    Made before the table: until the design names them they are garbage, never wrong.
    """
    made = []
    for column in columns:
        if column.identity:
            column = dataclasses.replace(column, sequence=opaque_name("q"))
            session.backend.bulk_load(column.sequence, counter_table(starts[column.name]))
        made.append(column)
    return made


def _key_columns(declared: list[keys.Key]) -> list[str]:
    return [c for key in declared for c in key.columns]


def _columns_of(connection: duckdb.DuckDBPyConnection, query: str) -> list[Column]:
    described = connection.sql(f"DESCRIBE {query}").fetchall()
    columns = [
        Column(str(row[0]).lower(), normalize_type(str(row[1])), label=label_of(str(row[0])))
        for row in described
    ]
    seen = [c.name for c in columns]
    if len(set(seen)) != len(seen):
        raise QueryError(f"column names must differ (case aside): {', '.join(seen)}")
    return columns


def _empty(columns: list[Column]) -> pa.Table:
    scratch = duckdb.connect()
    body = ", ".join(f'"{c.name}" {c.type}' for c in columns)
    scratch.execute(f"CREATE TABLE t ({body})")
    return scratch.sql("SELECT * FROM t").to_arrow_table()


# PostgreSQL's storage parameters: accepted and ignored (Veil lays out the server's tables)
_STORAGE_PARAMETERS = frozenset(
    {
        "fillfactor", "toast_tuple_target", "parallel_workers", "user_catalog_table",
        "vacuum_index_cleanup", "vacuum_truncate", "log_autovacuum_min_duration",
    }
)  # fmt: skip


def _options(tree: exp.Create) -> dict[str, list[str]]:
    """``WITH (det = 'a, b', ...)``: the columns each server operation should serve."""
    found: dict[str, list[str]] = {}
    properties = tree.args.get("properties")
    for prop in properties.expressions if properties is not None else []:
        key = prop.name.lower() if isinstance(prop, exp.Property) else ""
        value = prop.args.get("value") if isinstance(prop, exp.Property) else None
        if key in _STORAGE_PARAMETERS or key.startswith(("autovacuum_", "toast.")):
            log.info("table option %s ignored: the server's storage is Veil's", key)
            continue  # PostgreSQL's storage parameters (pgbench -i's fillfactor)
        if key not in _OPTIONS or not isinstance(value, exp.Literal):
            raise UnsupportedStatementError(
                f"unknown table option {prop.sql(dialect='duckdb')}; Veil's are "
                f"{', '.join(_OPTIONS)} = 'column, ...' (docs/sql.md#ddl)"
            )
        found[key] = [c.strip().lower() for c in value.name.split(",") if c.strip()]
    return found


def _workload(name: str, columns: list[Column], options: dict[str, list[str]]) -> list[str]:
    """Queries that make the greedy designer store what ``options`` ask for."""
    types = {c.name: c.type for c in columns}
    queries = []
    for option, wanted in options.items():
        for column in wanted:
            if column not in types:
                raise QueryError(f"{option} = '{column}': table {name} has no column {column}")
            queries.append(_query_for(option, name, f'"{column}"', types[column]))
    return queries


def _query_for(option: str, table: str, value: str, sql_type: str) -> str:
    constant = f"CAST(NULL AS {sql_type})"
    return {
        "det": f'SELECT * FROM "{table}" WHERE {value} = {constant}',
        "ope": f'SELECT * FROM "{table}" WHERE {value} < {constant}',
        "search": f"SELECT * FROM \"{table}\" WHERE {value} LIKE '%veil%'",
        "sum": f'SELECT SUM({value}) FROM "{table}"',
    }[option]


def _kept_workload(table: TableDesign, columns: list[Column], renamed: dict[str, str]) -> list[str]:
    """Queries asking for every server operation ``table`` allows on columns still there."""
    alive = {c.name for c in columns}
    option = {DET: "det", OPE: "ope", SEARCH: "search"}
    queries = []
    for enc in table.encryptions:
        source = renamed.get(enc.source, enc.source)
        if enc.scheme in option and source in alive:
            queries.append(_query_for(option[enc.scheme], table.name, f'"{source}"', enc.type))
    summed = (table.sums.sources if table.sums else []) + (table.hom.sources if table.hom else [])
    for expression in summed:
        tree: exp.Expr = exp.maybe_parse(expression, dialect="duckdb")
        for column in tree.find_all(exp.Column):
            column.set("this", exp.to_identifier(renamed.get(column.name, column.name)))
        if {c.name for c in tree.find_all(exp.Column)} <= alive:
            queries.append(f'SELECT SUM({tree.sql(dialect="duckdb")}) FROM "{table.name}"')
    return queries


def _load(
    session: Session,
    name: str,
    columns: list[Column],
    data: pa.Table,
    workload: list[str],
    *,
    onions: bool = False,
    checks: list[list[str]] | None = None,
    named: list[Reference] | None = None,
) -> None:
    master, client = session.master, session.client
    schema, policy = {name: columns}, client.policy()
    if onions:
        sums = _sums(session) == "ashe"
        fresh = onion_design(
            schema, available_schemes(), master.fingerprint(), policy, sums=sums,
            narrow_copies=session.backend.compresses_repeated_bytes,
        )  # fmt: skip
    else:
        # the workload stands for the table's options (WITH (ope = ...)): what they ask
        # for is stored, whether a plan of these stand-in queries reads it or not
        fresh = greedy_design(
            schema, workload, available_schemes(), master.fingerprint(), sums=_sums(session),
            policy=policy, prune=False,
        )  # fmt: skip
    fresh.tables[name].checks = checks or []
    fresh.tables[name].references = named or []
    source = source_duckdb()
    source.register(_SOURCE, data.rename_columns([c.name for c in columns]))
    load_into(
        source,
        [SourceTable(name, _SOURCE)],
        fresh,
        client,
        master,
        session.backend,
        Reporter(lambda _: None),
    )
    source.close()


def _sums(session: Session) -> str:
    """The design's way of summing (ASHE unless the data was loaded with Paillier)."""
    tables = session.design.tables.values()
    if any(t.hom is not None for t in tables):
        return "paillier"
    return "ashe"


# -- DROP, ALTER, INDEX ---------------------------------------------------------


def _drop_tables(session: Session, tree: exp.Drop) -> Result:
    with session.client.design_lock():  # others' changes meanwhile are kept
        doomed = _dropped(session, tree)
    for table in doomed:
        counters = [c.sequence for c in table.columns if c.sequence]
        for server_table in [table.server_name, *table.side_tables(), *counters]:
            session.backend.drop_table(server_table)
    return _done(session)


def _dropped(session: Session, tree: exp.Drop) -> list[TableDesign]:
    """Take the tables ``tree`` drops off the design, and save it."""
    design: PhysicalDesign = session.client.design(session.master)
    doomed = []
    for table in tree.args.get("tables") or []:
        found = design.tables.get(table.name.lower())
        if found is None:
            if tree.args.get("exists"):
                continue
            raise QueryError(f"table {table.name} does not exist; SHOW TABLES lists the tables")
        doomed.append(design.tables.pop(found.name))
    for child, reference in (
        pair for gone in doomed for pair in references.referencing(design, gone.name)
    ):
        raise QueryError(
            f"cannot drop table {reference.parent} because foreign key {reference.name} of "
            f"table {child.name} references it; drop {child.name} (or its key) first"
        )
    design.save(session.client.design_path)  # first: a crash then leaves only garbage
    return doomed


def _alter(session: Session, tree: exp.Alter) -> Result:
    """All of the statement's actions, then one rebuild: they apply together or not at all."""
    table = _existing(session, tree.this)
    selected = {c.name: f'"{c.name}"' for c in table.columns}  # new name -> SQL of its value
    columns = {c.name: c for c in table.columns}
    renamed: dict[str, str] = {}
    added: list[keys.Key] = []
    actions = tree.args.get("actions") or []
    if len(actions) == 1 and _restarts(actions[0]):  # DuckDB's reading of ALTER COLUMN c RESTART
        restart_statement(
            session, f'ALTER TABLE "{table.name}" ALTER COLUMN {actions[0].name} RESTART'
        )
        return _done(session)
    for action in actions:
        if isinstance(action, exp.AddConstraint):
            for item in action.expressions:
                key = keys.table_key(item)
                if key is None and table_reference(table.name, item) is not None:
                    if len(actions) > 1 or len(action.expressions) > 1:
                        raise UnsupportedStatementError(
                            "add a FOREIGN KEY in an ALTER TABLE statement of its own"
                        )
                    return _add_reference(session, table, table_reference(table.name, item))
                if key is None:
                    raise UnsupportedStatementError(
                        f"ALTER TABLE ... {action.sql(dialect='duckdb')}: Veil adds PRIMARY KEY, "
                        "UNIQUE and FOREIGN KEY constraints only"
                    )
                added.append(key)
        elif isinstance(action, exp.ColumnDef):
            column = _added_column(action, list(columns))
            selected[column.name] = f"CAST({_default(action)} AS {column.type})"
            if column.identity:
                column, selected[column.name] = _numbered(session, table, action)
            columns[column.name] = column
        elif isinstance(action, exp.Drop) and str(action.args.get("kind")).upper() == "COLUMN":
            for gone in (c.name.lower() for c in action.args.get("tables") or []):
                if gone not in columns:
                    raise QueryError(f"cannot drop column {gone} of {table.name}: no such column")
                _unreferenced(session, table, f"drop column {gone} of", {gone})
                del selected[gone], columns[gone]
        elif isinstance(action, exp.RenameColumn):
            old, new = action.this.name.lower(), action.args["to"].name.lower()
            if old not in columns or new in columns:
                raise QueryError(f"cannot rename {old} to {new} in {table.name}")
            _unreferenced(session, table, f"rename column {old} of", {old})
            selected = {new if k == old else k: v for k, v in selected.items()}
            columns = {new if k == old else k: v for k, v in columns.items()}
            columns[new] = dataclasses.replace(columns[new], name=new)
            renamed[next((o for o, n in renamed.items() if n == old), old)] = new
        else:
            raise UnsupportedStatementError(
                f"ALTER TABLE ... {action.sql(dialect='duckdb')}: Veil alters tables by "
                "ADD COLUMN, DROP COLUMN, RENAME COLUMN and ADD PRIMARY KEY / UNIQUE"
            )
    if not columns:
        raise QueryError(f"cannot drop every column of {table.name}: a table keeps at least one")
    if added:
        if renamed:
            raise UnsupportedStatementError("add keys and rename columns in two ALTER statements")
        added = keys.checked(
            _kept_keys(table, list(columns), renamed) + added, list(columns.values()), table.name
        )
        keys.check_existing(session, table.name, added)
    items = ", ".join(f'{value} AS "{name}"' for name, value in selected.items())
    _rebuild(
        session,
        table.name,
        f'SELECT {items} FROM "{table.name}"',
        list(columns.values()),
        renamed,
        added or None,
    )
    return _done(session)


def _restarts(action: exp.Expr) -> bool:
    dtype = action.args.get("dtype") if isinstance(action, exp.AlterColumn) else None
    return dtype is not None and str(dtype.args.get("kind") or "").upper() == "RESTART"


def _add_reference(session: Session, table: TableDesign, found: Reference | None) -> Result:
    """ALTER TABLE ... ADD FOREIGN KEY: checked against the rows already there, then kept."""
    assert found is not None
    [named] = _references(session, table.name, table.columns, [found], [])
    if named.parent == table.name:
        raise UnsupportedStatementError(
            "a FOREIGN KEY naming its own table is declared in CREATE TABLE"
        )
    listed = ", ".join(f'"{c}"' for c in named.columns)
    present = session.run(f'SELECT DISTINCT {listed} FROM "{table.name}"').table
    checking = dataclasses.replace(table, references=[named])
    references.parent_locks(session, checking, present)  # 23503 if a row names no parent
    with session.client.design_lock():
        design = session.client.design(session.master)
        design.tables[table.name].references.append(named)
        design.save(session.client.design_path)
    return _done(session)


def _added_column(action: exp.ColumnDef, names: list[str]) -> Column:
    """The column ADD COLUMN declares (its DEFAULT fills the existing rows)."""
    name = action.name.lower()
    if name in names:
        raise QueryError(f"column {name} already exists")
    kind = action.args.get("kind")
    if kind is None:
        raise QueryError(f"ADD COLUMN {name} needs a type")
    constraints = action.args.get("constraints") or []
    identity = any(
        isinstance(c.kind, exp.GeneratedAsIdentityColumnConstraint) for c in constraints
    ) or ("SERIAL" in kind.sql(dialect="duckdb").upper())
    allowed: tuple[type[exp.Expr], ...] = (
        exp.DefaultColumnConstraint,
        exp.GeneratedAsIdentityColumnConstraint,
        *([exp.NotNullColumnConstraint] if identity else []),
    )
    if any(not isinstance(c.kind, allowed) for c in constraints):
        raise UnsupportedStatementError(
            f"ADD COLUMN takes a type, a DEFAULT or an identity ({action.sql(dialect='duckdb')}); "
            "declare other constraints in CREATE TABLE"
        )
    if identity:
        return dataclasses.replace(Column(name, "BIGINT"), identity="by default")
    scratch = local_duckdb()  # the user's type: closed to files
    try:
        scratch.execute(
            f"CREATE TABLE t (x {kind.sql(dialect='duckdb')} DEFAULT {_default(action)})"
        )
    except duckdb.Error as exc:
        raise QueryError(str(exc).split("\n")[0]) from None
    default = _default(action)
    column = Column(name, normalize_type(str(scratch.sql("DESCRIBE t").fetchall()[0][1])))
    return dataclasses.replace(column, default=None if default == "NULL" else default)


def _numbered(session: Session, table: TableDesign, action: exp.ColumnDef) -> tuple[Column, str]:
    """ADD COLUMN c serial / ... GENERATED AS IDENTITY: the column, with a new counter
    past the existing rows, and the SQL numbering those rows from its start (as
    PostgreSQL does, in the order the rows are read)."""
    found = declared_table(table.name, exp.Schema(expressions=[action.copy()]))
    [column] = found.columns
    start = found.starts[column.name]
    count = int(session.run(f'SELECT count(*) FROM "{table.name}"').table.column(0)[0].as_py())
    column = dataclasses.replace(column, sequence=opaque_name("q"))
    session.backend.bulk_load(column.sequence, counter_table(start + count))
    return column, f"CAST(row_number() OVER () + {start - 1} AS {column.type})"


def _default(action: exp.ColumnDef) -> str:
    for constraint in action.args.get("constraints") or []:
        if isinstance(constraint.kind, exp.DefaultColumnConstraint):
            return constraint.kind.this.sql(dialect="duckdb")
    return "NULL"


def _rebuild(
    session: Session,
    name: str,
    query: str,
    columns: list[Column] | None = None,
    renamed: dict[str, str] | None = None,
    declared: list[keys.Key] | None = None,
) -> None:
    """Re-encrypt table ``name`` as ``query`` returns it, keeping its server operations
    and keys (``declared``: its keys from now on)."""
    table = session.design.tables[name]
    columns = columns if columns is not None else list(table.columns)
    if declared is None:
        declared = _kept_keys(table, [c.name for c in columns], renamed or {})
    columns = keys.with_keys(columns, declared)
    data = session.run(query).table
    onions = any(e.onion for e in table.encryptions)  # rebuilt as onions, every layer on again
    workload = _kept_workload(table, columns, renamed or {})
    if declared:
        workload += _workload(name, columns, {"det": _key_columns(declared)})
    alive = [c.name for c in columns]
    checks = _kept_checks(table, alive, renamed or {})
    named = [
        dataclasses.replace(r, columns=[(renamed or {}).get(c, c) for c in r.columns])
        for r in table.references
    ]
    named = [r for r in named if set(r.columns) <= set(alive)]
    _load(
        session, name, columns, data, workload,
        onions=onions and not declared, checks=checks, named=named,
    )  # fmt: skip
    keys.install(session, name, declared)
    counters = {c.sequence for c in columns}
    for gone in (c.sequence for c in table.columns if c.sequence and c.sequence not in counters):
        session.backend.drop_table(gone)  # a dropped identity column's counter


def _kept_checks(table: TableDesign, alive: list[str], renamed: dict[str, str]) -> list[list[str]]:
    """The table's CHECKs whose columns are all still there (renamed where they were)."""
    kept = []
    for name, sql in table.checks:
        tree: exp.Expr = exp.maybe_parse(sql, dialect="duckdb")
        for column in tree.find_all(exp.Column):
            column.set("this", exp.to_identifier(renamed.get(column.name, column.name)))
        if {c.name.lower() for c in tree.find_all(exp.Column)} <= set(alive):
            kept.append([name, tree.sql(dialect="duckdb")])
    return kept


def _kept_keys(table: TableDesign, alive: list[str], renamed: dict[str, str]) -> list[keys.Key]:
    """The table's keys whose columns are all still there (renamed where they were)."""
    kept = []
    for key in table.keys:
        columns = [renamed.get(c, c) for c in key]
        if all(c in alive for c in columns):
            kept.append(keys.Key(columns, primary=key == table.primary_key()))
    return kept


def reencrypt(session: Session, name: str) -> None:
    """Re-encrypt table ``name`` under fresh keys, within the current policy.

    An onion table gets every layer back on (queries peel again what they
    need); a workload-designed one keeps the operations its design allows
    that the policy still permits. The old server tables are dropped.
    """
    with writing(session.client.path), rebuilding(session, [exp.to_table(name)]):
        table = _existing(session, exp.to_table(name))
        _rebuild(session, table.name, f'SELECT * FROM "{table.name}"')
    session.reload_design()


def _create_index(session: Session, tree: exp.Create) -> Result:
    index = tree.this
    table = _existing(session, index.args["table"])
    params = index.args.get("params")
    keys = [o.this.name.lower() for o in (params.args.get("columns") or [])] if params else []
    server_columns, joins = [], []
    for key in keys:
        # an onion still wrapped: its index serves once a query peels it (kept through peels)
        enc = table.find(key, DET) or table.find(key, OPE) or table.onion_of(key, DET)
        join = table.onion_of(key, JOIN)
        if join is not None:
            joins.append(f'"{join.name}"')  # JOIN-ADJ: its own index, kept through re-keys
        if enc is None:
            raise QueryError(
                f"column {key} of {table.name} is stored for fetching only, so a server index "
                f"would not help; recreate the table WITH (det = '{key}') or (ope = '{key}')"
            )
        server_columns.append(f'"{enc.name}"')
    for columns in [server_columns, *([j] for j in joins if len(keys) == 1)]:
        session.backend.execute(
            f'CREATE INDEX "{opaque_name("i")}" ON "{table.server_name}" ({", ".join(columns)})'
        )
    return _done(session)
