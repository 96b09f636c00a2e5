"""The physical design: which encrypted columns the server stores, under which names.

A physical design lists, per plaintext table, the plaintext schema (kept on the
client only) and the server columns ("encryptions"): each is the encryption of
a source expression over one row (a column, or a per-row precomputed
expression such as ``l_extendedprice * (1 - l_discount)``) under one scheme,
with the key scope it is keyed under. Server table and column names are random
(``t_`` / ``c_`` + 16 hex digits) so that they reveal nothing about the schema.

The design is a versioned JSON file in the client directory. It records the
fingerprint of the master key the data was encrypted under, so a wrong key is
detected before anything is decrypted. Fields that a cost-based designer will
fill later (``cost``, ``origin``) are free-form and ignored by the executor.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from veil.encoding import SqlType
from veil.errors import VeilError

DESIGN_FORMAT = "veil-physical-design"
# 2: HOM is one packed group per table (``HomGroup``) instead of HOM columns.
# 3: OPE and HOM widths from value domains (types, or domains declared at load
#    time: ``Column.domain``), not from the loaded data; HOM overflow slot.
# 4: HOM headroom per group (``HomGroup.summand_bits``: products of at most
#    2^h packs, chunked by the server); overflow flags as counters above the
#    slots (``HomGroup.overflow_flags``) instead of a slot per row.
# 5: sequential row ids from a server counter (``TableDesign.id_counter``), the
#    HOM slot is the row id; ASHE sums (``TableDesign.sums``) are the default.
# 6: RND of table columns is row-bound (``veil.crypto.rowrnd``): 8-byte numbers.
# 7: a DET integer column may be stored as 8-byte binaries (``params["form"]``,
#    ``veil.ciphers.columns.BytesForm``); columns the workload never reads are
#    stored in sealed blocks of rows (``BLOCKS``, ``TableDesign.blocks_table``).
#    Version 6 designs read unchanged.
# 8: onions (adjustable encryption, ``veil.session.onions``): a DET or OPE
#    encryption may be wrapped in a row-bound RND layer (``params["outer"]``)
#    that the server strips when a query first needs it; the server records the
#    layers it holds in ``TableDesign.layers_table``. Versions 6 and 7 read unchanged.
# 9: OPE of at most 32 bits may be stored as ordered 8-byte binaries
#    (``params["form"]``, ``veil.ciphers.columns.OrderedBytesForm``); ASHE words
#    sized to the loaded data (``AsheSums.limits``, flags in ``overflow_column``);
#    rows clustered by GROUP BY keys (``TableDesign.cluster_by``). Versions 6-8
#    read unchanged.
# 10: a number's row-bound RND keeps its type's bits (``params["bits"]``, 64 when
#    absent), and on servers that bit-pack integers the ASHE flags word counts
#    NULLs only for sources sealed in blocks (``veil.load.ashe_widths``); an onion
#    load leaves its JOIN-ADJ and OPE layers unbuilt (``params["lazy"]``) for their
#    first peel to build (``veil.session.onions.defer_layers``). A Veil of version 9
#    would read those wrongly (it would XOR-peel an unbuilt layer's NULLs and use
#    them), so it must refuse them; versions 6-9 read unchanged.
# 11: an onion load leaves its SEARCH onions unbuilt too (``params["lazy"]``, NULL on
#    the server, never wrapped), and a text column's DET onion, the column fetched from
#    a row-bound RND copy; a Veil of version 10 would pre-filter a LIKE with the NULLs
#    or fetch them, so it must refuse them; versions 6-10 read unchanged.
# 12: an onion load leaves its ASHE words unbuilt too (``AsheSums.lazy``, NULL on the
#    server until the first SUM/AVG that needs them builds them), and fits a number's RND
#    copy to its loaded values (``params["fit"]``, ``veil.ciphers.fitted_rnd``); a Veil of
#    version 11 would sum the NULLs and misread the copies, so it must refuse them;
#    versions 6-11 read unchanged.
# 13: an int64 OPE column may have a narrower ciphertext range under a key of its own
#    (``params["cipher_bits"]``, ``veil.crypto.ope``, ``veil.load.narrow_ope``); a Veil
#    of version 12 would encrypt its constants and decrypt its values in the default
#    range, so it must refuse them; versions 6-12 read unchanged.
DESIGN_VERSION = 13
READABLE_VERSIONS = (6, 7, 8, 9, 10, 11, 12, 13)

RND = "RND"
DET = "DET"
OPE = "OPE"
HOM = "HOM"
SEARCH = "SEARCH"
ASHE = "ASHE"
# JOIN-ADJ (CryptDB): equality under a per-column key the server can re-key onto
# another column's with a token, so the two join (``veil.crypto.joinadj``; onions only)
JOIN = "JOIN"
# A column's values in sealed blocks of rows, in the table's side table
# (``veil.crypto.rowblocks``): for columns the workload never reads on the server.
BLOCKS = "BLOCKS"
SCHEMES = (RND, DET, OPE, HOM, SEARCH)
# ``Encryption.params`` of a number's RND: the bits its ciphertexts keep
# (``veil.design.domains.rnd_bits``, ``veil.ciphers.columns.RowBoundCipher``);
# without it, 64. Designs without it read unchanged.
RND_BITS = "bits"
# ``Encryption.params`` of a DET copy stored only to fetch an OPE column from (no query
# compares it for equality, groups or joins by it): a load may leave it out where the
# OPE copy decrypts as cheaply (``veil.load.fetch_copies``). Designs without it read unchanged.
FETCH_COPY = "fetch_copy"
OPE_INT64_BITS = 32  # OPE over at most this many bits stores BIGINT ciphertexts
# Schemes whose ciphertexts the client can decrypt back to single values.
DECRYPTABLE = (DET, RND, OPE, BLOCKS)


class DesignError(VeilError):
    """The physical design file is missing, malformed or does not fit the data."""

    anchor = "design"


def opaque_name(prefix: str) -> str:
    """A fresh random server name; it carries no information about the schema."""
    return f"{prefix}_{secrets.token_hex(8)}"


@dataclass
class Column:
    """A plaintext column (client-side schema only).

    ``domain`` is the ``[low, high]`` the user declared at load time (as
    given; ``bounds`` are their encodings); None means the type's whole range
    (``veil.design.domains``).
    """

    name: str
    type: str
    domain: list[str] | None = None
    bounds: list[int] | None = None
    # the name as the source spelled it ("Order ID"), where it differs from
    # ``name`` (lower-cased: names match case-insensitively, as in DuckDB);
    # results name columns this way
    label: str | None = None
    # declared NOT NULL (CREATE TABLE): checked on the client before anything is written
    not_null: bool = False
    # DEFAULT: DuckDB SQL of the value an INSERT that omits the column writes (the
    # client's catalogue computes it); None: NULL
    default: str | None = None
    # serial / GENERATED {BY DEFAULT | ALWAYS} AS IDENTITY: "by default" or "always";
    # an omitted value is taken from the server counter ``sequence`` (a one-row table)
    identity: str = ""
    sequence: str = ""

    @property
    def sql_type(self) -> SqlType:
        return SqlType(self.type)


@dataclass
class Reference:
    """A FOREIGN KEY: ``columns`` of this table name a row of ``parent`` by ``parent_columns``
    (a declared key of it). Checked by the client on every write of either table
    (``veil.session.references``)."""

    name: str
    columns: list[str]
    parent: str
    parent_columns: list[str]
    # what a delete / a key change of a referenced parent row does to the rows naming it:
    # "no action", "restrict", "cascade", "set null" or "set default"
    on_delete: str = "no action"
    on_update: str = "no action"


@dataclass
class Encryption:
    """One server column: ``scheme(source)`` stored under ``name``."""

    name: str
    source: str  # a plaintext column name, or a SQL expression over one row
    scheme: str
    type: str  # SQL type of the source's value (what the client decodes to)
    key_scope: str  # the KeyLabel scope; equal scopes give comparable ciphertexts
    params: dict[str, object] = field(default_factory=dict)
    origin: str = "greedy"

    @property
    def sql_type(self) -> SqlType:
        return SqlType(self.type)

    @property
    def is_expression(self) -> bool:
        """A per-row SQL expression rather than a column name.

        A column whose name is not a Python identifier ("order id", "select"
        is one; "a b" is not) carries ``params["column"]``.
        """
        return not (self.source.isidentifier() or self.params.get("column") is True)

    @property
    def outer(self) -> str | None:
        """The onion layer wrapping this encryption on the server now (``RND``), if any.

        A wrapped DET or OPE column is row-bound RND of the scheme's
        ciphertexts: the server can compare nothing until the layer is
        peeled (``veil.session.onions``); the client still decrypts it.
        """
        outer = self.params.get("outer")
        return str(outer) if outer else None

    @property
    def onion(self) -> bool:
        """Stored as an onion (adaptive load): a layer the server may be asked to peel."""
        return bool(self.params.get("onion"))

    @property
    def row_bound(self) -> bool:
        """Does decrypting it need the rows' ids (row-bound RND, or a wrapped onion)?"""
        return self.scheme == RND or self.outer is not None

    @property
    def ope_binary(self) -> bool:
        """OPE stored as byte strings: over more than 32 bits (``veil.crypto.ope``), or
        int64 ciphertexts in the ordered bytes form (``params["form"]``)."""
        return self.scheme == OPE and (
            int(str(self.params.get("bits", 64))) > OPE_INT64_BITS
            or self.params.get("form") == "bytes"
        )


