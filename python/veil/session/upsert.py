"""INSERT ... ON CONFLICT (and DuckDB's INSERT OR REPLACE / OR IGNORE): which rows go where.

The server cannot compare a new row's key with the stored ones, but it holds
the key columns under DET with a unique index (``veil.load.keys``), so the
client asks it for the stored rows whose keys equal the new rows' (a Veil
query, equality pushed down), then decides here, in its local DuckDB:

- a new row whose arbiter key no stored row has is inserted;
- otherwise DO NOTHING drops it, and DO UPDATE rewrites the stored row with
  the SET expressions (``excluded`` is the new row), if the WHERE clause holds.

``veil.session.dml`` then writes the updated and inserted rows in one
transaction. Another client may insert one of the keys in between: the
unique index then refuses the write, nothing is written, and the statement
runs again, as a serialization failure (``veil.session.dml._again``).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from veil.design.model import TableDesign
from veil.session.defaults import default_value, is_default
from veil.sql.errors import QueryError, UnsupportedStatementError
from veil.sql.parse import literal

_NEW, _OLD = "__veil_new_rows", "__veil_stored_rows"
_ORDINAL, ROW_ID = "__veil_n", "__veil_row_id"
_CHUNK = 500  # key values per query for the stored rows


@dataclass
class Resolved:
    """The rows an upsert writes: the rewritten stored ones (``row_ids``) first, then new ones."""

    rows: pa.Table
    row_ids: pa.Array


def alternative_as_conflict(table: TableDesign, tree: exp.Insert) -> exp.Insert:
    """``INSERT OR REPLACE`` / ``OR IGNORE`` as the ON CONFLICT clause it means."""
    alternative = str(tree.args.get("alternative") or "").upper()
    if not alternative:
        return tree
    rewritten = tree.copy()
    rewritten.set("alternative", None)
    if alternative == "IGNORE":
        rewritten.set("conflict", exp.OnConflict(action=exp.var("DO NOTHING")))
        return rewritten
    if alternative != "REPLACE":
        raise UnsupportedStatementError(f"INSERT OR {alternative} is not supported")
    key = table.primary_key() or (table.keys[0] if len(table.keys) == 1 else None)
    if key is None:
        raise QueryError(
            f"INSERT OR REPLACE needs a primary key on {table.name}, or a single UNIQUE one"
        )
    others = [c.name for c in table.columns if c.name not in key]
    sets = [exp.EQ(this=exp.column(c), expression=exp.column(c, table="excluded")) for c in others]
    rewritten.set(
        "conflict",
        exp.OnConflict(
            action=exp.var("DO UPDATE" if sets else "DO NOTHING"),
            conflict_keys=[exp.column(c) for c in key],
            expressions=sets,
        ),
    )
    return rewritten


def arbiters(table: TableDesign, tree: exp.Insert) -> list[list[str]]:
    """The keys whose repetition is a conflict (PostgreSQL's arbiter indexes)."""
    conflict = tree.args["conflict"]
    updating = _updates(conflict)
    if conflict.args.get("constraint") is not None:
        raise UnsupportedStatementError(
            "ON CONFLICT ON CONSTRAINT is not supported; name the key's columns: ON CONFLICT (a, b)"
        )
    named = [
        k.this if isinstance(k, exp.Ordered) else k
        for k in conflict.args.get("conflict_keys") or []
    ]
    if not named:
        if updating:
            raise QueryError(
                "ON CONFLICT DO UPDATE requires the conflicting key's columns: ON CONFLICT (a) "
                "DO UPDATE ..."
            )
        return [list(k) for k in table.keys]
    wanted = {n.name.lower() for n in named}
    found = [list(k) for k in table.keys if set(k) == wanted]
    if not found:
        raise QueryError(
            f"there is no unique or primary key constraint on {table.name} "
            f"({', '.join(sorted(wanted))}) matching the ON CONFLICT specification"
        )
    return found


def _updates(conflict: exp.OnConflict) -> bool:
    action = conflict.args.get("action")
    return action is not None and "UPDATE" in action.name.upper()


def key_filters(keys: list[list[str]], rows: pa.Table) -> list[exp.Expr]:
    """WHERE clauses that find the stored rows sharing a key with ``rows`` (in chunks).

    The keys are made distinct and rid of nulls by Arrow, whole columns at once; a
    single-column key asks ``col IN (...)``, a composite one an OR of equalities.
    """
    wanted: list[exp.Expr] = []
    for key in keys:
        present = _distinct(rows.select(key))
        if len(key) == 1:
            values = [literal(v) for v in present.column(0).to_pylist()]
            column = exp.column(key[0])
            wanted.extend(
                column.copy().isin(*values[i : i + _CHUNK]) for i in range(0, len(values), _CHUNK)
            )
            continue
        columns = [[literal(v) for v in present.column(c).to_pylist()] for c in key]
        ands = [
            exp.and_(
                *(exp.EQ(this=exp.column(c), expression=v) for c, v in zip(key, row, strict=True))
            )
            for row in zip(*columns, strict=True)
        ]
        wanted.extend(exp.or_(*ands[i : i + _CHUNK]) for i in range(0, len(ands), _CHUNK))
    return wanted


def _distinct(rows: pa.Table) -> pa.Table:
    """The distinct rows of ``rows`` with no null (a key with a null never conflicts)."""
    present = rows.drop_null()
    if present.num_columns == 1:
        return pa.table({rows.column_names[0]: pc.unique(present.column(0).combine_chunks())})
    return present.group_by(present.column_names, use_threads=False).aggregate([])


def resolve(
    local: duckdb.DuckDBPyConnection,
    table: TableDesign,
    tree: exp.Insert,
    keys: list[list[str]],
    new: pa.Table,
    stored: pa.Table,
) -> Resolved:
    """What ``tree`` writes, given its ``new`` rows and the ``stored`` rows sharing their keys
    (the table's columns, then the row id)."""
    labels = [c.label or c.name for c in table.columns]
    quoted = {
        c.name: exp.to_identifier(label, quoted=True)
        for c, label in zip(table.columns, labels, strict=True)
    }
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    alias = target.alias_or_name
    numbered = new.rename_columns(labels).append_column(
        _ORDINAL, pa.array(range(len(new)), pa.int64())
    )
    local.register(_NEW, numbered)
    local.register(_OLD, stored.rename_columns([*labels, ROW_ID]))
    try:
        inserted = local.sql(_unmatched(keys, quoted)).to_arrow_table()
        if _updates(tree.args["conflict"]):
            if local.execute(_repeats(keys[0], quoted)).fetchall()[0][0]:
                raise QueryError(
                    "ON CONFLICT DO UPDATE cannot change a row twice: two of the rows inserted "
                    f"have the same ({', '.join(keys[0])}); give each key once"
                )
            updated = local.sql(_updated(table, tree, keys[0], quoted, alias)).to_arrow_table()
        else:
            updated = pa.table({**{n: [] for n in labels}, ROW_ID: []})
    except duckdb.Error as exc:
        raise QueryError(f"ON CONFLICT: {str(exc).splitlines()[0]}") from None
    finally:
        local.unregister(_NEW)
        local.unregister(_OLD)
    names = [c.name for c in table.columns]
    kept = updated.select(list(range(len(labels)))).rename_columns(names)
    rows = pa.concat_tables(
        [kept.cast(new.schema), inserted.rename_columns(names).cast(new.schema)]
    )
    return Resolved(rows, updated.column(ROW_ID).combine_chunks().cast(pa.int64()))


def _match(key: list[str], quoted: dict[str, exp.Identifier], old: str, new: str) -> str:
    return " AND ".join(
        f'"{old}".{quoted[c].sql(dialect="duckdb")} = "{new}".{quoted[c].sql(dialect="duckdb")}'
        for c in key
    )


def _unmatched(keys: list[list[str]], quoted: dict[str, exp.Identifier]) -> str:
    """The new rows no stored row, nor an earlier new row, shares an arbiter key with."""
    stored = " OR ".join(f"({_match(k, quoted, 'o', 'n')})" for k in keys) or "FALSE"
    earlier = " OR ".join(f"({_match(k, quoted, 'e', 'n')})" for k in keys) or "FALSE"
    return (
        f'SELECT n.* EXCLUDE ("{_ORDINAL}") FROM "{_NEW}" AS n WHERE NOT EXISTS '
        f'(SELECT 1 FROM "{_OLD}" AS o WHERE {stored}) AND NOT EXISTS (SELECT 1 FROM '
        f'"{_NEW}" AS e WHERE e."{_ORDINAL}" < n."{_ORDINAL}" AND ({earlier})) '
        f'ORDER BY n."{_ORDINAL}"'
    )


def _repeats(key: list[str], quoted: dict[str, exp.Identifier]) -> str:
    """Whether two new rows share ``key`` (DO UPDATE would then change a row twice)."""
    return (
        f'SELECT count(*) FROM "{_NEW}" AS e JOIN "{_NEW}" AS n ON {_match(key, quoted, "e", "n")} '
        f'AND e."{_ORDINAL}" < n."{_ORDINAL}"'
    )


def _updated(
    table: TableDesign,
    tree: exp.Insert,
    key: list[str],
    quoted: dict[str, exp.Identifier],
    alias: str,
) -> str:
    """The stored rows DO UPDATE rewrites, as they become, with their row ids."""
    conflict = tree.args["conflict"]
    assigned: dict[str, exp.Expr] = {}
    for assignment in conflict.expressions:
        name = assignment.this.name.lower()
        column = table.column(name)
        if column is None:
            raise QueryError(f"table {table.name!r} has no column {name!r}")
        value = assignment.expression
        assigned[name] = default_value(table, column) if is_default(value) else value
    projections = []
    for column in table.columns:
        if column.name in assigned:
            value = exp.cast(_on_target(assigned[column.name], alias), column.type)
        else:
            value = exp.column(
                quoted[column.name].copy(), table=exp.to_identifier(alias, quoted=True)
            )
        projections.append(exp.alias_(value, quoted[column.name].copy()).sql(dialect="duckdb"))
    where = conflict.args.get("where")
    condition = f" WHERE {_on_target(where.this, alias).sql(dialect='duckdb')}" if where else ""
    return (
        f'SELECT {", ".join(projections)}, "{alias}"."{ROW_ID}" FROM "{_NEW}" AS excluded '
        f'JOIN "{_OLD}" AS "{alias}" ON {_match(key, quoted, alias, "excluded")}{condition} '
        f'ORDER BY excluded."{_ORDINAL}"'
    )


def _on_target(tree: exp.Expr, alias: str) -> exp.Expr:
    """``tree`` with its unqualified columns read from the stored row, as PostgreSQL reads them."""
    qualified = tree.copy()
    for column in qualified.find_all(exp.Column):
        if not column.table:
            column.set("table", exp.to_identifier(alias, quoted=True))
    return qualified
