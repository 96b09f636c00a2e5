"""AES-256-GCM known-answer vectors (McGrew–Viega test cases 13–16) for RND.

The vectors live in vectors/aes_gcm_256.json, which names its source; the same file
is checked by `cargo test` in veil-kernels.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from veil import _native
from veil.crypto.rnd import VERSION, Rnd

pytestmark = pytest.mark.vectors

VECTORS = json.loads((Path(__file__).parent / "vectors" / "aes_gcm_256.json").read_text())
CASES = VECTORS["cases"]


def _hex(case: dict[str, str], name: str) -> bytes:
    return bytes.fromhex(case[name])


def test_the_vector_file_names_its_source() -> None:
    assert "McGrew" in VECTORS["source"] and "Test Cases 13-16" in VECTORS["source"]
    assert [case["name"] for case in CASES] == [f"Test Case {n}" for n in range(13, 17)]


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_encryption_matches_the_vector(case: dict[str, str]) -> None:
    sealed = _native.rnd_encrypt_with_nonce_for_tests(
        _hex(case, "key"), _hex(case, "nonce"), _hex(case, "aad"), _hex(case, "plaintext")
    )
    assert sealed == _hex(case, "ciphertext") + _hex(case, "tag")


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_decryption_of_the_vector_in_rnd_format(case: dict[str, str]) -> None:
    stored = bytes([VERSION]) + _hex(case, "nonce") + _hex(case, "ciphertext") + _hex(case, "tag")
    rnd = Rnd(_hex(case, "key"), context=_hex(case, "aad"))
    assert rnd.decrypt_one(stored) == _hex(case, "plaintext")
    assert rnd.decrypt(pa.array([stored, None])).to_pylist() == [_hex(case, "plaintext"), None]
