"""The users ``veil serve`` accepts: SCRAM-SHA-256 verifiers in the client directory.

``users.json`` (mode 0600, beside the key file) maps each user name to a
random salt and the PBKDF2-HMAC-SHA-256 of the password over
``SCRAM_ITERATIONS`` rounds: what SCRAM needs to check a client, never the
password itself.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from veil.errors import VeilError

USERS_FILE = "users.json"
SCRAM_ITERATIONS = 4096  # veil_wire's, and PostgreSQL's default


class UserError(VeilError):
    anchor = "users"


def users_path(client_dir: str | os.PathLike[str]) -> Path:
    return Path(client_dir) / USERS_FILE


def load(client_dir: str | os.PathLike[str]) -> dict[str, dict[str, object]]:
    path = users_path(client_dir)
    if not path.exists():
        return {}
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the users of {client_dir} ({path}): {exc}") from None
    return found if isinstance(found, dict) else {}


def add(
    client_dir: str | os.PathLike[str], name: str, password: str, *, admin: bool = True
) -> None:
    """Add user ``name``, or set an existing user's password (their rights stay).

    A new user is an administrator (every right, DDL, GRANT) unless ``admin`` is
    false: then they may do only what is granted them (``veil.serve.grants``)."""
    if not name or any(c in name for c in "\0\n"):
        raise UserError(f"{name!r} is not a usable user name")
    if len(password) < 8:
        raise UserError("the password must have at least 8 characters")
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, SCRAM_ITERATIONS)

    def added(entry: dict[str, object] | None) -> dict[str, object]:
        rights: dict[str, object] = {"admin": admin, "grants": {}} if entry is None else {}
        kept = {k: v for k, v in (entry or {}).items() if k in ("admin", "grants")}
        return {"salt": salt.hex(), "salted_password": salted.hex(), **rights, **kept}

    change(client_dir, name, added, create=True)


def change(
    client_dir: str | os.PathLike[str],
    name: str,
    update: Callable[[dict[str, object] | None], dict[str, object]],
    *,
    create: bool = False,
) -> None:
    """Replace user ``name``'s entry by ``update(entry)``, under the users file's lock
    (two connections granting at once both land)."""
    with _locked(client_dir):
        users = load(client_dir)
        if name not in users and not create:
            known = ", ".join(sorted(users)) or "none yet"
            raise UserError(f"there is no user {name!r} in {client_dir}; the users are: {known}")
        users[name] = update(users.get(name))
        _save(client_dir, users)


@contextmanager
def _locked(client_dir: str | os.PathLike[str]) -> Iterator[None]:
    fd = os.open(Path(client_dir) / (USERS_FILE + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def names(client_dir: str | os.PathLike[str]) -> list[str]:
    """The users ``veil serve`` accepts, by name."""
    return sorted(load(client_dir))


def remove(client_dir: str | os.PathLike[str], name: str) -> None:
    """Remove user ``name``: a running ``veil serve`` refuses its next connection.

    Connections it has open go on until they end (PostgreSQL's DROP ROLE waits
    for none either; stop the server to cut them)."""
    with _locked(client_dir):
        users = load(client_dir)
        if name not in users:
            known = ", ".join(sorted(users)) or "none yet"
            raise UserError(f"there is no user {name!r} in {client_dir}; the users are: {known}")
        del users[name]
        _save(client_dir, users)


def _save(client_dir: str | os.PathLike[str], users: dict[str, dict[str, object]]) -> None:
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
    return bytes.fromhex(str(entry["salt"])), bytes.fromhex(str(entry["salted_password"]))
