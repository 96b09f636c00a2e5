"""``pip install veil`` ships no tooling: no benchmarks, TPC-H or test servers, no matplotlib.

The tooling lives in ``python/veil_dev`` beside the shipping package (see its
``__init__``). Maturin packs into the wheel only the package ``module-name``
names under ``python-source`` (and any ``python-packages`` or ``include`` it is
given), so the fast tests read those rules from pyproject.toml and the files
they select; the slow one builds the wheel, installs it into a clean venv and
runs it there.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
MATURIN = PYPROJECT["tool"]["maturin"]
TOOLING = "veil_dev"
# Names no file of the wheel may have in its path: the tooling package and its parts.
TOOLING_PARTS = frozenset({TOOLING, "bench", "servers", "tpch", "demo.py"})
# Distributions only the tooling needs: never a requirement of `pip install veil`.
TOOLING_DISTRIBUTIONS = frozenset({"matplotlib", "tpchgen-cli"})
# Optional imports of shipping code: module -> (library, the extra that installs it). Each
# must stand inside a function, and the command must say what to install when it is absent.
OPTIONAL_IMPORTS = {"veil.frontend.leakage": ("matplotlib", "plot")}
# The one shipping module that may name the tooling: the command line looks it up by name.
NAMES_THE_TOOLING = "veil.cli"


def wheel_python_files() -> list[Path]:
    """The Python-side files maturin puts in the wheel, by the rules in pyproject.toml."""
    source = REPO / MATURIN["python-source"]
    packages = [MATURIN["module-name"].partition(".")[0], *MATURIN.get("python-packages", [])]
    return sorted(
        path
        for name in packages
        for path in (source / name).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )


def requirement_name(requirement: str) -> str:
    """``psycopg[binary]>=3.2`` -> ``psycopg``."""
    found = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert found, requirement
    return found.group(0).lower().replace("_", "-")


def shipping_modules() -> dict[str, ast.Module]:
    source = REPO / MATURIN["python-source"]
    return {
        ".".join(path.relative_to(source).with_suffix("").parts): ast.parse(path.read_text())
        for path in wheel_python_files()
        if path.suffix == ".py"
    }


def imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


def test_maturin_packs_only_the_shipping_package() -> None:
    assert MATURIN["module-name"].partition(".")[0] == "veil"
    assert TOOLING not in MATURIN.get("python-packages", [])
    assert not [p for p in MATURIN.get("include", []) if TOOLING in str(p)]
    files = wheel_python_files()
    assert REPO / "python" / "veil" / "cli.py" in files
    assert (REPO / "python" / TOOLING / "cli.py").exists()  # the tooling is there, not packed


def test_no_file_of_the_wheel_is_tooling() -> None:
    source = REPO / MATURIN["python-source"]
    tooling = [
        str(p.relative_to(source))
        for p in wheel_python_files()
        if TOOLING_PARTS & set(p.relative_to(source).parts)
    ]
    assert not tooling, f"the wheel would hold tooling: {tooling}"


def test_required_dependencies_leave_the_tooling_out() -> None:
    required = {requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert not required & TOOLING_DISTRIBUTIONS
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {requirement_name(r) for r in extras["bench"]} >= TOOLING_DISTRIBUTIONS
    for library, extra in OPTIONAL_IMPORTS.values():
        assert library in {requirement_name(r) for r in extras[extra]}


def test_shipping_code_imports_no_tooling_library() -> None:
    offending = []
    for module, tree in shipping_modules().items():
        top_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            for name in imported(node):
                library = name.partition(".")[0]
                allowed = OPTIONAL_IMPORTS.get(module, ("", ""))[0] == library
                if library in {TOOLING, "matplotlib", "tpchgen_cli"} and not (
                    allowed and id(node) not in top_level
                ):
                    offending.append(f"{module}:{node.lineno} imports {name}")
    assert not offending, "shipping code imports tooling:\n  " + "\n  ".join(offending)


def test_only_the_command_line_names_the_tooling() -> None:
    # importlib.import_module("veil_dev...") is an import the ast walk above cannot see
    offending = [
        f"{module}:{node.lineno}"
        for module, tree in shipping_modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith(TOOLING)
        and module != NAMES_THE_TOOLING
    ]
    assert not offending, f"shipping code names {TOOLING}: {offending}"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel maturin builds from this tree, and a clean venv's Python it is installed in."""
    root = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(root / "wheels")
    return wheel, install_into_clean_venv(wheel, root / "venv")


@pytest.mark.slow
def test_the_built_wheel_holds_no_tooling(built: tuple[Path, str]) -> None:
    wheel, _ = built
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"veil"}
    assert not [n for n in names if TOOLING_PARTS & set(n.split("/"))]
    required = {
        requirement_name(line.removeprefix("Requires-Dist: "))
        for line in lines
        if line.startswith("Requires-Dist: ") and "extra ==" not in line
    }
    assert "numpy" in required and not required & TOOLING_DISTRIBUTIONS


@pytest.mark.slow
def test_the_clean_venv_has_no_tooling_and_no_matplotlib(built: tuple[Path, str]) -> None:
    _, python = built
    site = Path(run(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    installed = {p.name for p in site.iterdir()}
    assert "veil" in installed and TOOLING not in installed
    assert not {n for n in installed if n.startswith(("matplotlib", "tpchgen"))}
    assert run(python, "import importlib.util as u; print(u.find_spec('veil_dev'))") == "None"


@pytest.mark.slow
def test_the_installed_veil_sends_tooling_commands_to_a_checkout(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    _, python = built
    # the dependencies come from this environment's site-packages (not the checkout: its
    # .pth file is read only in a site directory), veil from the clean venv
    env = dict(os.environ, PYTHONPATH=sysconfig.get_paths()["purelib"])
    where = run(python, "import veil; print(veil.__file__)", env=env)
    assert where.startswith(str(Path(python).parents[1]))
    shown = veil_command(python, ["--help"], env, tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "bench" in shown.stdout and "(in a Veil checkout only)" in shown.stdout
    done = veil_command(python, ["bench", "crypto"], env, tmp_path)
    assert done.returncode == 2
    assert "veil bench runs from a Veil checkout" in done.stderr


def veil_command(
    python: str, args: list[str], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    command = [python, "-m", "veil", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, check=False)


def build_wheel(out: Path) -> Path:
    # Through pip, as `pip install veil` from source and the bootstrap's install build it
    # (maturin's PEP 517 backend, which skips auditwheel: the wheel links the system's
    # libgmp). `maturin build` from the command line would rebuild PyO3 and the extension
    # (about 50 s in CI): cargo's fingerprints of the two kinds of build differ.
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True)
    (wheel,) = out.glob("veil-*.whl")
    return wheel


def install_into_clean_venv(wheel: Path, directory: Path) -> str:
    venv.EnvBuilder(with_pip=False).create(directory)
    python = str(directory / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps"]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True)
    return python


def run(python: str, code: str, env: dict[str, str] | None = None) -> str:
    """``code`` run by the clean venv's ``python`` away from the checkout, in ``env`` or
    else this run's environment less PYTHONPATH: the Spark backend puts the checkout's
    python/ there for its workers, where the tooling would be found."""
    clean = env or {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        env=clean,
        cwd=Path(python).parents[1],
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()
