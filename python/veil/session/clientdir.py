"""The client directory: key file, physical design and server settings.

```
CDIR/            mode 0700
  key.json       the master key (veil.crypto.keys format, mode 0600), or, with a key
                 provider, only the key wrapped under the provider's KEK and the
                 provider's reference (veil.keys.envelope)
  .key.json.lock held while `veil rotate` replaces key.json
  design.json    the physical design (plaintext schema + server columns)
  server.json    {"url": "duckdb:///..."}
  policy.json    per-column security policy (veil.design.policy; optional, 0600)
  peels.jsonl    the onion layers peeled: when, which query asked (0600)
  design.lock    held while a design is read, changed and saved (peels, DDL)
  derivations.sealed  Paillier keys derived, sealed (veil.keys.derivations; optional)
  plans.sealed   plans for the next process, sealed (veil.session.sealed_plans; optional)
```

Everything secret or schema-revealing lives here, on the trusted client; the
server sees only what the design's opaque names and ciphertexts show.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from veil.crypto.keys import MasterKey
from veil.design.model import PhysicalDesign
from veil.design.policy import Policy
from veil.errors import WrongKeyError
from veil.keys import create_key, kept_by, load_key, load_keys
from veil.keys.generations import scope_keys
from veil.keys.providers import FILE
from veil.keys.ring import holds
from veil.sql.errors import ClientDirectoryError

KEY_FILE = "key.json"
DESIGN_FILE = "design.json"
SERVER_FILE = "server.json"
POLICY_FILE = "policy.json"
PEELS_FILE = "peels.jsonl"
LOCK_FILE = "design.lock"
_ATTEMPTS = 3


@dataclass
class ClientDir:
    path: Path

    @property
    def key_path(self) -> Path:
        return self.path / KEY_FILE

    @property
    def design_path(self) -> Path:
        return self.path / DESIGN_FILE

    @property
    def server_path(self) -> Path:
        return self.path / SERVER_FILE

    @property
    def policy_path(self) -> Path:
        return self.path / POLICY_FILE

    @property
    def peels_path(self) -> Path:
        return self.path / PEELS_FILE

    @contextmanager
    def design_lock(self) -> Iterator[None]:
        """Exclusive among processes: read, change and save the design under it."""
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def policy(self) -> Policy:
        return Policy.load(self.policy_path)

    def log_peel(self, event: dict[str, object]) -> None:
        """Append one peel to the log ``veil leakage`` reads (plaintext names: client only)."""
        fd = os.open(self.peels_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as log:
            log.write(json.dumps(event, sort_keys=True) + "\n")

    def peel_log(self) -> list[dict[str, object]]:
        if not self.peels_path.exists():
            return []
        lines = self.peels_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def server_url(self) -> str:
        try:
            settings = json.loads(self.server_path.read_text())
            return str(settings["url"])
        except FileNotFoundError:
            raise ClientDirectoryError(
                f"{self.path} is not a Veil client directory (no {SERVER_FILE}); "
                "create it with `veil load --client-dir ...`"
            ) from None
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ClientDirectoryError(
                f"{self.server_path} is malformed; rewrite it or reload"
            ) from None

    def master_key(self) -> MasterKey:
        """The master key, unwrapped by its key provider if it has one (docs/keys.md).

        While a re-key runs it is a ring of the old key and the new
        (``veil.keys.ring``), based on the key the design names.
        """
        base = PhysicalDesign.load(self.design_path).key_fingerprint if self.has_design() else None
        return load_keys(self.key_path, base)

    def following(self, master: MasterKey | None = None) -> tuple[MasterKey, PhysicalDesign]:
        """The design now, and ``master`` or, if the design moved to keys it does not
        hold (a re-key began or ended since it was opened), the key file's keys again."""
        for _ in range(_ATTEMPTS):
            design = PhysicalDesign.load(self.design_path)
            needed = {design.key_fingerprint, *scope_keys(design)}
            if (
                master is None
                or master.fingerprint() != design.key_fingerprint
                or not all(holds(master, fingerprint) for fingerprint in needed)
            ):
                master = load_keys(self.key_path, design.key_fingerprint)
            if master.fingerprint() == design.key_fingerprint:
                return master, design
            # a re-key ended between the two reads (design first, then the key file):
            # read the design again
        assert master is not None
        return master, self.design(master)  # WrongKeyError: not the data's key

    def design(self, master: MasterKey) -> PhysicalDesign:
        """The design, after checking that ``master`` is the key it was made with."""
        design = PhysicalDesign.load(self.design_path)
        if design.key_fingerprint != master.fingerprint():
            raise WrongKeyError(
                f"the key in {self.key_path} is not the key the data in {self.path} was "
                "encrypted with; restore the right key file"
            )
        return design

    def has_design(self) -> bool:
        return self.design_path.exists()


def open_client_dir(path: str | os.PathLike[str]) -> ClientDir:
    """An existing client directory (its files are checked when read)."""
    target = Path(path)
    if not target.is_dir():
        raise ClientDirectoryError(
            f"client directory {target} does not exist; create it with `veil load --client-dir {target} ...`"
        )
    if not (target / SERVER_FILE).exists():
        raise ClientDirectoryError(
            f"{target} is not a Veil client directory (it has no {SERVER_FILE}); give the "
            "directory `veil load --client-dir` created"
        )
    return ClientDir(target)


def create_client_dir(
    path: str | os.PathLike[str],
    server_url: str,
    key_file: str | os.PathLike[str] | None = None,
    key_provider: str | None = None,
) -> tuple[ClientDir, MasterKey]:
    """Create (or reuse) a client directory for ``server_url``; returns it and its key.

    ``key_file`` (from ``veil keygen``, plain or wrapped by a provider) becomes
    the directory's key; without it a fresh key is made, kept by
    ``key_provider`` (``kmip://...``, ``pkcs11:...``; default: the file). A
    directory holding no loaded table yet (a load that failed) may be pointed
    at another server.
    """
    if key_file is not None and key_provider is not None:
        raise ClientDirectoryError(
            "give --key (a key file, which names its own provider) or --key-provider "
            "(a new key kept there), not both"
        )
    target = Path(path)
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    client = ClientDir(target)
    if (
        key_provider is not None
        and client.key_path.exists()
        and not kept_by(client.key_path, key_provider)
    ):
        raise ClientDirectoryError(
            f"{target} already has its key ({client.key_path}); `veil rotate {target} --rewrap "
            f"--provider {key_provider}` moves it to another provider"
        )
    if key_file is not None:
        given = load_key(key_file)
        if client.key_path.exists() and client.master_key().fingerprint() != given.fingerprint():
            raise ClientDirectoryError(
                f"{target} already has another key ({client.key_path}); give the same key "
                "file, or another client directory"
            )
        if not client.key_path.exists():
            fd = os.open(client.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(Path(key_file).read_bytes())
    if client.key_path.exists():
        master = client.master_key()
    else:
        master = create_key(client.key_path, key_provider or FILE)
    changed = client.server_path.exists() and client.server_url() != server_url
    if changed and client.has_design():
        raise ClientDirectoryError(
            f"{target} already belongs to server {client.server_url()}; "
            "use another client directory for another server"
        )
    client.server_path.write_text(json.dumps({"url": server_url}) + "\n")
    return client, master
