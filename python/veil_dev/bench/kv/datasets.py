"""Real record datasets found offline, for ``veil kv packsize`` and ``veil kv bench``.

A dataset is a list of records (bytes), in the order a key-value store would
key them. Named datasets come from files every Debian/Ubuntu machine has (or
gets back with ``apt-get update``); nothing is downloaded:

- ``debian-packages``: the stanzas of the APT package index
  (``/var/lib/apt/lists/*_Packages[.lz4|.gz|.xz]``), one package per record,
  about 1 KB of structured text each (like the paper's Conviva rows).
- ``dpkg-status``: the stanzas of ``/var/lib/dpkg/status`` (installed packages).
- ``iso-codes``: the JSON objects of ``/usr/share/iso-codes/json`` (languages,
  countries, subdivisions, currencies; package iso-codes), short records.
- ``dpkg-log``: the lines of ``/var/log/dpkg.log``, a time series of events
  (a small file: 5,273 lines here).
- ``postgres-log``: a real server log of realistic size (~300,000 entries,
  ~35 MB), the log PostgreSQL 15 writes under a fixed ``pgbench`` workload:
  generated here once with the machine's PostgreSQL and kept in a cache file
  (see :mod:`veil_dev.bench.kv.postgres_log`).
- ``apt-json``: short JSON records (~200 bytes), one per package of the APT
  index: its name, version, architecture, section, priority, sizes,
  maintainer and source, as a JSON API would return them.

Any other argument is a file: a JSON document whose top level is a list (or an
object holding lists) gives one record per element, re-serialised compactly;
otherwise each non-empty line is a record (JSON Lines or plain text).
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType

import lz4.frame

from veil.errors import VeilError

APT_LISTS = Path("/var/lib/apt/lists")
DPKG_STATUS = Path("/var/lib/dpkg/status")
ISO_CODES = Path("/usr/share/iso-codes/json")
DPKG_LOG = Path("/var/log/dpkg.log")


class DatasetError(VeilError):
    """A dataset could not be found or read."""

    anchor = "kv-dataset"


def read_maybe_compressed(path: Path) -> bytes:
    data = path.read_bytes()
    openers: dict[str, Callable[[bytes], bytes]] = {
        ".lz4": lz4.frame.decompress,
        ".gz": gzip.decompress,
        ".xz": lzma.decompress,
        ".bz2": bz2.decompress,
    }
    opener = openers.get(path.suffix)
    return opener(data) if opener else data


def stanzas(text: bytes) -> list[bytes]:
    """Split a Debian control file into its paragraphs (one record each)."""
    return [part.strip(b"\n") for part in text.split(b"\n\n") if part.strip()]


def debian_packages() -> list[bytes]:
    files = sorted(p for p in APT_LISTS.glob("*_Packages*") if not p.name.endswith(".diff_Index"))
    if not files:
        raise DatasetError(
            f"no APT package index under {APT_LISTS}; run `apt-get update` (as root) to fetch it, "
            "or pass another dataset"
        )
    records: list[bytes] = []
    for path in files:
        records.extend(stanzas(read_maybe_compressed(path)))
    return records


APT_JSON_FIELDS = (
    "Package",
    "Version",
    "Architecture",
    "Section",
    "Priority",
    "Installed-Size",
    "Size",
    "Maintainer",
    "Source",
)


def apt_json() -> list[bytes]:
    """Short JSON records of the APT index's packages (see the module docstring)."""
    records = []
    for stanza in debian_packages():
        fields = dict(
            line.split(": ", 1)
            for line in stanza.decode(errors="replace").split("\n")
            if ": " in line
        )
        record = {name.lower(): fields[name] for name in APT_JSON_FIELDS if name in fields}
        records.append(json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode())
    return records


def dpkg_status() -> list[bytes]:
    _require(DPKG_STATUS, "dpkg-status exists only on Debian-based systems")
    return stanzas(DPKG_STATUS.read_bytes())


def iso_codes() -> list[bytes]:
    files = sorted(ISO_CODES.glob("iso_*.json"))
    if not files:
        raise DatasetError(
            f"no JSON under {ISO_CODES}; install it with `apt-get install iso-codes`"
        )
    records: list[bytes] = []
    for path in files:
        records.extend(json_records(json.loads(path.read_bytes())))
    return records


def dpkg_log() -> list[bytes]:
    _require(DPKG_LOG, "dpkg-log exists only on Debian-based systems with package history")
    return lines(DPKG_LOG.read_bytes())


def _require(path: Path, why: str) -> None:
    if not path.exists():
        raise DatasetError(f"{path} not found ({why}); pass a file of records instead")


def _postgres_log() -> ModuleType:
    """The postgres-log module, imported when used: it pulls in the PostgreSQL server
    code, which ``veil --help`` must not load."""
    from veil_dev.bench.kv import postgres_log

    return postgres_log


NAMED: dict[str, Callable[[], list[bytes]]] = {
    "debian-packages": debian_packages,
    "dpkg-status": dpkg_status,
    "iso-codes": iso_codes,
    "dpkg-log": dpkg_log,
    "apt-json": apt_json,
    "postgres-log": lambda: _postgres_log().postgres_log(),
}

# The one file a named dataset's records come from, where there is one.
SOURCE_FILES: dict[str, Callable[[], Path]] = {
    "dpkg-log": lambda: DPKG_LOG,
    "dpkg-status": lambda: DPKG_STATUS,
    "postgres-log": lambda: _postgres_log().cache_path(),
}


def source_file(dataset: str) -> dict[str, str | int]:
    """The file a dataset was read from, its size and SHA-256 (empty if not one file)."""
    if dataset in SOURCE_FILES:
        path = SOURCE_FILES[dataset]()
    elif dataset in NAMED:
        return {}  # read from several files
    else:
        path = Path(dataset)
    if not path.is_file():
        return {}
    data = path.read_bytes()
    return {"path": str(path), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def json_records(document: object) -> list[bytes]:
    """Records of a JSON document: elements of its list(s), compactly serialised."""
    if isinstance(document, dict):
        lists = [value for value in document.values() if isinstance(value, list)]
        if lists:
            return [record for items in lists for record in _dump_all(items)]
        return _dump_all([document])
    if isinstance(document, list):
        return _dump_all(document)
    return _dump_all([document])


def _dump_all(items: Iterable[object]) -> list[bytes]:
    return [json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode() for item in items]


def lines(text: bytes) -> list[bytes]:
    return [line for line in text.splitlines() if line.strip()]


def load_records(dataset: str, limit: int | None = None) -> list[bytes]:
    """The records of a named dataset or of a file, at most ``limit`` of them."""
    records = NAMED[dataset]() if dataset in NAMED else _file_records(Path(dataset))
    if not records:
        raise DatasetError(f"dataset {dataset!r} has no records")
    return records[:limit] if limit else records


def _file_records(path: Path) -> list[bytes]:
    if not path.exists():
        names = ", ".join(sorted(NAMED))
        raise DatasetError(f"{path} is neither a file nor a named dataset ({names})")
    data = read_maybe_compressed(path)
    if data.lstrip()[:1] in (b"[", b"{"):
        try:
            return json_records(json.loads(data))
        except json.JSONDecodeError:
            pass  # JSON Lines: one object per line
    return lines(data)
