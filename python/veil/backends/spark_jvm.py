"""Veil's JVM server functions for Spark: Java sources shipped with Veil, built on first use.

Spark runs a Python UDF in separate Python workers, and every value crosses to them and
back as Arrow; for Paillier's 513-byte ciphertexts that move costs more than the product
itself (``docs/spark.md``). The Paillier sum therefore also exists as a Java aggregate
(``jvm/veil/spark/HomSum.java``), compiled here with ``javac`` against the Spark jars that
PySpark ships (the Maven Central artifacts) and put on the Spark application's class path
(``spark.jars``: the driver, and every executor of a cluster).

The jar is cached under ``$VEIL_CACHE_DIR`` (default ``~/.cache/veil``), named by a hash of
the sources and of the Spark version, so a change of either builds it again. Without a
JDK (no ``javac``), or when the build fails, Spark runs the Python UDF instead: same
answers, slower. ``VEIL_SPARK_HOM=python`` chooses the Python UDF even with a JDK.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from functools import cache
from pathlib import Path

from veil.cache_dir import cache_dir

SOURCES = Path(__file__).with_name("jvm")
HOM_SUM_CLASS = "veil.spark.Functions"
_BUILD_SECONDS = 300


def wanted() -> bool:
    """Should Spark sessions use the JVM functions (unless ``VEIL_SPARK_HOM=python``)?"""
    return os.environ.get("VEIL_SPARK_HOM", "jvm").strip().lower() != "python"


@cache
def jar() -> Path | None:
    """The built jar of Veil's JVM functions, or None when it cannot be built here."""
    if not wanted():
        return None
    javac = shutil.which("javac")
    spark_jars = _spark_jars()
    if javac is None or spark_jars is None:
        return None
    sources = sorted(SOURCES.rglob("*.java"))
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.relative_to(SOURCES).as_posix().encode())
        digest.update(source.read_bytes())
    target = cache_dir() / f"veil-spark-{_spark_version()}-{digest.hexdigest()[:16]}.jar"
    if target.exists():
        return target
    try:
        _build(javac, spark_jars, sources, target)
    except (OSError, subprocess.SubprocessError):
        return None
    return target


def _build(javac: str, spark_jars: Path, sources: list[Path], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="veil-jvm-") as work:
        classes = Path(work) / "classes"
        subprocess.run(
            [javac, "--release", "17", "-nowarn", "-d", str(classes)]
            + ["-cp", str(spark_jars / "*")]
            + [str(s) for s in sources],
            check=True,
            capture_output=True,
            timeout=_BUILD_SECONDS,
        )
        # a jar is a zip file; no ``jar`` tool needed (a JRE-less javac install may lack it)
        partial = Path(work) / target.name
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for compiled in sorted(classes.rglob("*.class")):
                archive.write(compiled, compiled.relative_to(classes).as_posix())
        # another process may build the same jar at the same time: the rename is atomic
        staged = target.with_name(f".{target.name}.{os.getpid()}")
        shutil.copyfile(partial, staged)
        os.replace(staged, target)


def _spark_jars() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    return jars if jars.is_dir() else None


def _spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)