@dataclass
class HomGroup:
    """A table's summed expressions, packed into Paillier ciphertexts (MONOMI §5.2-5.3).

    Each row contributes the values of ``sources`` (columns or per-row
    expressions; NULL packed as 0) to ``rows_per_ciphertext`` consecutive
    slots of one plaintext. The ciphertexts live in a side table
    ``server_name(pack, ct)``; the main table's ``slot_column`` holds each
    row's slot ``pack * rows_per_ciphertext + position``. Slots are given in
    load (and insert) order, so the server learns the load order of rows, and
    nothing of their values.
    """

    server_name: str
    slot_column: str
    sources: list[str]
    types: list[str]
    key_scope: str
    value_bits: int = 64  # every packed value is a signed integer of this many bits
    rows_per_ciphertext: int = 1
    # Headroom h of each slot: the server multiplies at most 2^h packs in one
    # product (it groups them by pack // 2^h), so their sums never overflow.
    summand_bits: int = 32
    # A 0/1 flag per row (a counter above the slots), 1 where an expression of
    # the row overflowed its type (DuckDB cannot compute it): a sum over such a
    # row is left to the client.
    overflow_flags: bool = False

    def index(self, source: str) -> int | None:
        return self.sources.index(source) if source in self.sources else None


FLAG_FIELD_BITS = 7  # a counter of the ASHE flags word (``AsheSums.null_fields``)
MAX_NULL_FIELDS = 8  # 1 + 8 fields of 7 bits fit a 64-bit word


