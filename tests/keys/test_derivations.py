"""The client directory's sealed derivations (issue 41): read back, never trusted blindly."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from veil.crypto import paillier
from veil.crypto.keys import MasterKey
from veil.crypto.paillier import PaillierKey, keys_kept_by
from veil.keys import begin_rekey, create_key, finish_rekey, load_key
from veil.keys.derivations import FILE_NAME, SealedDerivations

BITS = 512  # fast keys: the store does not care how long they are


def _derive_fresh(master: MasterKey, store: SealedDerivations | None) -> PaillierKey:
    paillier._derive.cache_clear()  # as a new process would: nothing cached in memory
    with keys_kept_by(store):
        return PaillierKey.from_master(master, "t.hom", BITS)


def _no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(seed: bytes, bits: int) -> None:
        raise AssertionError("the primes were searched for again")

    monkeypatch.setattr(paillier, "_searched", refuse)


def _sealed_once(directory: Path) -> tuple[MasterKey, PaillierKey, Path]:
    """A key derived with the directory's store: the master key, the key, the sealed file."""
    master = MasterKey.generate()
    return (
        master,
        _derive_fresh(master, SealedDerivations(directory, master)),
        directory / FILE_NAME,
    )


def test_a_later_process_reads_the_primes_instead_of_searching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master, first, sealed = _sealed_once(tmp_path)
    assert stat.S_IMODE(sealed.stat().st_mode) == 0o600
    body = sealed.read_bytes()
    assert body[0] == 1  # the version byte
    assert f"{int(first._p):x}".encode() not in body and b"paillier" not in body  # sealed
    _no_search(monkeypatch)
    again = _derive_fresh(master, SealedDerivations(tmp_path, master))
    assert again.public == first.public


def test_a_tampered_file_is_ignored_and_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master, first, sealed = _sealed_once(tmp_path)
    body = bytearray(sealed.read_bytes())
    body[-1] ^= 1
    sealed.write_bytes(bytes(body))
    store = SealedDerivations(tmp_path, master)
    assert store._read() == {}
    assert _derive_fresh(master, store).public == first.public  # searched again, rewritten
    _no_search(monkeypatch)
    assert _derive_fresh(master, SealedDerivations(tmp_path, master)).public == first.public


def test_another_version_byte_is_ignored(tmp_path: Path) -> None:
    master, _, sealed = _sealed_once(tmp_path)
    sealed.write_bytes(b"\x02" + sealed.read_bytes()[1:])
    assert SealedDerivations(tmp_path, master)._read() == {}


def test_a_rekey_invalidates_the_file(tmp_path: Path) -> None:
    key_file = tmp_path / "key.json"
    old = create_key(key_file)
    _derive_fresh(old, SealedDerivations(tmp_path, old))
    assert SealedDerivations(tmp_path, old)._read()
    begin_rekey(key_file)
    finish_rekey(key_file)
    new = load_key(key_file)
    assert new.fingerprint() != old.fingerprint()
    assert SealedDerivations(tmp_path, new)._read() == {}  # sealed under the old key
    assert (
        _derive_fresh(new, SealedDerivations(tmp_path, new)).public
        != _derive_fresh(old, None).public
    )


def test_entries_that_are_not_primes_of_the_size_are_not_used(tmp_path: Path) -> None:
    master = MasterKey.generate()
    store = SealedDerivations(tmp_path, master)
    store.remember_paillier_key(b"s" * 32, BITS, 15, 21, 7)  # sealed, but wrong: not used
    assert SealedDerivations(tmp_path, master).paillier_key(b"s" * 32, BITS) is None


def test_an_unwritable_directory_costs_only_the_search(tmp_path: Path) -> None:
    master = MasterKey.generate()
    missing = tmp_path / "absent"
    key = _derive_fresh(master, SealedDerivations(missing, master))
    assert key.public.bits == BITS and not missing.exists()
