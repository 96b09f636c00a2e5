"""``veil explain``: the split plan in words, with what each step reveals."""

from __future__ import annotations

from sqlglot import exp

from veil.backends import render
from veil.design.model import BLOCKS, DET, HOM, JOIN, OPE, RND, SEARCH
from veil.session.session import Session
from veil.sql.errors import UnsupportedStatementError
from veil.sql.plan import HOM_MASK, HOM_PRODUCT, JoinedFetch, Scan, SplitPlan
from veil.sql.remote import joined_statement, numbered, scan_statement

REVEALS = {
    RND: "nothing but lengths and NULLs",
    BLOCKS: "which blocks of rows are read (a second statement fetches them whole)",
    DET: "which rows hold equal values",
    OPE: "the order of values (and some high bits)",
    HOM: "nothing (sums are computed blind)",
    SEARCH: "which rows contain a searched word, once searched",
    JOIN: "which rows hold equal values, in every column of its join class",
    "NULL": "which rows are NULL (visible at rest anyway)",
    "count": "a row count (computed by the server)",
    "row id": "the order rows were written in (sequential ids)",
}


def explain(session: Session, sql: str, params: list[object] | None = None) -> str:
    """The split plan of ``sql`` in words; any failure is a ``VeilError``."""
    return session.guarded(sql, lambda: _explain(session, sql, params))


def _explain(session: Session, sql: str, params: list[object] | None) -> str:
    tree = checked_query(session, sql, params)
    return explain_plan(session, session.plan(tree, peel=False))  # explain changes nothing


def checked_query(session: Session, sql: str, params: list[object] | None) -> exp.Query:
    """``sql`` with its parameters bound, checked against the schema; only queries."""
    tree = session.admitted(sql, params)
    if not isinstance(tree, exp.Query):
        raise UnsupportedStatementError("veil explain shows queries (SELECT, WITH, set operations)")
    session.describe(tree)
    return tree


def explain_plan(session: Session, plan: SplitPlan) -> str:
    """``plan`` in words: its peels, layers, RemoteSQL steps, local plan and server bytes."""
    lines = [f"server: {session.backend.url} ({session.backend.dialect})", ""]
    if plan.peels:
        lines.append("first peels onion layers (the server learns what each reveals, for good):")
        lines += [f"  {peel}" for peel in plan.peels]
        lines.append("")
    if plan.fallback is not None:
        lines.append(f"the split planner gave up ({plan.fallback}): the client runs the query")
        lines.append("")
    if plan.choice:
        lines.append("plan chosen by cost (estimates; * = chosen, `VEIL_PLANNER=rules` to skip):")
        lines += [f"  {line}" for line in plan.choice]
        lines.append("")
    lines += _layers(plan.scans)
    number = 0
    shared = [s for s in plan.scans if s.same_rows is not None]
    for scan in plan.scans:
        if scan.joined is not None and scan is not scan.joined.scans[0]:
            continue  # explained with the join's first scan
        if scan.same_rows is not None:
            continue  # listed after the statements
        number += 1
        if scan.joined is not None:
            lines += _explain_join(number, scan.joined, session.backend.dialect)
        else:
            lines += _explain_scan(number, scan, session.backend.dialect)
    for scan, first in [(s, s.same_rows) for s in shared if s.same_rows is not None]:
        lines.append(
            f"{scan.table.name} as {scan.alias} -> {scan.local_name}: the rows fetched for "
            f"{first.alias} -> {first.local_name} (no statement of its own)"
        )
    if shared:
        lines.append("")
    lines += [
        "local plan (runs on the client, in DuckDB):",
        "  " + plan.local.sql(dialect="duckdb", pretty=True).replace("\n", "\n  "),
    ]
    if not plan.pushdown:
        lines.append("  (the query could not be analysed: all of it runs on the client)")
    if plan.late_outputs:
        names = ", ".join(f"{o.scan.alias}.{o.column}" for o in plan.late_outputs)
        lines.append(f"  then, in the result's rows only: {names} decrypted")
    lines += ["", _stored_bytes(session, plan.scans)]
    return "\n".join(lines)


