"""``veil backup`` and ``veil restore``: a client directory and its server, copied together.

A backup is a directory::

    DEST/
      manifest.json   format version, Veil's version, when, the server's kind, the
                      design's tables and key fingerprint, each file's SHA-256
      client/         the client directory: design, server settings, policy, users,
                      peel and audit logs; the key file only with include_key
      server.duckdb   an embedded DuckDB server: the file, checkpointed, copied
                      while this process holds it (no other process can write it)
      server.pgdump   a PostgreSQL server: pg_dump (custom format) of exactly the
                      design's server tables, in one snapshot

The design lock is held throughout, so no peel, DDL or redesign changes the
design or the server's tables while they are copied; PostgreSQL's own
snapshot makes the dump consistent against concurrent writes.

The key is left out by default: a backup kept beside the data with its key
in it protects nothing. Restoring then takes the key file (``--key``), which
must be the key the data was encrypted with; without it nothing can be
recovered.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from veil import __version__
from veil.backends import canonical_url, connect_existing
from veil.backends.duckdb import database_path
from veil.design.model import PhysicalDesign
from veil.errors import VeilError
from veil.keys.derivations import FILE_NAME as DERIVATIONS_FILE
from veil.session.clientdir import (
    DESIGN_FILE,
    KEY_FILE,
    LOCK_FILE,
    SERVER_FILE,
    ClientDir,
    open_client_dir,
)
from veil.session.sealed_plans import FILE_NAME as PLANS_FILE

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
DUCKDB_FILE = "server.duckdb"
PG_FILE = "server.pgdump"
# a lock is the running process's, not data; derived keys and kept plans are made
# again after a restore (a backup without the key file carries nothing sealed under
# that key, and a restored server may be another engine)
_NOT_COPIED = {LOCK_FILE, DERIVATIONS_FILE, PLANS_FILE}


class BackupError(VeilError):
    anchor = "backup"


def backup(
    client_dir: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    include_key: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, object]:
    """Write a backup of ``client_dir`` and its server to the new directory ``dest``.

    Built beside ``dest`` and renamed into place, so ``dest`` exists only complete.
    Returns the manifest."""
    client = open_client_dir(client_dir)
    target = Path(dest)
    if target.exists():
        raise BackupError(f"{target} already exists; give a new directory for the backup")
    building = target.with_name(f".{target.name}.partial")
    shutil.rmtree(building, ignore_errors=True)
    (building / "client").mkdir(parents=True, mode=0o700)
    try:
        with client.design_lock():
            design = PhysicalDesign.load(client.design_path)
            url = client.server_url()
            progress(f"copying the server {_shown(url)}")
            server_file = _copy_server(url, design, building)
            progress("copying the client directory")
            for source in sorted(client.path.iterdir()):
                if source.is_file() and _kept(source.name, include_key):
                    shutil.copy2(source, building / "client" / source.name)
        manifest: dict[str, object] = {
            "format": FORMAT_VERSION,
            "veil": __version__,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "server": {"kind": _kind(url), "file": server_file, "url": _shown(url)},
            "tables": sorted(design.tables),
            "key_fingerprint": design.key_fingerprint,
            "key_included": include_key,
            "files": _digests(building),
        }
        _write_private(building / MANIFEST, json.dumps(manifest, indent=1) + "\n")
        building.rename(target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return manifest


def restore(
    source: str | os.PathLike[str],
    client_dir: str | os.PathLike[str],
    server_url: str,
    *,
    key_file: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> ClientDir:
    """Bring the backup ``source`` back as the new client directory ``client_dir``, its
    server at ``server_url`` (which must not hold the tables yet)."""
    root = Path(source)
    manifest = read_manifest(root)
    progress("checking the backup's files")
    _check_digests(root, manifest)
    target = Path(client_dir)
    if target.exists() and any(target.iterdir()):
        raise BackupError(f"{target} is not empty; restore into a new client directory")
    if not manifest["key_included"] and key_file is None:
        raise BackupError(
            f"the backup {root} holds no key (as it should); give the key file the data was "
            "encrypted with (--key FILE). Without it nothing in the backup can be read"
        )
    url = canonical_url(server_url)
    server = manifest["server"]
    assert isinstance(server, dict)
    building = target.with_name(f".{target.name}.partial")
    shutil.rmtree(building, ignore_errors=True)
    shutil.copytree(root / "client", building)
    os.chmod(building, 0o700)
    try:
        if key_file is not None:
            shutil.copyfile(key_file, building / KEY_FILE)
            os.chmod(building / KEY_FILE, 0o600)
        restored = ClientDir(building)
        restored.design(restored.master_key())  # WrongKeyError unless it is the data's key
        progress(f"restoring the server into {_shown(url)}")
        _restore_server(root / str(server["file"]), str(server["kind"]), url, manifest)
        _write_private(building / SERVER_FILE, json.dumps({"url": url}) + "\n")
        if target.exists():
            target.rmdir()
        building.rename(target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return open_client_dir(target)


def read_manifest(root: Path) -> dict[str, object]:
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except FileNotFoundError:
        raise BackupError(f"{root} is not a Veil backup (it has no {MANIFEST})") from None
    except ValueError as exc:
        raise BackupError(f"{root / MANIFEST} is damaged ({exc})") from None
    if manifest.get("format") != FORMAT_VERSION:
        raise BackupError(
            f"{root} is a backup of format {manifest.get('format')!r}; this Veil reads "
            f"format {FORMAT_VERSION}"
        )
    return dict(manifest)


# -- the server ------------------------------------------------------------------


def _kind(url: str) -> str:
    if url.startswith("duckdb:"):
        return "duckdb"
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql"
    raise BackupError(
        f"veil backup copies DuckDB and PostgreSQL servers, not {_shown(url)}; for a Spark "
        "warehouse copy its directory together with the client directory"
    )


def _copy_server(url: str, design: PhysicalDesign, dest: Path) -> str:
    if _kind(url) == "duckdb":
        path = database_path(url)
        if path == ":memory:":
            raise BackupError("an in-memory DuckDB server has nothing to back up")
        server = connect_existing(url)  # holds the file's lock: no other process writes it
        try:
            server.execute("CHECKPOINT")  # everything in the file, nothing left in the WAL
            shutil.copyfile(path, dest / DUCKDB_FILE)
        finally:
            server.close()
        return DUCKDB_FILE
    schema, tables = _server_tables(url, design)
    names = [f"--table={_pg_ident(schema)}.{_pg_ident(t)}" for t in tables]
    _pg_tool(
        ["pg_dump", "--format=custom", "--no-owner", "--no-privileges", *names,
         f"--file={dest / PG_FILE}", f"--dbname={url}"]
    )  # fmt: skip
    return PG_FILE


def _server_tables(url: str, design: PhysicalDesign) -> tuple[str, list[str]]:
    """The server's current schema and every server table of the design."""
    schema, present = _schema_and_tables(url)
    tables = []
    for table in design.tables.values():
        counters = [c.sequence for c in table.columns if c.sequence]
        tables += [table.server_name, *table.side_tables(), *counters]
    missing = sorted(t for t in tables if t not in present)
    if missing:
        raise BackupError(
            f"the server {_shown(url)} lacks {len(missing)} of the design's tables; is this "
            "client directory's server.json right (`veil config`)?"
        )
    return schema, tables


