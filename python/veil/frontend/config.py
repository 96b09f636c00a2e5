"""A client directory's settings changed in place: its server's URL."""

from __future__ import annotations

import json
import os

from veil.backends import canonical_url, connect_existing
from veil.design.model import PhysicalDesign
from veil.session.clientdir import ClientDir
from veil.sql.errors import ClientDirectoryError


def move_server(client: ClientDir, url: str, *, check: bool = True) -> str:
    """Point ``client`` at ``url`` (stored canonical); returns the stored URL.

    ``check``: open the server first and refuse if it lacks a table of the
    directory's design (nothing is changed then).
    """
    stored = canonical_url(url)
    if check and client.has_design():
        missing = _missing_tables(client, stored)
        if missing:
            raise ClientDirectoryError(
                f"the server {stored} does not hold the tables of {client.path} "
                f"(missing: {', '.join(missing)}); copy or restore the server's data there "
                "first, or give --no-check to point the directory at it anyway"
            )
    settings = json.loads(client.server_path.read_text()) if client.server_path.exists() else {}
    settings["url"] = stored
    temporary = client.server_path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(settings) + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, client.server_path)  # readers see the old file or the new one
    return stored


def _missing_tables(client: ClientDir, url: str) -> list[str]:
    """The design's tables (by their plaintext names) the server at ``url`` lacks."""
    design = PhysicalDesign.load(client.design_path)  # names only: no key needed
    server = connect_existing(url)
    try:
        present = {name.lower() for name in server.table_names()}
    finally:
        server.close()
    return sorted(t.name for t in design.tables.values() if t.server_name.lower() not in present)