def _layers(scans: list[Scan]) -> list[str]:
    """The onion layers the server holds now, of the columns the query reads."""
    found: dict[str, list[str]] = {}
    for scan in scans:
        for column in sorted(scan.columns):
            onions = [e for e in scan.table.encryptions_of(column) if e.onion]
            states = [f"{e.scheme}{' under RND' if e.outer else ''}" for e in onions]
            if states:
                found[f"{scan.table.name}.{column}"] = states
    if not found:
        return []
    lines = ["onion layers on the server now:"]
    lines += [f"  {name}: {', '.join(states)}" for name, states in sorted(found.items())]
    return [*lines, ""]


def _stored_bytes(session: Session, scans: list[Scan]) -> str:
    """Every byte the server stores for the tables read, HOM side tables included."""
    backend = session.backend
    stored = {name: backend.table_bytes(name) for name in backend.table_names()}
    read: set[str] = set()
    for scan in scans:
        table = scan.table
        read.update(n for n in (table.server_name, table.blocks_table) if n)
        if table.hom is not None:
            read.add(table.hom.server_name)
    used = sum(stored.get(name, 0) for name in read)
    return (
        f"server storage: {_mb(used)} in the tables this query reads (with their side "
        f"tables), {_mb(sum(stored.values()))} in all"
    )


def _mb(size: int) -> str:
    return f"{size / 2**20:,.1f} MB"


def _parameters(values: list[object]) -> list[str]:
    params = ", ".join(f"${i} = {_described(v)}" for i, v in enumerate(values, 1))
    return [f"  parameters: {params}"] if params else []


def _described(value: object) -> str:
    if isinstance(value, list):
        return f"{len(value):,} ciphertexts (the bind filter's keys, computed at run time)"
    if isinstance(value, bytes) and len(value) >= 256:
        return "public key (n^2)"
    return "ciphertext"


def _explain_join(number: int, fetch: JoinedFetch, dialect: str) -> list[str]:
    parts = ", ".join(f"{s.table.name} as {s.alias} -> {s.local_name}" for s in fetch.scans)
    lines = [f"RemoteSQL {number}: server join of {parts}"]
    statement, values = numbered(joined_statement(fetch))
    lines.append("  " + render(statement, dialect))
    lines += _parameters(values)
    joins = " AND ".join(e.original for e in fetch.edges)
    lines.append(
        f"  server join on {joins}  [DET: which rows of the joined tables hold equal keys]"
    )
    for scan in fetch.scans:
        lines += _explain_scan_parts(scan)
    groups = fetch.groups
    if groups is not None and groups.summed is not None and groups.summed.table.sums is not None:
        sources = groups.summed.table.sums.sources
        summed = ", ".join(sources[i] for i in groups.ashe_sources())
        lines.append(
            f"  server ASHE over the join: per group and block of 64 {groups.summed.alias} row "
            f"ids, the SUM of the ciphertexts of {summed}, the mask of the ids summed and the "
            "joined rows; the client removes the pads and checks that no id was summed twice  "
            f"{_ASHE_REVEALS}"
        )
    lines += _counted(fetch.counted)
    lines.append("")
    return lines


_ASHE_REVEALS = "[ASHE: nothing of the values; row ids: which rows (load order) each group holds]"


def _counted(counted: bool) -> list[str]:
    if not counted:
        return []
    return [
        "  each distinct row once, with its count; the client repeats it that many times"
        "  [nothing new: grouping equal DET / OPE ciphertexts]"
    ]


def _explain_scan(number: int, scan: Scan, dialect: str) -> list[str]:
    lines = [f"RemoteSQL {number}: table {scan.table.name} as {scan.alias} -> {scan.local_name}"]
    statement, values = numbered(scan_statement(scan))
    lines.append("  " + render(statement, dialect))
    lines += _parameters(values)
    lines += _explain_scan_parts(scan)
    lines += _counted(scan.counted)
    lines.append("")
    return lines


