"""A private mongo-java-server (MongoDB wire protocol over H2's MVStore) for tests and benchmarks.

mongo-java-server (de.bwaldvogel, BSD-3-Clause) is a Java reimplementation of
the MongoDB wire protocol, not MongoDB. It is Veil's second server beside
FerretDB because it has what FerretDB 1.24 lacks: the ``$push`` accumulator
and every accumulator of a ``$group`` (FerretDB computes only the first).

The jars come from Maven Central (``servers/mongo-java-server/pom.xml``,
copied by ``mvn dependency:copy-dependencies`` into
``target/mongo-java-server/lib``) and the project's launcher
(``VeilMongoJavaServer.java``) is compiled by javac into
``target/mongo-java-server/classes``; both are redone only when the POM or the
launcher changes, under a file lock so that two processes never build at once.

A server directory holds the MVStore file (``data/mongo.mv``), the log
(``mongo-java-server.log``) and ``server.json`` with the kind, pid and port of
the running server.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from veil.errors import VeilError
from veil_dev.servers.builds import ROOT, TARGET, current, locked
from veil_dev.servers.maven import copy_dependencies, require_tool
from veil_dev.servers.process import ServerProcess

MONGO_JAVA_SERVER_VERSION = "1.47.0"  # the version servers/mongo-java-server/pom.xml names
SOURCES = ROOT / "servers" / "mongo-java-server"
POM = SOURCES / "pom.xml"
LAUNCHER = SOURCES / "VeilMongoJavaServer.java"
MAIN_CLASS = "VeilMongoJavaServer"
BUILD_DIR = TARGET / "mongo-java-server"
LIB = BUILD_DIR / "lib"
CLASSES = BUILD_DIR / "classes"
CLASSPATH = f"{CLASSES}:{LIB}/*"
BUILD_TIMEOUT_S = 300.0

# The JVM's default heap ceiling is a quarter of the machine's memory. The benchmarks run
# this server beside FerretDB and a client that decrypts, so a fixed ceiling keeps it from
# crowding them out and makes runs comparable across machines; 2 GB still holds what
# mongo-java-server keeps in memory per request (a $group's whole input, a sort's results).
JVM_OPTIONS = (
    "-Xmx2g",
    # An OutOfMemoryError in one of netty's threads would leave a server that answers some
    # requests and not others; better that it exits and says so in its log.
    "-XX:+ExitOnOutOfMemoryError",
    # Connections come and go at INFO; warnings and errors are what a failed run needs.
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
)


class MongoJavaServerError(VeilError):
    """mongo-java-server could not be fetched, compiled or started."""

    anchor = "mongo-java-server"


def build(force: bool = False) -> str:
    """Fetch the jars and compile the launcher if need be; return the classpath to run."""
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with locked(BUILD_DIR / ".build.lock"):
        fetched = LIB / ".complete"
        if force or not current(fetched, [POM]):
            _fetch_jars(fetched)
        if force or not current(CLASSES / f"{MAIN_CLASS}.class", [LAUNCHER, fetched]):
            _compile()
    return CLASSPATH


def _fetch_jars(fetched: Path) -> None:
    # Start from an empty directory: the jars of a POM's earlier versions must not stay on
    # the classpath beside the new ones.
    shutil.rmtree(LIB, ignore_errors=True)
    copy_dependencies(POM.read_text(), LIB, "mongo-java-server", MongoJavaServerError)
    fetched.touch()


def _compile() -> None:
    javac = require_tool("javac", "compile Veil's mongo-java-server launcher", MongoJavaServerError)
    partial = BUILD_DIR / "classes.partial"
    shutil.rmtree(partial, ignore_errors=True)
    command = [javac, "--release", "17", "-cp", f"{LIB}/*", "-d", str(partial), str(LAUNCHER)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        raise MongoJavaServerError(
            f"compiling {LAUNCHER.name} failed (exit {result.returncode}): {result.stderr[-2000:]}"
        )
    shutil.rmtree(CLASSES, ignore_errors=True)
    partial.rename(CLASSES)


class MongoJavaServer(ServerProcess):
    """One mongo-java-server process over one MVStore file; ``start`` it, ``stop`` it when done."""

    kind = "mongo-java-server"
    name = "mongo-java-server"
    version = MONGO_JAVA_SERVER_VERSION
    log_name = "mongo-java-server.log"
    error = MongoJavaServerError
    start_timeout_s = 60.0  # a JVM on a busy two-core machine takes seconds to come up
    stop_timeout_s = 60.0  # closing the MVStore writes what its auto-commit has not

    @property
    def store_path(self) -> Path:
        return self.data_dir / "mongo.mv"

    def prepare(self) -> None:
        build()

    def command(self) -> list[str]:
        java = require_tool("java", "run mongo-java-server (Java 17 is expected)", self.error)
        store, port = str(self.store_path), str(self.port)
        return [java, *JVM_OPTIONS, "-cp", CLASSPATH, MAIN_CLASS, store, port]