def _schema_and_tables(url: str) -> tuple[str, set[str]]:
    """A PostgreSQL server's current schema and the tables in it."""
    server = connect_existing(url)
    try:
        schema = str(server.execute("SELECT current_schema()").column(0)[0].as_py())
        return schema, set(server.table_names())
    finally:
        server.close()


def _restore_server(file: Path, kind: str, url: str, manifest: dict[str, object]) -> None:
    if kind != _kind(url):
        raise BackupError(f"the backup holds a {kind} server; restore it into a {kind} URL")
    if kind == "duckdb":
        path = Path(database_path(url))
        if path.exists():
            raise BackupError(f"{path} exists; restore into a new DuckDB file")
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        shutil.copyfile(file, partial)
        partial.rename(path)
        return
    schema, present = _schema_and_tables(url)
    dumped = _dumped_tables(_pg_tool(["pg_restore", "--list", str(file)]))
    dumped_schema = dumped[0][0] if dumped else schema
    if dumped_schema != schema:
        raise BackupError(
            f"the backup's tables were in schema {dumped_schema}; the server {_shown(url)} "
            f"writes to schema {schema}: restore into a database whose search_path starts "
            f"with {dumped_schema}"
        )
    if present:
        clash = sorted(present & {name for _, name in dumped})
        if clash:
            raise BackupError(
                f"the server {_shown(url)} already holds {len(clash)} of the backup's tables; "
                "restore into an empty schema"
            )
    _pg_tool(["pg_restore", "--no-owner", "--no-privileges", "--exit-on-error",
              "--single-transaction", f"--dbname={url}", str(file)])  # fmt: skip


def _dumped_tables(listing: str) -> list[tuple[str, str]]:
    """(schema, name) of the ``ID; OID OID TABLE schema name owner`` lines of
    ``pg_restore --list`` (not its ``TABLE DATA`` lines)."""
    found = []
    for line in listing.splitlines():
        parts = line.split()
        is_table = len(parts) >= 6 and parts[0].endswith(";") and parts[3] == "TABLE"
        if is_table and parts[4] != "DATA":
            found.append((parts[4], parts[5]))
    return found


def _pg_tool(command: list[str]) -> str:
    """Run pg_dump or pg_restore; its error in words, the URL's password never shown."""
    if shutil.which(command[0]) is None:
        raise BackupError(
            f"{command[0]} is not installed; install PostgreSQL's client programs "
            "(Debian: apt-get install postgresql-client)"
        )
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise BackupError(f"{command[0]} failed: {lines[-1] if lines else done.returncode}")
    return done.stdout


def _pg_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _shown(url: str) -> str:
    """``url`` without a password (and without its options), for messages."""
    if not url.startswith(("postgresql://", "postgres://")):
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    user = unquote(parts.username) if parts.username else ""
    options = parse_qs(parts.query).get("options", [""])[0]
    at = f"{user}@" if user else ""
    port = f":{parts.port}" if parts.port else ""
    shown = f"{parts.scheme}://{at}{host}{port}{parts.path}"
    return f"{shown} ({options})" if options else shown


# -- files -----------------------------------------------------------------------


def _kept(name: str, include_key: bool) -> bool:
    if name in _NOT_COPIED or name.endswith(".tmp"):
        return False
    return include_key or name != KEY_FILE


def _digests(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): _sha256(path)
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }


def _check_digests(root: Path, manifest: dict[str, object]) -> None:
    files = manifest.get("files")
    assert isinstance(files, dict)
    for name, digest in files.items():
        path = root / name
        if not path.is_file():
            raise BackupError(f"the backup {root} lacks {name}: it is incomplete")
        if _sha256(path) != digest:
            raise BackupError(f"{path} differs from when it was backed up: the backup is damaged")
    if DESIGN_FILE not in {Path(n).name for n in files}:
        raise BackupError(f"the backup {root} has no design: it is not a client directory's")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