@dataclass
class AsheSums:
    """A table's summed expressions under ASHE (Seabed): the server adds with its own SUM.

    Each source is stored as one or two BIGINT server columns (``columns[i]``),
    each the ASHE encryption of one word of the encoded value under the row's
    id (``TableDesign.row_id``) and a key of its own (``veil.crypto.ashe``):
    one word when a sum of ``BLOCK_ROWS`` values of the source's domain stays
    within int64, else two (the low 32 bits, unsigned, and the rest). NULL is
    stored as the encryption of 0; the server counts an expression's non-NULL
    rows from its columns' other encryptions, as for Paillier.
    A row whose expression overflowed its type (DuckDB cannot compute it)
    stores 0 in its words and is flagged: with ``flag_bit`` set, in the high
    word of that expression (``+ 2**flag_bit``: a block's 64 high words sum to
    less than 2**38 in absolute value, so the count of flags stays apart);
    else in ``overflow_column``, a 0/1 flag per row under ASHE, 1 where any
    expression of the row overflowed (when an expression that can overflow
    has a single word).
    """

    sources: list[str]
    types: list[str]
    columns: list[list[str]]
    key_scope: str
    overflow_column: str | None = None
    flag_bit: int | None = None
    # Ciphertext bits of each word column (``columns``' shape; None: 64 each).
    # A word is stored modulo 2**bits, the fewest that keep a block's sum
    # exact: DuckDB bit-packs them (38 bits for a low word, not 64).
    word_bits: list[list[int]] | None = None
    # Since loads fit words to the data (``veil.load.ashe_widths``): the largest
    # |encoded value| each source stores in its words; a row beyond it (a later
    # INSERT or UPDATE) stores 0 there and is flagged in ``overflow_column``, so
    # sums over it run on the client. None: the type's whole domain fits.
    limits: list[int] | None = None
    overflow_bits: int = 64  # ciphertext bits of ``overflow_column``
    # Since version 9 ``overflow_column`` is a word of 7-bit counters (a block's
    # 64 rows count at most 64): field 0 the overflow flags, field ``null_fields[i]``
    # the rows where source i is NULL, so the server counts a source's rows with
    # COUNT(*) and the client takes its NULLs off, instead of the server testing
    # the source's columns (which then need no per-row encryption). Field 0 for
    # a source that had no NULL at load: a later NULL there is flagged as an
    # overflow (sums over it run on the client), which saves 7 bits a row.
    # None: the server tests the source's columns.
    null_fields: list[int | None] | None = None
    # Not built on the server yet (an onion load's: NULL words until the first SUM/AVG
    # that needs them, ``veil.session.ashe_build``): the planner sums on the client meanwhile.
    lazy: bool = False
    # 32: a word column of at most 31 bits is stored as a 4-byte integer (PostgreSQL, which
    # stores 8 bytes a BIGINT whatever its bits; ``veil.load.narrow_det.choose_by_type``)
    stored_bits: int | None = None

    def null_field(self, index: int) -> int | None:
        return self.null_fields[index] if self.null_fields is not None else None

    def index(self, source: str) -> int | None:
        return self.sources.index(source) if source in self.sources else None

    def summed_columns(self, sources: list[int]) -> list[str]:
        """The server columns a sum of these sources adds: their words, then the flags."""
        words = [name for index in sources for name in self.columns[index]]
        if self.overflow_column is not None:
            words.append(self.overflow_column)
        return words


