"""The cost-based designer's candidates: every encryption a workload could use, with sizes.

MONOMI's designer (§6.2) starts from ℰ, every (expression, scheme) pair some
query could run on the server. Here ℰ is the greedy design of the workload
(``greedy_design``: DET, OPE and SEARCH of columns, DET / OPE of per-row
precomputed expressions, ASHE words of summed expressions), taken apart:

- optional: each DET, OPE and SEARCH encryption, and each summed expression's
  ASHE words (``ASHE table.source``);
- a column's fetch form: a column with a DET candidate is fetched from it, or,
  without it, from RND (``RND table.column``, optional, but one of the two is
  stored); the ILP picks;
- fixed: the RND of columns with no DET candidate, BLOCKS of columns no query
  reads, the row ids. Every plan may read them, so the fetch-everything plan
  is always possible.

Where the client directory already stores an encryption of the same source and
scheme, the candidate takes its server name and the load's statistics (distinct
counts, quantiles, mean lengths), so the planner estimates rows as it would at
run time and the server's optimizer can explain statements over it.

Sizes are bytes on the server, from the statistics: rows times each stored
form's width (8 bytes for width-preserving numbers, a text's mean length plus
17 for DET / RND, 16 bytes per word for SEARCH, the bit-packed words of ASHE).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

from veil.design.domains import rnd_bits
from veil.design.fresh import DATA_STATISTICS, STORED_FORMS
from veil.design.model import (
    BLOCKS,
    DET,
    OPE,
    RND,
    RND_BITS,
    SEARCH,
    AsheSums,
    Column,
    Encryption,
    PhysicalDesign,
    TableDesign,
)
from veil.design.policy import NEEDS, Policy
from veil.encoding import SqlType
from veil.sql.widths import TEXT_BYTES

ASHE = "ASHE"
_OPTIONAL = (DET, OPE, SEARCH)
_CIPHERTEXT_BYTES = 17  # version byte, SIV or nonce, tag: a text's DET / RND expansion
_SEARCH_WORD_BYTES = 16
_MEAN_WORD_BYTES = 6.0  # a word and its separator, in English text
_ROW_ID_BYTES = 8
_ROW_ID = "row id"  # ``StoredBytes``' scheme for a table's row id column
# plaintext bytes per value by type (DuckDB's storage widths); text: its mean length
_PLAIN_BYTES = {
    "TINYINT": 1,
    "SMALLINT": 2,
    "INTEGER": 4,
    "DATE": 4,
    "FLOAT": 4,
    "REAL": 4,
    "BOOLEAN": 1,
    "HUGEINT": 16,
}


@dataclass(frozen=True)
class Candidate:
    """One encryption the designer may store: ``key`` names it in plans and in the ILP."""

    key: str
    table: str
    source: str
    scheme: str  # DET, OPE, SEARCH, ASHE, or RND (a column's fetch form beside its DET)
    bytes: float


@dataclass
class CandidateSet:
    """ℰ for one workload and schema: the candidates and the design that holds them all."""

    design: PhysicalDesign  # every candidate and fixed encryption, named as the server does
    candidates: dict[str, Candidate]
    fixed_bytes: float  # what every design stores: row ids, fixed fetch forms, BLOCKS
    plain_bytes: float  # the plaintext database, the unit of the space budget
    on_disk: bool = False  # sizes measured on the server's disk, not values' widths
    fetch_pairs: dict[str, str] = field(default_factory=dict)  # DET key -> its RND key
    by_name: dict[str, str] = field(default_factory=dict)  # server column -> candidate key
    table_bytes: dict[str, float] = field(default_factory=dict)  # a table with every candidate

    def restrict(self, enabled: set[str]) -> PhysicalDesign:
        """The design storing only ``enabled`` candidates (plus the fixed encryptions).

        A column whose DET is left out is fetched from its RND; for costing, that
        RND keeps the DET's server name, so the server's optimizer can still explain
        statements reading it (a statement's estimate does not depend on the scheme).
        """
        restricted = PhysicalDesign(self.design.key_fingerprint)
        for name, table in self.design.tables.items():
            kept = [e for e in table.encryptions if self._kept(table.name, e, enabled)]
            kept += [
                self._fetch_form(table.name, e)
                for e in table.encryptions
                if self._needs_fetch_form(table.name, e, enabled)
            ]
            sums = _ashe_subset(
                table.sums, [s for s in _sources(table.sums) if _ashe_key(name, s) in enabled]
            )
            restricted.tables[name] = replace(table, encryptions=kept, sums=sums)
        return restricted

    def required(self, names: set[str], enabled: set[str]) -> frozenset[str]:
        """The candidates a plan under ``restrict(enabled)`` needs, from the server columns it reads."""
        keys = {self.by_name[n] for n in names if n in self.by_name}
        return frozenset(k for k in keys if k in enabled)

    def _kept(self, table: str, enc: Encryption, enabled: set[str]) -> bool:
        key = candidate_key(table, enc.source, enc.scheme)
        return key not in self.candidates or key in enabled

    def _needs_fetch_form(self, table: str, enc: Encryption, enabled: set[str]) -> bool:
        key = candidate_key(table, enc.source, enc.scheme)
        return key in self.fetch_pairs and key not in enabled

    @staticmethod
    def _fetch_form(table: str, det: Encryption) -> Encryption:
        params = {k: v for k, v in det.params.items() if k in ("mean_bytes", "column")}
        bits = rnd_bits(det.sql_type)
        if bits is not None:
            params[RND_BITS] = bits
        scope = f"rnd:{table}.{det.source}"
        return Encryption(det.name, det.source, RND, det.type, scope, params, origin="ilp")


def candidate_key(table: str, source: str, scheme: str) -> str:
    return f"{scheme} {table}.{source}"


def _ashe_key(table: str, source: str) -> str:
    return candidate_key(table, source, ASHE)


StoredBytes = dict[tuple[str, str], float]  # (server column, scheme) -> its bytes on disk


def collect_candidates(
    greedy: PhysicalDesign,
    loaded: PhysicalDesign | None,
    policy: Policy,
    stored_bytes: StoredBytes | None = None,
) -> CandidateSet:
    """ℰ from the workload's greedy design, named and measured as ``loaded`` stores it.

    Candidates ``policy`` forbids are dropped (a stricter policy than the load's
    wins); ``loaded`` may be None (no statistics: sizes from types alone).
    ``stored_bytes``: what the server's columns take on disk (``stored_column_bytes``,
    DuckDB); with it, and the plaintext measured at load for every table
    (``TableDesign.plain_bytes``), sizes and the budget are bytes on disk: a stored
    candidate's its column's, another's its values' widths (a new column's
    ciphertexts, random, compress little).
    """
    design = PhysicalDesign(greedy.key_fingerprint)
    found = CandidateSet(design, {}, 0.0, 0.0)
    tables = list(loaded.tables.values()) if loaded is not None else []
    measured = (
        stored_bytes if stored_bytes and tables and all(t.plain_bytes > 0 for t in tables) else None
    )
    found.on_disk = measured is not None
    for name, table in greedy.tables.items():
        stored = loaded.tables.get(name) if loaded is not None else None
        merged = _merged_table(table, stored, policy)
        design.tables[name] = merged
        _measure(found, merged, measured)
    return found


def stored_column_bytes(design: PhysicalDesign, backend: object) -> StoredBytes | None:
    """Each stored encryption's, row id's and blocks table's bytes on the server, where the
    backend can tell (``DuckDBBackend.column_bytes``); None elsewhere."""
    column_bytes = getattr(backend, "column_bytes", None)
    table_bytes = getattr(backend, "table_bytes", None)
    if column_bytes is None or table_bytes is None:
        return None
    found: StoredBytes = {}
    for table in design.tables.values():
        columns = column_bytes(table.server_name)
        for enc in table.encryptions:
            if enc.name in columns:
                found[(enc.name, enc.scheme)] = columns[enc.name]
        if table.row_id in columns:
            found[(table.row_id, _ROW_ID)] = columns[table.row_id]
        for words in table.sums.columns if table.sums is not None else []:
            for word in words:
                if word in columns:
                    found[(word, ASHE)] = columns[word]
        if table.blocks_table:
            found[(table.blocks_table, BLOCKS)] = float(table_bytes(table.blocks_table))
    return found


def _merged_table(table: TableDesign, stored: TableDesign | None, policy: Policy) -> TableDesign:
    encryptions = []
    for enc in table.encryptions:
        if enc.scheme in _OPTIONAL and not _allowed(policy, table.name, enc):
            if enc.scheme == DET and not enc.is_expression:  # still fetched: from RND
                encryptions.append(CandidateSet._fetch_form(table.name, enc))
            continue
        twin = _stored_twin(stored, enc) if stored is not None else None
        encryptions.append(_with_statistics(enc, twin, stored))
    merged = copy.deepcopy(table)
    merged.encryptions = encryptions
    if stored is not None:
        merged.row_count = stored.row_count
        merged.plain_bytes = stored.plain_bytes
        merged.server_name, merged.row_id = stored.server_name, stored.row_id
        merged.blocks_table = stored.blocks_table or table.blocks_table
        merged.sums = _stored_sums(table.sums, stored.sums)
        # the stored rows' order, as the server's estimates see it (ASHE's runs of ids,
        # blocks skipped by min/max); a load under the new design chooses it again
        merged.cluster_by, merged.sort_by = list(stored.cluster_by), stored.sort_by
    return merged


def policy_violations(design: PhysicalDesign, policy: Policy) -> list[str]:
    """``"SCHEME table.source"`` of each encryption of ``design`` above its columns' layers."""
    return [
        candidate_key(t.name, e.source, e.scheme)
        for t in design.tables.values()
        for e in t.encryptions
        if e.scheme in NEEDS and not _allowed(policy, t.name, e)
    ]


