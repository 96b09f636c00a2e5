"""The users ``veil serve`` accepts: SCRAM-SHA-256 verifiers in the client directory.

``users.json`` (mode 0600, beside the key file) maps each user name to a
random salt and the PBKDF2-HMAC-SHA-256 of the password over
``SCRAM_ITERATIONS`` rounds: what SCRAM needs to check a client, never the
password itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path

from veil.errors import VeilError

USERS_FILE = "users.json"
SCRAM_ITERATIONS = 4096  # veil_wire's, and PostgreSQL's default


class UserError(VeilError):
    anchor = "users"


def users_path(client_dir: str | os.PathLike[str]) -> Path:
    return Path(client_dir) / USERS_FILE


def load(client_dir: str | os.PathLike[str]) -> dict[str, dict[str, str]]:
    path = users_path(client_dir)
    if not path.exists():
        return {}
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the users of {client_dir} ({path}): {exc}") from None
    return found if isinstance(found, dict) else {}


def add(client_dir: str | os.PathLike[str], name: str, password: str) -> None:
    """Add or replace user ``name`` (written atomically, mode 0600)."""
    if not name or any(c in name for c in "\0\n"):
        raise UserError(f"{name!r} is not a usable user name")
    if len(password) < 8:
        raise UserError("the password must have at least 8 characters")
    users = load(client_dir)
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, SCRAM_ITERATIONS)
    users[name] = {"salt": salt.hex(), "salted_password": salted.hex()}
    _save(client_dir, users)


def names(client_dir: str | os.PathLike[str]) -> list[str]:
    """The users ``veil serve`` accepts, by name."""
    return sorted(load(client_dir))


def remove(client_dir: str | os.PathLike[str], name: str) -> None:
    """Remove user ``name``: a running ``veil serve`` refuses its next connection.

    Connections it has open go on until they end (PostgreSQL's DROP ROLE waits
    for none either; stop the server to cut them)."""
    users = load(client_dir)
    if name not in users:
        known = ", ".join(sorted(users)) or "none yet"
        raise UserError(f"there is no user {name!r} in {client_dir}; the users are: {known}")
    del users[name]
    _save(client_dir, users)


def _save(client_dir: str | os.PathLike[str], users: dict[str, dict[str, str]]) -> None:
    """Write ``users`` atomically (a new file renamed over the old), mode 0600."""
    path = users_path(client_dir)
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(users, out, indent=1)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def verifier(client_dir: str | os.PathLike[str], name: str) -> tuple[bytes, bytes] | None:
    entry = load(client_dir).get(name)
    if entry is None:
        return None
    return bytes.fromhex(entry["salt"]), bytes.fromhex(entry["salted_password"])
