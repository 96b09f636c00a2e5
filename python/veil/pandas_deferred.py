"""The ``veil`` command does not import pandas: 0.25-0.35 s of its first query.

pyarrow imports pandas the first time it converts Python objects (``pa.array``
of a list, ``pa.scalar``, a compute function given a Python number: its pandas
shim and its C++ type inference both ask), to learn whether they are pandas
objects. Veil never hands pyarrow a pandas object, yet that import was the
largest part of ``veil query``'s first query (TPC-DS q01: 0.3 s of 0.4 s), and
plaintext DuckDB never pays it.

``defer_pandas`` puts a finder first on ``sys.meta_path`` that refuses
``import pandas`` when the import is asked for Veil (the first Python frame
outside importlib and pyarrow is one of Veil's modules): pyarrow then converts
as it does where pandas is not installed. Any other import of pandas goes
through, the finder steps aside for good, and pyarrow's shim is told to look
again once pandas is loaded.

Only the ``veil`` command installs it (``veil.cli.main`` run as the program),
never ``import veil``: pyarrow's C++ side asks for pandas once per process and
never again, so in an application's process a refusal would leave the
application's own ``pd.NA`` and ``NaT`` unrecognised by pyarrow for good. The
command runs no application code, so nothing there can hold a pandas value.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from importlib.machinery import ModuleSpec
from types import FrameType, ModuleType
from typing import Any

PANDAS = "pandas"
_PASSING = ("importlib", "_frozen_importlib", "pyarrow", __name__)
_installed = threading.Lock()


def defer_pandas() -> None:
    """Install the finder, once per process, unless pandas is loaded already."""
    with _installed:
        if PANDAS in sys.modules or any(isinstance(f, _DeferPandas) for f in sys.meta_path):
            return
        sys.meta_path.insert(0, _DeferPandas())


class _DeferPandas(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != PANDAS:
            return None
        if _asked_for_veil(sys._getframe(1)):
            raise ImportError("pandas is not imported on Veil's behalf (veil.pandas_deferred)")
        # Someone else wants pandas: from now on it imports as usual.
        with _installed:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
        spec = importlib.util.find_spec(PANDAS)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRearm(spec.loader)
        return spec


def _asked_for_veil(frame: FrameType | None) -> bool:
    """Is the first frame outside importlib and pyarrow one of Veil's modules?"""
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if not module.startswith(_PASSING):
            return module == "veil" or module.startswith("veil.")
        frame = frame.f_back
    return False


class _ThenRearm(importlib.abc.Loader):
    """pandas's own loader, then pyarrow told that pandas is there now."""

    def __init__(self, loader: Any):
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _rearm_pyarrow()

    def __getattr__(self, name: str) -> Any:  # resource readers and the like: pandas's loader's
        return getattr(self._loader, name)


def _rearm_pyarrow() -> None:
    """pyarrow records a failed pandas import; a raising check makes it try once more."""
    shim = getattr(sys.modules.get("pyarrow.lib"), "_pandas_api", None)
    lock = getattr(shim, "_lock", None)
    if shim is None or lock is None or lock.locked():
        return  # pyarrow itself is importing pandas (its lock held): it records the success
    try:
        if not shim.have_pandas:
            shim.pd  # noqa: B018  (the property imports pandas again, which now succeeds)
    except Exception:  # never fail the application's own import of pandas
        return