def _allowed(policy: Policy, table: str, enc: Encryption) -> bool:
    """Does ``policy`` let every column ``enc`` reads reveal what its scheme does?"""
    from veil.designer.greedy import summed_columns

    layer = NEEDS[enc.scheme]
    columns = [enc.source] if not enc.is_expression else summed_columns(enc.source)
    return all(policy.allows(table, c, layer) for c in columns)


def _stored_twin(stored: TableDesign, enc: Encryption) -> Encryption | None:
    same = stored.encryptions_of(enc.source, enc.scheme)
    if not same and enc.scheme == RND:
        same = stored.encryptions_of(enc.source, DET)  # the same values, fetched alike
    if not same and enc.scheme in (DET, RND) and not enc.is_expression:
        # a DET copy the load left out (``veil.load.fetch_copies``): the column is fetched
        # from its OPE copy, whose name lets the server explain statements reading it
        same = stored.encryptions_of(enc.source, OPE)
    return same[0] if same else None


def _with_statistics(
    enc: Encryption, twin: Encryption | None, stored: TableDesign | None
) -> Encryption:
    """``enc`` under the stored twin's server name, with the load's statistics of its source."""
    merged = copy.deepcopy(enc)
    merged.origin = "ilp"
    if twin is not None:
        merged.name = twin.name
        # the load's statistics, and its stored form where the twin is of the same scheme
        # (its server column is then this candidate's: constants are encrypted to match)
        copied = DATA_STATISTICS + (STORED_FORMS if twin.scheme == enc.scheme else ())
        merged.params.update({k: v for k, v in twin.params.items() if k in copied})
    elif stored is not None:
        for other in stored.encryptions_of(enc.source):
            if "mean_bytes" in other.params:
                merged.params["mean_bytes"] = other.params["mean_bytes"]
    return merged


