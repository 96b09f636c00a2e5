"""TPC-DS data as Parquet files, one per table, through the ``tpcgen-cli`` package.

``tpcgen-cli`` (tpcgen-rs) writes the 24 TPC-DS tables as dsdgen does, plus
``dbgen_version``, the generator's own metadata, which no query reads and which
is removed so that a load of the folder holds the benchmark's tables only.
``customer_demographics`` has 1.9 million rows at every scale factor, so even
SF 0.01 takes a few seconds to generate.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from veil_dev.tpch.gen import TpchError, generator

METADATA = "dbgen_version"


class TpcdsError(TpchError):
    """TPC-DS data or queries could not be generated or read."""


def generate(scale_factor: float, out: Path, *, overwrite: bool = False) -> list[Path]:
    """Write the TPC-DS tables at ``scale_factor`` as ``out/<table>.parquet``."""
    if scale_factor <= 0:
        raise TpcdsError(f"the scale factor must be positive, got {scale_factor}")
    out.mkdir(parents=True, exist_ok=True)
    if any(out.glob("*.parquet")) and not overwrite:
        raise TpcdsError(f"{out} already holds Parquet files; pass --overwrite to replace them")
    command = [generator("tpcgen-cli"), "tpcds", "parquet", "-s", f"{scale_factor:g}"]
    command += ["-o", str(out), "-q"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise TpcdsError(f"tpcgen-cli failed: {result.stderr.strip()[-2000:]}")
    (out / f"{METADATA}.parquet").unlink(missing_ok=True)
    return tables(out)


def tables(directory: Path) -> list[Path]:
    """The generated tables' files in ``directory``, by name."""
    return sorted(p for p in directory.glob("*.parquet") if p.stem != METADATA)
