"""The greedy designer: store every encryption the workload can use.

For each column it stores the encryptions the workload analysis asked for
(DET, OPE, SEARCH), if the crypto core offers them and the column's type
allows them, and makes sure every column stays fetchable: a column without a
DET encryption (which the client can decrypt) also gets RND. Equi-joined
columns of the same encoded type share one DET key scope (a key group) so the
server can join them.

A cost-based designer (MONOMI §6) will replace this; it produces the same
``PhysicalDesign`` and marks its choices with ``origin``.
"""

from __future__ import annotations

import re

import duckdb
import sqlglot
from sqlglot import exp

from veil.design.model import (
    DET,
    HOM,
    OPE,
    RND,
    SEARCH,
    Column,
    Encryption,
    HomGroup,
    PhysicalDesign,
    TableDesign,
    opaque_name,
)
from veil.design.workload import ColumnRef, WorkloadNeeds, analyse_workload
from veil.encoding import (
    DECIMAL_KIND,
    FLOAT_KIND,
    INT_KIND,
    STRING_KIND,
    EncodingError,
    SqlType,
    normalize_type,
)

DET_INT_BITS = 64


def greedy_design(
    schema: dict[str, list[Column]],
    workload: list[str],
    schemes: frozenset[str],
    key_fingerprint: str,
    *,
    hom: bool = True,
) -> PhysicalDesign:
    """The design serving ``workload``; ``hom=False`` leaves out the packed HOM groups."""
    plain = {t: {c.name: c.type for c in cols} for t, cols in schema.items()}
    needs = analyse_workload(workload, plain)
    groups = _key_groups(needs.joins, plain)
    ope_groups = _key_groups(needs.ope_pairs, plain)
    design = PhysicalDesign(key_fingerprint=key_fingerprint)
    for table, columns in schema.items():
        encryptions: list[Encryption] = []
        for column in columns:
            encryptions += _column_encryptions(table, column, needs, (groups, ope_groups), schemes)
        encryptions += _row_encryptions(table, columns, needs, schemes)
        design.tables[table] = TableDesign(
            name=table,
            server_name=opaque_name("t"),
            row_id=opaque_name("c"),
            columns=list(columns),
            encryptions=encryptions,
            hom=_hom_group(table, columns, needs) if hom and HOM in schemes else None,
        )
    return design


def table_design(table: str, columns: list[Column], schemes: frozenset[str]) -> TableDesign:
    """The design of a table outside any workload: fetchable columns only."""
    design = greedy_design({table: columns}, [], schemes, "")
    return design.tables[table]


def _column_encryptions(
    table: str,
    column: Column,
    needs: WorkloadNeeds,
    key_groups: tuple[dict[ColumnRef, str], dict[ColumnRef, str]],
    schemes: frozenset[str],
) -> list[Encryption]:
    groups, ope_groups = key_groups
    ref = (table, column.name)
    kind = SqlType(column.type).kind
    chosen: list[Encryption] = []

    def add(scheme: str, scope: str, **params: object) -> None:
        chosen.append(
            Encryption(opaque_name("c"), column.name, scheme, column.type, scope, dict(params))
        )

    wants_ope = ref in needs.ope and OPE in schemes and kind != STRING_KIND
    # OPE of the whole value already shows which values are equal, so a DET
    # copy reveals nothing more; it is what the client fetches (8 bytes, fast
    # to decrypt) instead of a 37-byte RND ciphertext.
    if (ref in needs.det or wants_ope) and DET in schemes:
        add(DET, f"det:{groups.get(ref, f'{table}.{column.name}')}")
    else:
        add(RND, f"rnd:{table}.{column.name}")
    if wants_ope:
        add(OPE, f"ope:{ope_groups.get(ref, f'{table}.{column.name}')}", bits=None)
    if ref in needs.search and SEARCH in schemes and kind == STRING_KIND:
        add(SEARCH, f"search:{table}.{column.name}")
    return chosen


