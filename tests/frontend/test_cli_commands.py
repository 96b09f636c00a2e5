"""``veil COMMAND`` builds only the parser of the module that registers COMMAND (issue 41:
a fresh `veil query` paid ~35 ms registering every command); ``veil.cli.COMMANDS``
must name each module's commands exactly, or a command would go missing."""

from __future__ import annotations

import argparse
import importlib

import pytest

from veil.cli import COMMANDS, TOOLING_COMMANDS, build_parser

pytestmark = pytest.mark.unit


def commands(parser: argparse.ArgumentParser) -> set[str]:
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(subparsers.choices)


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_each_module_registers_the_commands_the_table_names(module: str) -> None:
    parser = argparse.ArgumentParser()
    importlib.import_module(module).register(parser.add_subparsers())
    assert commands(parser) == set(COMMANDS[module])


def test_a_command_builds_its_own_modules_parser_only() -> None:
    assert commands(build_parser("query")) == set(COMMANDS["veil.frontend.cli"])
    assert commands(build_parser("demo")) == set(TOOLING_COMMANDS)
    args = build_parser("query").parse_args(["query", "dir", "SELECT 1", "--format", "csv"])
    assert (args.client_dir, args.sql, args.format) == ("dir", "SELECT 1", "csv")


@pytest.mark.parametrize("word", [None, "--help", "--version", "nonsense"])
def test_anything_else_builds_every_command(word: str | None) -> None:
    everything = {c for names in COMMANDS.values() for c in names} | set(TOOLING_COMMANDS)
    assert commands(build_parser(word)) == everything
