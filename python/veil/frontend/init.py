"""``veil init``: an empty encrypted database, for applications that make their own tables.

``veil load`` starts from data; an application (psql, an ORM's migrations,
pgbench) starts from nothing and sends ``CREATE TABLE``. ``init`` makes what
those statements need: the client directory with its key (new, given, or kept
by a key provider), an empty design bound to that key, and a server that
answers (a new DuckDB file is created; a PostgreSQL server must be reachable).
"""

from __future__ import annotations

import os

from veil.backends import canonical_url, connect
from veil.design.model import PhysicalDesign
from veil.session.clientdir import ClientDir, create_client_dir, open_client_dir
from veil.sql.errors import ClientDirectoryError


def init(
    client_dir: str | os.PathLike[str],
    server_url: str,
    *,
    key_file: str | os.PathLike[str] | None = None,
    key_provider: str | None = None,
) -> ClientDir:
    """Make an empty encrypted database: ``client_dir`` (new or empty) for ``server_url``."""
    url = canonical_url(server_url)
    if os.path.isdir(client_dir) and os.listdir(client_dir):
        raise ClientDirectoryError(
            f"{client_dir} is not empty; veil init makes a new client directory (to add "
            "tables to an existing one, connect to it and CREATE TABLE)"
        )
    server = connect(url)  # first: an unreachable server leaves no client directory behind
    try:
        names = server.table_names()
    finally:
        server.close()
    if names and url.startswith("duckdb:"):
        raise ClientDirectoryError(
            f"the server {url} already holds tables; give a new DuckDB file to veil init"
        )
    client, master = create_client_dir(client_dir, url, key_file, key_provider)
    PhysicalDesign(master.fingerprint()).save(client.design_path)
    return open_client_dir(client.path)
