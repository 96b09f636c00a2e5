"""A session's column ciphers, each made once (deriving keys is not free)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from veil.ciphers.ashe_sums import AsheSumsCipher
from veil.ciphers.blocks import block_key
from veil.ciphers.columns import ColumnCipher, column_cipher
from veil.ciphers.encrypt import rnd_context
from veil.ciphers.hom_group import HomGroupCipher
from veil.crypto.keys import MasterKey
from veil.crypto.paillier import KeyStore, keys_kept_by
from veil.crypto.rowblocks import RowBlocks
from veil.design.fresh import DATA_STATISTICS
from veil.design.model import AsheSums, Encryption, HomGroup, TableDesign
from veil.keys.derivations import SealedDerivations


class CipherCache:
    """Column ciphers of one session, made once (key derivation is not free).

    ``derivations``: the client directory's sealed store, where the Paillier
    keys an earlier process derived are read instead of derived again (``veil.keys.derivations``).
    """

    def __init__(self, master: MasterKey, derivations: KeyStore | None = None):
        self._master = master
        self._derivations = derivations
        self._ciphers: dict[tuple[str, str, str], ColumnCipher] = {}
        self._groups: dict[tuple[str, str], HomGroupCipher] = {}
        self._sums: dict[tuple[str, str], AsheSumsCipher] = {}
        self._blocks: dict[tuple[str, str], RowBlocks] = {}
        # the last cipher of each encryption object, with what it was made of: building
        # ``_made_of`` costs ~4 us, ten times a point query's row (issue 41)
        self._seen: dict[int, tuple[Encryption, tuple[object, ...], ColumnCipher]] = {}

    @classmethod
    def of_client_dir(cls, client_dir: Path, master: MasterKey) -> CipherCache:
        """A session's cache, with its client directory's sealed derivations."""
        return cls(master, SealedDerivations(client_dir, master))

    def get(self, table: TableDesign, encryption: Encryption) -> ColumnCipher:
        # keyed by what the cipher is made of, not only by name: a designer's candidate
        # encryption may share a live one's name without its load-time form (narrow
        # DET, the bytes form); a cipher made for it would encrypt the live column's
        # constants wrongly (TPC-H Q13's LIKE flag matched no row after a design run)
        seen = self._seen.get(id(encryption))
        if seen is not None and seen[0] is encryption and seen[1] == _state(table, encryption):
            return seen[2]
        key = (table.server_name, encryption.name, _made_of(encryption))
        if key not in self._ciphers:
            context = rnd_context(table, encryption)
            self._ciphers[key] = column_cipher(self._master, encryption, context)
        if len(self._seen) >= _SEEN_SIZE:
            self._seen.clear()
        self._seen[id(encryption)] = (encryption, _state(table, encryption), self._ciphers[key])
        return self._ciphers[key]

    def group(self, table: TableDesign) -> HomGroupCipher:
        """The cipher of the table's packed HOM group."""
        assert table.hom is not None
        key = (table.server_name, _made_of(table.hom))
        if key not in self._groups:
            with keys_kept_by(self._derivations):
                self._groups[key] = HomGroupCipher(self._master, table.hom)
        return self._groups[key]

    def blocks(self, table: TableDesign, encryption: Encryption) -> RowBlocks:
        """The key of a BLOCKS column."""
        key = (table.server_name, encryption.name)
        if key not in self._blocks:
            self._blocks[key] = block_key(self._master, table, encryption)
        return self._blocks[key]

    def ashe(self, table: TableDesign) -> AsheSumsCipher:
        """The ASHE keys of the table's summed expressions."""
        assert table.sums is not None
        key = (table.server_name, _made_of(table.sums))
        if key not in self._sums:
            self._sums[key] = AsheSumsCipher(self._master, table.sums)
        return self._sums[key]


_SEEN_SIZE = 4096


def _state(table: TableDesign, encryption: Encryption) -> tuple[object, ...]:
    """What ``get``'s key reads of an encryption object that may change in place (a peel
    drops a layer from its ``params``): its parameters as a shallow copy compare equal
    only while no entry changed (an unchanged list compares by identity, at once)."""
    return (
        table.server_name,
        encryption.name,
        encryption.scheme,
        encryption.type,
        encryption.key_scope,
        encryption.source,
        dict(encryption.params),
    )


def _made_of(part: Encryption | HomGroup | AsheSums) -> str:
    """What a cipher is derived from, as text: a design part without its statistics."""
    if isinstance(part, Encryption):  # on every column of every query: kept cheap
        params = sorted((k, repr(v)) for k, v in part.params.items() if k not in DATA_STATISTICS)
        return repr((part.scheme, part.type, part.key_scope, part.source, params))
    return json.dumps(asdict(part), sort_keys=True, default=str)
