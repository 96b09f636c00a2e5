"""What a database remembers about its MiniCrypt tables, in the store itself.

One backend table, ``veil_kv_catalog``, holds:

* ``fingerprint`` -- the public fingerprint of the master key that wrote the
  database (``MasterKey.fingerprint``). Opening with another key file fails up
  front with :class:`~veil.errors.WrongKeyError` rather than finding an empty
  store (table names are derived from the key) or failing later on every pack.
* ``table/<name>`` -- each table's fixed configuration (JSON): mode,
  pack_rows, partitions, pseudorandom packIDs, the APPEND epoch length, and
  the key type once the first key is written. A table created without
  ``pack_rows`` has none until its first write chooses one from the data
  (:mod:`veil.kv.packsize`); ``pack_choice`` then records the curve point the
  choice rests on (ratio, whole-sample ratio, target, read cap, sample size),
  and ``bucket_bits`` the width of its key buckets (:mod:`veil.kv.layout`;
  absent in tables created before: keys hashed one by one). These must agree
  between clients: splits and merges are deterministic only if every client
  cuts packs the same way, and reads find a key only in the partition its
  writer chose. An entry with a field this version does not know is refused
  (a newer Veil wrote it), never read with a guessed layout.

The backend names of a table's parts are derived from the key
(``v<20 hex>p`` for packs, ``...e`` epochs, ``...m`` EM metadata, ``...s``
epoch stats), so the server never sees the table names the application uses.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from veil.crypto.keys import KeyLabel, MasterKey
from veil.errors import ParameterError, WrongKeyError
from veil.kv.backends.base import KVBackend

CATALOG_TABLE = "veil_kv_catalog"
FINGERPRINT_ROW = b"fingerprint"


@dataclass(frozen=True)
class TableConfig:
    mode: str
    pack_rows: int | None  # None: not chosen yet (chosen from the first batch)
    partitions: int
    prf_pack_ids: bool
    key_kind: str | None = None
    epoch_seconds: float = 10.0
    pack_choice: dict[str, Any] | None = None
    block_rows: int | None = None  # rows per block of blocked packs (None: one block a pack)
    bucket_bits: int | None = None  # integer keys share a partition per 2**bits (None: per key)
    # the compression a client uses when not told (set at creation; None: a table made
    # before it was recorded, when the default was zlib). Every pack names its own codec.
    compression: str | None = None

    @property
    def max_keys(self) -> int:
        """Split threshold: 1.5 x the target pack size, as §5.2 suggests."""
        return max_keys(self.pack_rows or 1)


def max_keys(pack_rows: int) -> int:
    return max(pack_rows + 1, (3 * pack_rows) // 2)


def physical_base(master: MasterKey, table: str) -> str:
    key = master.derive(KeyLabel("kv-name", "tables"))
    return "v" + hmac.digest(key, table.encode(), "sha256").hex()[:20]


def check_fingerprint(backend: KVBackend, master: MasterKey) -> None:
    backend.ensure_table(CATALOG_TABLE)
    ours = master.fingerprint().encode()
    backend.insert_if_not_exists(CATALOG_TABLE, 0, FINGERPRINT_ROW, ours, os.urandom(16))
    row = backend.get(CATALOG_TABLE, 0, FINGERPRINT_ROW)
    if row is not None and row.value != ours:
        raise WrongKeyError(
            "this key-value database was written with a different key file "
            f"(its key fingerprint is {row.value.decode(errors='replace')}, yours is "
            f"{ours.decode()}); open it with the key file that created it"
        )


def load_config(backend: KVBackend, base: str, wanted: TableConfig, table: str) -> TableConfig:
    """The table's stored configuration, creating it from ``wanted`` if new."""
    row_key = f"table/{base}".encode()
    fresh = json.dumps(asdict(wanted)).encode()
    backend.insert_if_not_exists(CATALOG_TABLE, 0, row_key, fresh, os.urandom(16))
    row = backend.get(CATALOG_TABLE, 0, row_key)
    stored = _config(row.value if row else fresh)
    for field in ("mode", "prf_pack_ids"):
        if getattr(stored, field) != getattr(wanted, field):
            raise ParameterError(
                f"key-value table {table!r} was created with {field}="
                f"{getattr(stored, field)!r}; open it with the same setting"
            )
    return stored


def record_key_kind(backend: KVBackend, base: str, config: TableConfig, kind: str) -> TableConfig:
    """Fix the table's key type at its first write (update-if, so racers agree)."""
    return _settle(backend, base, "key_kind", lambda current: replace(current, key_kind=kind))


def record_pack_rows(
    backend: KVBackend,
    base: str,
    choose: Callable[[], tuple[int, int | None, dict[str, Any] | None, int | None]],
) -> TableConfig:
    """Fix the table's pack size and key buckets at its first write, unless another client did.

    ``choose`` runs only while the stored entry still has none and returns
    (pack_rows, block_rows, choice record, bucket_bits); of racing clients,
    the first update-if wins and every other adopts its values.
    """

    def chosen(current: TableConfig) -> TableConfig:
        pack_rows, block_rows, record, bucket_bits = choose()
        return replace(
            current,
            pack_rows=pack_rows,
            block_rows=block_rows,
            pack_choice=record,
            bucket_bits=bucket_bits,
        )

    return _settle(backend, base, "pack_rows", chosen)


def reload(backend: KVBackend, base: str) -> TableConfig:
    """The table's stored configuration as it is now (another client may have set fields)."""
    row = backend.get(CATALOG_TABLE, 0, f"table/{base}".encode())
    if row is None:
        raise ParameterError("the key-value catalog lost a table's entry; was it dropped?")
    return _config(row.value)


def _settle(
    backend: KVBackend, base: str, field: str, fill: Callable[[TableConfig], TableConfig]
) -> TableConfig:
    """Set a once-only ``field`` of the stored entry (update-if; the first writer wins)."""
    row_key = f"table/{base}".encode()
    while True:
        row = backend.get(CATALOG_TABLE, 0, row_key)
        assert row is not None
        current = _config(row.value)
        if getattr(current, field) is not None:
            return current
        updated = fill(current)
        data = json.dumps(asdict(updated)).encode()
        if backend.update_if(CATALOG_TABLE, 0, row_key, data, os.urandom(16), row.tag):
            return updated


def _config(data: bytes) -> TableConfig:
    value = _json(data)
    unknown = sorted(set(value) - {f.name for f in fields(TableConfig)})
    if unknown:
        raise ParameterError(
            f"a key-value table's catalog entry has settings this Veil does not know "
            f"({', '.join(unknown)}): a newer Veil created it; upgrade Veil to open it"
        )
    return TableConfig(**value)


def _json(data: bytes) -> dict[str, Any]:
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ParameterError("corrupt key-value catalog entry")
    return value
