"""Test stand-ins for DET and OPE, used only while veil.crypto.det/ope are not installed.

They follow the crypto contract's API (not its security): the point is to
exercise the planner's push-down paths. Once the real modules exist the
suite uses them instead (see conftest).
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pyarrow as pa
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from veil.crypto.keys import KeyLabel, MasterKey

_MUL = np.int64(0x5851F42D4C957F2D)  # odd, so invertible modulo 2**64
_INV = np.int64(pow(0x5851F42D4C957F2D, -1, 2**64) - 2**64)


def _ints(values: pa.Array, fn: object) -> pa.Array:
    valid = values.is_valid()
    raw = values.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    with np.errstate(over="ignore"):
        out = fn(raw)  # type: ignore[operator]
    return pa.array(out, mask=pa.compute.invert(valid).to_numpy(zero_copy_only=False))


class DetInt:
    def __init__(self, key: bytes, bits: int = 64, *, column: str | None = None):
        self._add = np.int64(int.from_bytes(key[:8], "big", signed=True))

    @classmethod
    def from_master(
        cls, master: MasterKey, scope: str, bits: int = 64, column: str | None = None
    ) -> DetInt:
        return cls(master.derive(KeyLabel("det-int", scope)), bits, column=column)

    def encrypt(self, values: pa.Array) -> pa.Array:
        return _ints(values, lambda x: (x + self._add) * _MUL)

    def decrypt(self, values: pa.Array) -> pa.Array:
        return _ints(values, lambda x: x * _INV - self._add)

    def encrypt_one(self, value: int) -> int:
        return int(self.encrypt(pa.array([value], pa.int64()))[0].as_py())


class DetBytes:
    def __init__(self, key: bytes, *, column: str | None = None):
        self._siv = AESSIV(key)

    @classmethod
    def from_master(cls, master: MasterKey, scope: str, column: str | None = None) -> DetBytes:
        return cls(master.derive(KeyLabel("det-bytes", scope), 64), column=column)

    def encrypt(self, values: pa.Array) -> pa.Array:
        return pa.array(
            [None if v is None else self.encrypt_one(v) for v in values.to_pylist()], pa.binary()
        )

    def decrypt(self, values: pa.Array) -> pa.Array:
        return pa.array(
            [None if v is None else self._siv.decrypt(v[1:], None) for v in values.to_pylist()],
            pa.binary(),
        )

    def encrypt_one(self, value: bytes | str) -> bytes:
        data = value.encode() if isinstance(value, str) else value
        return b"\x01" + self._siv.encrypt(data, None)


class Ope:
    def __init__(self, key: bytes, bits: int, *, signed: bool = True, column: str | None = None):
        self._shift = np.int64(int.from_bytes(key[:2], "big"))

    @classmethod
    def from_master(
        cls,
        master: MasterKey,
        scope: str,
        bits: int,
        *,
        signed: bool = True,
        column: str | None = None,
    ) -> Ope:
        return cls(master.derive(KeyLabel("ope", scope)), bits, signed=signed, column=column)

    def encrypt(self, values: pa.Array) -> pa.Array:
        return _ints(values, lambda x: x * 3 + self._shift)

    def decrypt(self, values: pa.Array) -> pa.Array:
        return _ints(values, lambda x: (x - self._shift) // 3)

    def encrypt_one(self, value: int) -> int:
        return int(self.encrypt(pa.array([value], pa.int64()))[0].as_py())


def install() -> list[str]:
    """Register the stand-ins for every missing module; returns their names."""
    installed = []
    for name, classes in (("veil.crypto.det", (DetInt, DetBytes)), ("veil.crypto.ope", (Ope,))):
        try:
            __import__(name)
        except ImportError:
            module = types.ModuleType(name)
            for cls in classes:
                setattr(module, cls.__name__, cls)
            sys.modules[name] = module
            installed.append(name)
    return installed