@dataclass
class TableDesign:
    name: str
    server_name: str
    # server column of the row id: sequential, from the ``id_counter`` table's
    # counter, never reused (an UPDATE writes fresh ids): ASHE's pads are one-time
    row_id: str
    columns: list[Column]
    encryptions: list[Encryption]
    row_count: int = 0
    hom: HomGroup | None = None
    sums: AsheSums | None = None
    id_counter: str = ""  # server table holding the next free row id
    # server table of the BLOCKS columns' sealed blocks: (c, first_id, row_count, payload)
    blocks_table: str = ""
    # server table of the onion layers the server holds (c, peeled): written in
    # the transaction of each peel, so a crash between the server's commit and
    # the design's save is repaired from it (``veil.session.onions.reconcile``)
    layers_table: str = ""
    # Source columns whose equal values the loader gave consecutive row ids
    # (rows ordered by a keyed hash of them): a GROUP BY on them then sums
    # whole runs of ids under ASHE, which the client unpads with two PRF calls
    # per run instead of per row (``veil.load.clusters``), chosen among the
    # designer's ``cluster_candidates``. Client-side only; empty: source order.
    # declared keys (PRIMARY KEY first, then UNIQUE ones): each a server unique index on
    # its columns' DET ciphertexts, which DET's injectivity under one key makes exact
    keys: list[list[str]] = field(default_factory=list)
    # CHECK constraints: [name, DuckDB SQL of a boolean over one row], checked on the
    # client before every write (``veil.session.constraints``)
    checks: list[list[str]] = field(default_factory=list)
    # FOREIGN KEYs this table declares
    references: list[Reference] = field(default_factory=list)
    cluster_by: list[str] = field(default_factory=list)
    cluster_candidates: list[list[str]] = field(default_factory=list)
    # The source column whose order the loader kept within each cluster (or the
    # whole table), chosen among the designer's ``sort_candidates``: a column
    # the workload filters by ranges and the server holds under OPE, so the
    # server's blocks of rows cover narrow ranges of it and range filters skip
    # the rest by their min/max. Client-side only; "": source order.
    sort_by: str = ""
    sort_candidates: list[str] = field(default_factory=list)
    # The plaintext table's bytes as a DuckDB server would store it, measured on a sample
    # at load (``veil.load.plain_size``): the unit of the designer's space budget on
    # DuckDB. Client-side only; 0: not measured (another backend, an older load).
    plain_bytes: float = 0.0
    # A peel of this table is under way: its server may hold some layer wrapped or bare
    # until the peel records which (``veil.session.peel_marks``); readers wait for it.
    peeling: bool = False

    def primary_key(self) -> list[str] | None:
        """The primary key: the first declared key, if its columns are NOT NULL (a primary
        key made them so; a UNIQUE key's may hold nulls)."""
        if not self.keys:
            return None
        required = {c.name for c in self.columns if c.not_null}
        return self.keys[0] if set(self.keys[0]) <= required else None

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def side_tables(self) -> list[str]:
        """The server tables besides the main one: HOM packs, row-id counter, blocks."""
        found = [self.hom.server_name] if self.hom is not None else []
        side = (self.id_counter, self.blocks_table, self.layers_table)
        return found + [name for name in side if name]

    def stored_column(self, enc: Encryption | None) -> str:
        """The main table's column a fetch of ``enc`` reads (a BLOCKS column: the row id)."""
        return enc.name if enc is not None and enc.scheme != BLOCKS else self.row_id

    def encryptions_of(self, source: str, scheme: str | None = None) -> list[Encryption]:
        return [e for e in self.encryptions if e.source == source and scheme in (None, e.scheme)]

    def find(self, source: str, scheme: str) -> Encryption | None:
        """The server column on which the server can compute ``scheme``'s operations.

        A wrapped onion layer (``Encryption.outer``) allows none until it is peeled, an
        unbuilt one (``params["lazy"]``) none until it is built.
        """
        found = [
            e
            for e in self.encryptions_of(source, scheme)
            if e.outer is None and not e.params.get("lazy")  # unbuilt: NULL on the server
        ]
        return found[0] if found else None

    def onion_of(self, source: str, scheme: str) -> Encryption | None:
        """The onion encryption of ``source`` under ``scheme``, wrapped or peeled."""
        found = [e for e in self.encryptions_of(source, scheme) if e.onion]
        return found[0] if found else None

    def fetchable(self, source: str) -> Encryption:
        """The cheapest server column to fetch and decrypt ``source`` from."""
        for scheme in DECRYPTABLE:
            found = self.find(source, scheme) or next(
                (e for e in self.encryptions_of(source, scheme) if not e.params.get("lazy")),
                None,  # unbuilt (NULL on the server): fetched from another form
            )
            if found is not None:
                return found
        raise DesignError(
            f"table {self.name!r} stores no decryptable encryption of {source!r}; "
            "the design is broken, reload the table"
        )


