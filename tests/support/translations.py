"""The statements the wire server translates with sqlglot, counted (``veil.serve.shapes``)."""

from __future__ import annotations

import pytest

from veil.serve import dialect


def counted_translations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that receives the text of every statement translated from now on."""
    translated: list[str] = []
    real = dialect.classify

    def counted(text: str) -> dialect.Statement:
        translated.append(text)
        return real(text)

    monkeypatch.setattr(dialect, "classify", counted)
    return translated