def _stored_sums(wanted: AsheSums | None, stored: AsheSums | None) -> AsheSums | None:
    """The wanted ASHE sources under the stored words' names where the load has them."""
    if wanted is None or stored is None:
        return wanted
    if all(stored.index(source) is not None for source in wanted.sources):
        # the load's own layout (words fit to the data, NULL counters, overflow flags):
        # the server explains statements over exactly these columns
        return _ashe_subset(stored, list(wanted.sources))
    merged = copy.deepcopy(wanted)
    for i, source in enumerate(merged.sources):
        at = stored.index(source)
        if at is not None and len(stored.columns[at]) == len(merged.columns[i]):
            merged.columns[i] = list(stored.columns[at])
    if merged.overflow_column and stored.overflow_column:
        merged.overflow_column = stored.overflow_column
    return merged


def _measure(found: CandidateSet, table: TableDesign, measured: StoredBytes | None) -> None:
    rows = float(max(table.row_count, 1))
    known = measured or {}

    def size_of(name: str, scheme: str, width: float) -> float:
        return known.get((name, scheme), rows * width)

    if measured is not None:
        found.plain_bytes += table.plain_bytes
    else:
        found.plain_bytes += sum(rows * plain_width(c, table) for c in table.columns)
    row_ids = size_of(table.row_id, _ROW_ID, _ROW_ID_BYTES)
    found.fixed_bytes += row_ids
    blocks = [e for e in table.encryptions if e.scheme == BLOCKS]
    sealed = known.get((table.blocks_table, BLOCKS))  # the blocks table, shared by width
    widths = sum(stored_width(e) for e in blocks)
    found.table_bytes[table.name] = row_ids + sum(
        size_of(e.name, e.scheme, stored_width(e)) for e in table.encryptions
    )
    dets = {e.source for e in table.encryptions if e.scheme == DET and not e.is_expression}
    for enc in table.encryptions:
        size = size_of(enc.name, enc.scheme, stored_width(enc))
        if enc.scheme == BLOCKS and sealed is not None and widths > 0:
            size = sealed * stored_width(enc) / widths
        if enc.scheme in _OPTIONAL:
            _add(
                found,
                Candidate(
                    candidate_key(table.name, enc.source, enc.scheme),
                    table.name,
                    enc.source,
                    enc.scheme,
                    size,
                ),
                enc.name,
            )
        else:
            found.fixed_bytes += size
        if enc.scheme == DET and enc.source in dets:
            rnd = Candidate(
                candidate_key(table.name, enc.source, RND),
                table.name,
                enc.source,
                RND,
                rows * _rnd_width(enc),
            )
            found.candidates[rnd.key] = rnd
            found.fetch_pairs[candidate_key(table.name, enc.source, DET)] = rnd.key
    for i, source in enumerate(_sources(table.sums)):
        assert table.sums is not None
        bits = (table.sums.word_bits or [[64] * len(c) for c in table.sums.columns])[i]
        words = table.sums.columns[i]
        size = rows * sum(bits) / 8
        if all((w, ASHE) in known for w in words):
            size = sum(known[(w, ASHE)] for w in words)
        ashe = Candidate(_ashe_key(table.name, source), table.name, source, ASHE, size)
        for name in table.sums.columns[i]:
            _add(found, ashe, name)