@dataclass
class PhysicalDesign:
    key_fingerprint: str
    tables: dict[str, TableDesign] = field(default_factory=dict)
    version: int = DESIGN_VERSION

    def table(self, name: str) -> TableDesign:
        try:
            return self.tables[name.lower()]
        except KeyError:
            raise DesignError(
                f"unknown table {name!r}; loaded tables: {sorted(self.tables)}"
            ) from None

    def plaintext_schema(self) -> dict[str, dict[str, str]]:
        """``{table: {column: type}}`` for sqlglot's qualifier and the local database."""
        return {t.name: {c.name: c.type for c in t.columns} for t in self.tables.values()}

    def to_json(self) -> str:
        document = {"format": DESIGN_FORMAT, **asdict(self)}
        return json.dumps(document, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, origin: str = "design") -> PhysicalDesign:
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DesignError(f"{origin} is not valid JSON ({exc})") from None
        if not isinstance(document, dict) or document.get("format") != DESIGN_FORMAT:
            raise DesignError(f"{origin} is not a Veil physical design file")
        if document.get("version") not in READABLE_VERSIONS:
            raise DesignError(
                f"{origin} has design version {document.get('version')}; this Veil reads "
                f"version {DESIGN_VERSION} (sequential row ids, ASHE sums, row-bound RND): reload the data with `veil load`"
            )
        tables = {name: _table_from_dict(t) for name, t in document["tables"].items()}
        return cls(key_fingerprint=document["key_fingerprint"], tables=tables)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write atomically, so a crash never leaves half a design."""
        write_private(path, self.to_json() + "\n")  # the plaintext schema is the client's business

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PhysicalDesign:
        target = Path(path)
        try:
            text = target.read_text()
        except FileNotFoundError:
            raise DesignError(
                f"no physical design at {target}; is this a Veil client directory? "
                "Create one with `veil load`"
            ) from None
        return cls.from_json(text, str(target))


def write_private(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` by ``text`` atomically, readable by its owner only (0600)."""
    target = Path(path)
    temporary = target.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    # Sessions notice a new design by its modification time, which the kernel keeps to a
    # few milliseconds: two saves within one tick (a re-key's swap right after its
    # previous table's) looked like one, and a session kept planning on the design
    # whose server tables the swap had dropped. Each save's time is later than the last.
    try:
        last = target.stat().st_mtime_ns
    except FileNotFoundError:
        last = 0
    stamp = max(time.time_ns(), last + 1)
    os.utime(temporary, ns=(stamp, stamp))
    os.replace(temporary, target)


