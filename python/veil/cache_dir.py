"""The user's cache directory for what Veil can compute again: never keys, never data.

``$VEIL_CACHE_DIR``, by default ``~/.cache/veil``. A cache file is written
whole (temporary file, then rename) so a concurrent reader sees the old file
or the new one; a directory that cannot be written only costs the
recomputation.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """Where Veil keeps what it can recompute (a derived jar, catalog facts)."""
    configured = os.environ.get("VEIL_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "veil"


def write_cache_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically; do nothing if that cannot be done."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(text)
            os.replace(temporary, path)
        except OSError:
            Path(temporary).unlink(missing_ok=True)
