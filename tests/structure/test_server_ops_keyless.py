"""The server side's crypto holds no key: importing ``veil.crypto.server_ops`` loads no keyed module.

Backends, and Spark's workers that run their functions, import
``veil.crypto.server_ops`` and nothing else from ``veil.crypto``
(``tests/structure/test_imports.py`` checks that). These tests check what that one
import loads, in a fresh interpreter: no module that imports
``veil.crypto.keys`` or defines a key-holding class. Key holders are found with
``ast``, not listed by hand: Veil's keyed classes derive themselves from the
master key (``from_master``) or refuse to be pickled (``__reduce__``), so a new
scheme is covered as soon as it is written.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tests.structure.test_imports import all_edges, modules

pytestmark = pytest.mark.unit

SERVER_OPS = "veil.crypto.server_ops"
KEYS = "veil.crypto.keys"
KEY_HOLDER_METHODS = frozenset({"from_master", "__reduce__"})


def key_holders() -> dict[str, str]:
    """Every Veil module that can hold a key, with the reason."""
    holders = {
        e.importer: f"imports {KEYS} (line {e.line})" for e in all_edges() if e.imported == KEYS
    }
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                methods = {m.name for m in node.body if isinstance(m, ast.FunctionDef)}
                if methods & KEY_HOLDER_METHODS:
                    held = ", ".join(sorted(methods & KEY_HOLDER_METHODS))
                    holders.setdefault(name, f"class {node.name} defines {held}")
    return holders


def key_holders_loaded_by(module: str) -> dict[str, str]:
    """The key holders in ``sys.modules`` after a fresh interpreter imports ``module``."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(run.stdout))
    assert module in loaded
    return {name: why for name, why in key_holders().items() if name in loaded}


def test_the_key_holders_are_found() -> None:
    holders = key_holders()
    schemes = {"veil.crypto.joinadj", "veil.crypto.rowrnd", "veil.crypto.search"}
    assert {KEYS, "veil.crypto.paillier", *schemes} <= set(holders)
    assert SERVER_OPS not in holders


def test_importing_server_ops_loads_no_key_holder() -> None:
    loaded = key_holders_loaded_by(SERVER_OPS)
    listing = "".join(f"\n  {name}: {why}" for name, why in sorted(loaded.items()))
    assert not loaded, f"importing {SERVER_OPS} loads modules that hold keys:{listing}"


def test_the_check_sees_a_keyed_import() -> None:
    # The same check fails for a module that does load a key holder.
    assert {KEYS, "veil.crypto.rowrnd"} <= set(key_holders_loaded_by("veil.crypto.rowrnd"))