def _table_from_dict(data: dict[str, object]) -> TableDesign:
    columns = [Column(**c) for c in data["columns"]]  # type: ignore[attr-defined]
    encryptions = [Encryption(**e) for e in data["encryptions"]]  # type: ignore[attr-defined]
    return TableDesign(
        name=str(data["name"]),
        server_name=str(data["server_name"]),
        row_id=str(data["row_id"]),
        columns=columns,
        encryptions=encryptions,
        row_count=int(str(data.get("row_count", 0))),
        hom=HomGroup(**data["hom"]) if data.get("hom") else None,  # type: ignore[arg-type]
        sums=AsheSums(**data["sums"]) if data.get("sums") else None,  # type: ignore[arg-type]
        id_counter=str(data.get("id_counter", "")),
        blocks_table=str(data.get("blocks_table", "")),
        layers_table=str(data.get("layers_table", "")),
        keys=[[str(c) for c in key] for key in data.get("keys", [])],  # type: ignore[attr-defined]
        checks=[[str(c) for c in check] for check in data.get("checks", [])],  # type: ignore[attr-defined]
        references=[Reference(**r) for r in data.get("references", [])],  # type: ignore[attr-defined]
        cluster_by=[str(c) for c in data.get("cluster_by", [])],  # type: ignore[attr-defined]
        cluster_candidates=[
            [str(c) for c in keys]
            for keys in data.get("cluster_candidates", [])  # type: ignore[attr-defined]
        ],
        sort_by=str(data.get("sort_by", "")),
        sort_candidates=[str(c) for c in data.get("sort_candidates", [])],  # type: ignore[attr-defined]
        plain_bytes=float(str(data.get("plain_bytes", 0.0))),
        peeling=bool(data.get("peeling", False)),
    )
