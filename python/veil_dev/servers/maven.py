"""Java tools on PATH and jars from Maven Central, for the JVM servers of this package.

:mod:`.cassandra` and :mod:`.mongojava` fetch their jars the same way: a POM
listing the dependencies, ``mvn dependency:copy-dependencies`` into a lib
directory. Each passes its own error class so the message points at its own
section of ``docs/errors.md``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from veil.errors import VeilError

INSTALL_HINT = "Debian/Ubuntu: apt-get install openjdk-17-jdk-headless maven"


def require_tool(name: str, purpose: str, error: type[VeilError] = VeilError) -> str:
    """The path of ``name`` on PATH, or ``error`` saying what to install."""
    path = shutil.which(name)
    if path is None:
        raise error(
            f"{name!r} was not found on PATH; it is needed to {purpose}. Install it "
            f"({INSTALL_HINT}) and retry."
        )
    return path


def copy_dependencies(pom: str, lib: Path, what: str, error: type[VeilError] = VeilError) -> None:
    """Copy the runtime jars ``pom`` (a POM's text) depends on into ``lib``.

    The POM is written to a scratch directory so that Maven leaves nothing
    (no ``target/``) beside the project's own files.
    """
    mvn = require_tool("mvn", f"download {what} from Maven Central", error)
    with tempfile.TemporaryDirectory(prefix="veil-mvn-") as work:
        Path(work, "pom.xml").write_text(pom)
        command = [mvn, "-q", "-B", "dependency:copy-dependencies", "-DincludeScope=runtime"]
        command.append(f"-DoutputDirectory={lib}")
        done = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-2000:]
        raise error(
            f"mvn could not fetch {what} (exit {done.returncode}); check network access to "
            f"Maven Central and ~/.m2/settings.xml. Output:\n{tail}"
        )