def _add(found: CandidateSet, candidate: Candidate, server_name: str) -> None:
    found.candidates[candidate.key] = candidate
    found.by_name[server_name] = candidate.key


def _sources(sums: AsheSums | None) -> list[str]:
    return list(sums.sources) if sums is not None else []


def _ashe_subset(sums: AsheSums | None, sources: list[str]) -> AsheSums | None:
    """``sums`` with only ``sources`` (None when none is left)."""
    if sums is None or not sources:
        return None
    at = [sums.sources.index(s) for s in sources]
    return replace(
        sums,
        sources=[sums.sources[i] for i in at],
        types=[sums.types[i] for i in at],
        columns=[sums.columns[i] for i in at],
        word_bits=[sums.word_bits[i] for i in at] if sums.word_bits is not None else None,
        limits=[sums.limits[i] for i in at] if sums.limits is not None else None,
        null_fields=[sums.null_fields[i] for i in at] if sums.null_fields is not None else None,
    )


def plain_width(column: Column, table: TableDesign) -> float:
    """Plaintext bytes per value: the type's width, or a text's mean length."""
    sql_type = SqlType(column.type)
    if sql_type.name in _PLAIN_BYTES:
        return _PLAIN_BYTES[sql_type.name]
    if sql_type.is_integral or sql_type.kind in ("float", "timestamp"):
        return 8
    return _mean_bytes(next(iter(table.encryptions_of(column.name)), None))


def stored_width(enc: Encryption) -> float:
    """Server bytes per row of one encryption (see the module's docstring)."""
    mean = _mean_bytes(enc)
    if enc.scheme == SEARCH:
        return 1 + _SEARCH_WORD_BYTES * max(1.0, mean / _MEAN_WORD_BYTES)
    if enc.scheme == BLOCKS:
        return mean / 3 if not enc.sql_type.is_integral else 3  # zstd over sealed blocks
    if enc.scheme == OPE and enc.ope_binary:
        return 1 + int(str(enc.params.get("bits", 64))) * 2 / 8  # OPE doubles the bits
    if enc.scheme == RND:
        return _rnd_width(enc)
    if enc.sql_type.is_integral:
        return 8
    return mean + _CIPHERTEXT_BYTES


def _rnd_width(enc: Encryption) -> float:
    """A number's RND: its domain's bits, as DuckDB bit-packs them; a text's: its length + 17."""
    if not enc.sql_type.is_integral:
        return _mean_bytes(enc) + _CIPHERTEXT_BYTES
    bits = enc.params.get(RND_BITS, rnd_bits(enc.sql_type))
    return int(str(bits)) / 8 if bits is not None else 8


def _mean_bytes(enc: Encryption | None) -> float:
    mean = enc.params.get("mean_bytes") if enc is not None else None
    return float(mean) if isinstance(mean, int | float) else float(TEXT_BYTES)
