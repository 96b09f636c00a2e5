"""Known-answer tests for DET: NIST SP 800-38G FF1 samples and RFC 5297 AES-SIV.

The vectors live in JSON files in vectors/ beside this test (each names its source); the
Rust tests (`cargo test`) read the same files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from veil import _native
from veil.crypto.det import DetBytes, DetInt

pytestmark = pytest.mark.vectors

VECTOR_DIR = Path(__file__).parent / "vectors"


def _load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((VECTOR_DIR / name).read_text())
    assert document["source"], "every vector file says where it came from"
    return document


FF1 = _load("ff1_nist_sp800_38g.json")
SIV = _load("aes_siv_rfc5297.json")


def _numerals(text: str) -> list[int]:
    return [FF1["alphabet"].index(c) for c in text]


@pytest.mark.parametrize("vector", FF1["vectors"], ids=lambda v: f"sample{v['sample']}")
def test_ff1_nist_samples(vector: dict[str, Any]) -> None:
    key, tweak = bytes.fromhex(vector["key"]), bytes.fromhex(vector["tweak"])
    plaintext, ciphertext = _numerals(vector["plaintext"]), _numerals(vector["ciphertext"])
    radix = vector["radix"]
    assert _native.ff1_numerals(True, key, radix, tweak, plaintext) == ciphertext
    assert _native.ff1_numerals(False, key, radix, tweak, ciphertext) == plaintext


def test_all_nine_ff1_samples_are_present() -> None:
    assert [v["sample"] for v in FF1["vectors"]] == list(range(1, 10))


@pytest.mark.parametrize("bits", [20, 33, 64])
def test_det_int_is_ff1_radix_2(bits: int) -> None:
    """DetInt's batch path is FF1 on the bits of value + 2^(bits-1)."""
    key = bytes(range(16))
    det = DetInt(key, bits)
    for value in (-(2 ** (bits - 1)), -1, 0, 12345, 2 ** (bits - 1) - 1):
        unsigned = value + 2 ** (bits - 1)
        digits = [int(b) for b in format(unsigned, f"0{bits}b")]
        expected = _native.ff1_numerals(True, key, 2, b"", digits)
        cipher_unsigned = int("".join(map(str, expected)), 2)
        assert det.encrypt_one(value) == cipher_unsigned - 2 ** (bits - 1)


@pytest.mark.parametrize("vector", SIV["vectors"], ids=lambda v: v["section"])
def test_aes_siv_rfc5297(vector: dict[str, Any]) -> None:
    key = bytes.fromhex(vector["key"])
    headers = [bytes.fromhex(h) for h in vector["headers"]]
    plaintext, output = bytes.fromhex(vector["plaintext"]), bytes.fromhex(vector["output"])
    assert output[:16] == bytes.fromhex(vector["siv"])
    assert _native.aes_siv_seal(key, headers, plaintext) == output
    assert _native.aes_siv_open(key, headers, output) == plaintext


@pytest.mark.parametrize("plaintext", [b"", b"short", b"exactly sixteen!", b"x" * 100])
def test_det_bytes_matches_pyca_aes_siv(plaintext: bytes) -> None:
    """Stored format is 0x01 || RFC 5297 output with no associated data."""
    key = bytes(range(32))
    expected = b"\x01" + AESSIV(key).encrypt(plaintext, None)
    assert DetBytes(key).encrypt_one(plaintext) == expected