def _explain_scan_parts(scan: Scan) -> list[str]:
    lines = []
    prefix = f"{scan.alias}." if scan.joined is not None else ""
    ashe_parts = scan.aggregation is not None and scan.aggregation.id_bit is not None
    for column, enc in scan.fetched():
        if column in (HOM_MASK, HOM_PRODUCT) or (
            ashe_parts and enc is None and (not column.startswith("__veil_agg_"))
        ):
            continue  # the sums' parts: the ASHE / HOM line below says what they reveal
        scheme = enc.scheme if enc else "count" if column.startswith("__veil_agg_") else "row id"
        if enc is not None and enc.outer is not None:
            scheme = RND  # a wrapped onion: the server sees RND ciphertexts
        kept = " (kept encrypted on the client)" if column in scan.ciphertext else ""
        lines.append(
            f"  fetch {prefix}{column} via {scheme}{kept}: reveals {REVEALS.get(scheme, 'nothing')}"
        )
    for late in scan.late:
        lines.append(
            f"  then on the client, over the ciphertexts of {late.column}: "
            f"{late.query.sql(dialect='duckdb')}; "
            f"{'its rows, key decrypted' if late.groups else 'its distinct keys decrypted'}"
            f" -> {late.local_name}"
        )
    for predicate in scan.predicates:
        reveals = "; ".join(f"{s}: {REVEALS[s]}" for s in predicate.schemes)
        lines.append(f"  server filter {predicate.original}  [{reveals}; and which rows match]")
    for bind in scan.binds:
        if bind.target_enc.scheme == "OPE":
            lines.append(
                f"  server filter {scan.alias}.{bind.target_enc.source} BETWEEN (the OPE of the "
                f"lowest and highest key of {bind.description}, computed by the client after "
                f"fetching {', '.join(s.alias for s in bind.sources)})  [OPE: that range]"
            )
            continue
        lines.append(
            f"  server filter {scan.alias}.{bind.target_enc.source} IN (the DET keys of "
            f"{bind.description}, computed by the client after fetching "
            f"{', '.join(s.alias for s in bind.sources)})  [DET: which keys those keep]"
        )
    if scan.reduction is not None:
        others = ", ".join(s.alias for s in scan.reduction.scans if s is not scan)
        joins = " AND ".join(e.original for e in scan.reduction.edges)
        lines.append(
            f"  server semi-join with {others} on {joins}  [DET: which rows of the joined "
            "tables hold equal keys]"
        )
    if scan.aggregation is not None:
        keys = ", ".join(scan.aggregation.keys) or "(no keys)"
        kinds = ", ".join(item.kind for item in scan.aggregation.items)
        lines.append(
            f"  server GROUP BY {keys} computing {kinds}  [DET: group sizes; OPE: the extremes' order; HOM: nothing]"
        )
    if scan.aggregation is not None and scan.aggregation.id_bit is not None:
        ashe = scan.table.sums
        assert ashe is not None
        summed = ", ".join(ashe.sources[i] for i in scan.aggregation.ashe_sources())
        lines.append(
            f"  server ASHE: per group and block of 64 row ids, the SUM of the ciphertexts of "
            f"{summed} and the mask of the ids summed; the client removes the pads  {_ASHE_REVEALS}"
        )
    if scan.aggregation is not None and scan.aggregation.hom_product is not None:
        group = scan.table.hom
        assert group is not None
        sums = ", ".join(
            group.sources[i.hom_index or 0] for i in scan.aggregation.items if i.kind == "SUM"
        )
        lines.append(
            f"  server HOM: per group, pack mask and chunk of {2**group.summand_bits:,} packs, "
            f"the product of the packs ({group.rows_per_ciphertext} rows each) holding {sums}; "
            "the client decrypts each product once  "
            "[HOM: nothing; slots: which packs (load order) each group's rows lie in]"
        )
    return lines
