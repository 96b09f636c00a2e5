"""The client directory: key file, physical design and server settings.

```
CDIR/            mode 0700
  key.json       the master key (veil.crypto.keys format, mode 0600)
  design.json    the physical design (plaintext schema + server columns)
  server.json    {"url": "duckdb:///..."}
```

Everything secret or schema-revealing lives here, on the trusted client; the
server sees only what the design's opaque names and ciphertexts show.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from veil.crypto.keys import MasterKey, load_key_file, write_key_file
from veil.design.model import PhysicalDesign
from veil.errors import WrongKeyError
from veil.sql.errors import ClientDirectoryError

KEY_FILE = "key.json"
DESIGN_FILE = "design.json"
SERVER_FILE = "server.json"


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
        return load_key_file(self.key_path)

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
    return ClientDir(target)


def create_client_dir(path: str | os.PathLike[str], server_url: str) -> tuple[ClientDir, MasterKey]:
    """Create (or reuse) a client directory for ``server_url``; returns it and its key."""
    target = Path(path)
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    client = ClientDir(target)
    master = client.master_key() if client.key_path.exists() else write_key_file(client.key_path)
    if client.server_path.exists() and client.server_url() != server_url:
        raise ClientDirectoryError(
            f"{target} already belongs to server {client.server_url()}; "
            "use another client directory for another server"
        )
    client.server_path.write_text(json.dumps({"url": server_url}) + "\n")
    return client, master
