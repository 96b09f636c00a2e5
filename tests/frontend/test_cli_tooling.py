"""``veil`` finds the tooling's commands by name and says where they run when it is absent;
an optional library's absence is said the same way."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

import veil.cli
from veil.cli import TOOLING_COMMANDS, TOOLING_MODULE, build_parser, main
from veil_dev.cli import register

pytestmark = pytest.mark.unit


def commands(parser: argparse.ArgumentParser) -> set[str]:
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(subparsers.choices)


def test_the_tooling_registers_exactly_the_commands_veil_stands_in_for() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert commands(parser) == set(TOOLING_COMMANDS)


def test_in_a_checkout_veil_has_the_tooling_commands() -> None:
    assert set(TOOLING_COMMANDS) <= commands(build_parser())
    with pytest.raises(SystemExit):  # the real command's parser: --sf takes a number
        build_parser().parse_args(["demo", "--sf", "many"])


@pytest.mark.parametrize("argv", [["bench", "crypto", "--json", "x.json"], ["demo"], ["kv"]])
def test_without_the_tooling_each_command_says_where_it_runs(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    installed = veil.cli._installed
    monkeypatch.setattr(veil.cli, "_installed", lambda m: m != TOOLING_MODULE and installed(m))
    assert set(TOOLING_COMMANDS) <= commands(build_parser())
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert f"veil {argv[0]} runs from a Veil checkout" in said and "make setup" in said


def test_leakage_png_without_matplotlib_says_which_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else find_spec(name, *a),
    )
    assert main(["leakage", str(tmp_path), "--png", str(tmp_path / "l.png")]) == 2
    assert "pip install 'veil[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "l.png").exists()