def _row_encryptions(
    table: str, columns: list[Column], needs: WorkloadNeeds, schemes: frozenset[str]
) -> list[Encryption]:
    """Per-row precomputed expressions: DET / OPE for filters (MONOMI §5.1)."""
    wanted = [(DET, s) for t, s in needs.det_rows if t == table and DET in schemes]
    wanted += [(OPE, s) for t, s in needs.ope_rows if t == table and OPE in schemes]
    if not wanted:
        return []
    catalog = _catalog(table, columns)
    chosen = []
    for scheme, source in sorted(wanted):
        sql_type = _expression_type(catalog, table, source)
        if sql_type is None or (
            scheme != DET and SqlType(sql_type).kind in (STRING_KIND, FLOAT_KIND)
        ):
            continue  # OPE takes numbers and dates
        if source not in {c.name for c in columns}:
            params: dict[str, object] = {"bits": None} if scheme == OPE else {}
            scope = f"{scheme.lower()}:{table}.{source}"
            chosen.append(Encryption(opaque_name("c"), source, scheme, sql_type, scope, params))
    catalog.close()
    return chosen


def _hom_group(table: str, columns: list[Column], needs: WorkloadNeeds) -> HomGroup | None:
    """One packed HOM group of the table's summed exact-number expressions (MONOMI §5.3).

    Only expressions that are NULL exactly when one of their columns is NULL
    (arithmetic over columns and constants) are packed: the server counts an
    expression's non-NULL rows (for AVG and for telling an empty SUM from 0)
    from its columns' other encryptions.
    """
    catalog = _catalog(table, columns)
    sources: list[str] = []
    types: list[str] = []
    for t, source in sorted(needs.sums):
        sql_type = _expression_type(catalog, table, source) if t == table else None
        exact = sql_type is not None and SqlType(sql_type).kind in (INT_KIND, DECIMAL_KIND)
        if not exact or not null_follows_columns(source):
            continue  # Paillier sums exact numbers; the rest is summed by the client
        sources.append(source)
        types.append(str(sql_type))
    catalog.close()
    if not sources:
        return None
    return HomGroup(
        server_name=opaque_name("t"),
        slot_column=opaque_name("c"),
        sources=sources,
        types=types,
        key_scope=f"hom:{table}",
    )


def null_follows_columns(source: str) -> bool:
    """Is ``source`` arithmetic over columns and constants (NULL iff a column is NULL)?"""
    try:
        tree = sqlglot.parse_one(source, read="duckdb")
    except sqlglot.errors.ParseError:
        return False
    allowed: tuple[type[exp.Expr], ...] = (exp.Column, exp.Identifier, exp.Literal, exp.Paren)
    allowed += (exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Cast, exp.DataType)
    return all(isinstance(node, allowed) for node in tree.walk())


def summed_columns(source: str) -> list[str]:
    """The columns an expression reads (for the server's count of non-NULL rows)."""
    tree = sqlglot.parse_one(source, read="duckdb")
    return sorted({c.name.lower() for c in tree.find_all(exp.Column)})


def _catalog(table: str, columns: list[Column]) -> duckdb.DuckDBPyConnection:
    catalog = duckdb.connect()
    catalog.execute(f'CREATE TABLE "{table}" ({", ".join(f"{c.name} {c.type}" for c in columns)})')
    return catalog


def _expression_type(catalog: duckdb.DuckDBPyConnection, table: str, source: str) -> str | None:
    """The encodable type a server column stores ``source`` as, or None."""
    try:
        found = str(catalog.execute(f'DESCRIBE SELECT {source} FROM "{table}"').fetchall()[0][1])
    except duckdb.Error:
        return None
    match = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", found)
    if match:  # per-row products widen the precision; the values still fit 18 digits
        return f"DECIMAL({min(int(match.group(1)), 18)},{match.group(2)})"
    if found == "HUGEINT":
        return "BIGINT"
    try:
        return normalize_type(found)
    except EncodingError:
        return None


def _key_groups(
    pairs: set[tuple[ColumnRef, ColumnRef]], schema: dict[str, dict[str, str]]
) -> dict[ColumnRef, str]:
    """Union-find over compared column pairs whose encodings are comparable."""
    parent: dict[ColumnRef, ColumnRef] = {}

    def find(ref: ColumnRef) -> ColumnRef:
        while parent.get(ref, ref) != ref:
            ref = parent[ref]
        return ref

    for left, right in sorted(pairs):
        if _encoding_of(left, schema) == _encoding_of(right, schema):
            a, b = sorted((find(left), find(right)))
            parent[b] = a
    return {ref: "{}.{}".format(*find(ref)) for ref in parent} | {
        root: "{}.{}".format(*root) for root in map(find, list(parent))
    }


def _encoding_of(ref: ColumnRef, schema: dict[str, dict[str, str]]) -> tuple[str, int]:
    sql_type = SqlType(schema[ref[0]][ref[1]])
    return (sql_type.kind, sql_type.scale)
