# Stubs for the private Rust module veil._native. Each scheme adds its functions.
from typing import Any

import numpy as np
import numpy.typing as npt

class NativeError(Exception): ...
class NativeDomainError(NativeError): ...
class NativeAuthenticationError(NativeError): ...
class NativeMalformedError(NativeError): ...
class NativeParameterError(NativeError): ...

# RND and SEARCH (rust/veil-py/src/{rnd,search}.rs). A column is the tuple
# (offsets int64, data uint8, validity bitmap uint8 or None) of an Arrow
# binary column; outputs are (offsets int32, data uint8) of a binary column.
_Column = tuple[np.ndarray, np.ndarray, np.ndarray | None]

def rnd_column(
    key: bytes, context: bytes, column: _Column, *, decrypt: bool = False
) -> tuple[np.ndarray, np.ndarray]: ...
def rnd_encrypt_with_nonce_for_tests(
    key: bytes, nonce: bytes, aad: bytes, plaintext: bytes
) -> bytes: ...
def search_encrypt(key: bytes, column: _Column) -> tuple[np.ndarray, np.ndarray]: ...
def search_token(key: bytes, word: str) -> bytes: ...
def search_match(token: bytes, column: _Column) -> np.ndarray: ...
def search_tokenize(text: str) -> list[str]: ...

# OPE (rust/veil-py/src/ope.rs). Plaintexts are int64 or uint64 arrays; `valid`
# is a bool mask (False rows are skipped); decryption returns the plaintexts'
# two's-complement bits as uint64 (view as int64 for signed schemes).
class OpeCipher:
    def __init__(
        self, key: bytes, bits: int, signed: bool, cipher_bits: int | None = None
    ) -> None: ...
    @property
    def cipher_bits(self) -> int: ...
    @property
    def binary_width(self) -> int: ...
    @property
    def domain(self) -> str: ...
    def encrypt_int64(self, values: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray: ...
    def encrypt_binary(self, values: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray: ...
    def decrypt_int64(
        self, ciphertexts: np.ndarray, valid: np.ndarray | None = None
    ) -> np.ndarray: ...
    def decrypt_binary(
        self, data: np.ndarray, offsets: np.ndarray, valid: np.ndarray | None = None
    ) -> np.ndarray: ...

def ope_hgd_sample(good: int, bad: int, draws: int, seed: bytes, count: int) -> list[int]: ...

# Paillier, server side (rust/veil-py/src/paillier.rs). `n_square` is big-endian
# bytes; results are stored ciphertexts (0x01 || c, fixed width) packed back to
# back in one uint8 array, one per result row (NULL rows have none).
def paillier_multiply_rows(n_square: bytes, a: _Column, b: _Column) -> np.ndarray: ...
def paillier_product(n_square: bytes, column: _Column) -> np.ndarray: ...
def paillier_group_products(
    n_square: bytes, members: _Column, group_offsets: np.ndarray
) -> np.ndarray: ...
def __getattr__(name: str) -> Any: ...

# DET (veil.crypto.det) and the raw AES benchmark kernel.

class Ff1Int:
    domain: str
    def __init__(self, key: bytes, bits: int, tweak: bytes = b"") -> None: ...
    def run(
        self, encrypt: bool, values: np.ndarray, out: np.ndarray, row_base: int = 0
    ) -> None: ...

class SivBytes:
    def __init__(self, key: bytes) -> None: ...
    def run(
        self,
        encrypt: bool,
        offsets: np.ndarray,
        data: npt.NDArray[np.uint8],
        validity: npt.NDArray[np.uint8] | None,
        validity_offset: int,
        out_offsets: np.ndarray,
        out_data: npt.NDArray[np.uint8],
        row_base: int = 0,
    ) -> int: ...

def ff1_numerals(
    encrypt: bool, key: bytes, radix: int, tweak: bytes, numerals: list[int]
) -> list[int]: ...
def aes_siv_seal(key: bytes, headers: list[bytes], plaintext: bytes) -> bytes: ...
def aes_siv_open(key: bytes, headers: list[bytes], sealed: bytes) -> bytes: ...
def aes_ecb_blocks(key: bytes, data: npt.NDArray[np.uint8], out: npt.NDArray[np.uint8]) -> None: ...

# ASHE (rust/veil-py/src/ashe.rs). Ids and ciphertexts are uint64 arrays (views
# of the int64 row ids and stored BIGINTs); plaintexts are int64. Pad sums are
# returned mod 2**64 as Python ints in [0, 2**64).
class AsheKey:
    def __init__(self, key: bytes) -> None: ...
    def prf(self, id: int) -> int: ...
    def pad(self, id: int) -> int: ...
    def encrypt(
        self,
        ids: npt.NDArray[np.uint64],
        values: npt.NDArray[np.int64],
        out: npt.NDArray[np.uint64],
    ) -> None: ...
    def decrypt(
        self,
        ids: npt.NDArray[np.uint64],
        ciphertexts: npt.NDArray[np.uint64],
        out: npt.NDArray[np.int64],
    ) -> None: ...
    def pad_sum_ids(self, ids: npt.NDArray[np.uint64]) -> int: ...
    def pad_sum_runs(self, runs: npt.NDArray[np.uint64]) -> int: ...
    def pad_sum_bitmap(self, base: int, words: npt.NDArray[np.uint64]) -> int: ...
    def pad_sums_blocks(
        self,
        bases: npt.NDArray[np.uint64],
        masks: npt.NDArray[np.uint64],
        out: npt.NDArray[np.uint64],
    ) -> None: ...

# KV packs (rust/veil-py/src/kvpack.rs): decrypt + decompress + parse one pack
# body (ciphertext || tag), GIL released. codec: 1 zlib, 2 zstd, 3 lz4.
class KvDictionary:
    def __init__(self, dictionary: bytes) -> None: ...

def kv_open_pack(
    key: bytes,
    codec: int,
    nonce: bytes,
    sealed: bytes,
    aad: bytes,
    dictionary: KvDictionary | None = None,
) -> tuple[list[bytes], list[bytes]]: ...
def kv_pack_lookup(
    key: bytes,
    codec: int,
    nonce: bytes,
    sealed: bytes,
    aad: bytes,
    wanted: bytes,
    dictionary: KvDictionary | None = None,
) -> bytes | None: ...
def kv_serialize_pack(keys: list[bytes], values: list[bytes], version2: bool = False) -> bytes: ...
def kv_seal_blocked(
    key: bytes,
    nonce: bytes,
    aad: bytes,
    keys: list[bytes],
    values: list[bytes],
    positions: list[bytes],
    block_rows: int,
    dictionary: KvDictionary | None = None,
    dense: bool = False,
    previous: bytes | None = None,
) -> bytes: ...
def kv_open_blocked(
    key: bytes,
    stored: bytes,
    aad: bytes,
    dictionary: KvDictionary | None = None,
    low: bytes | None = None,
    high: bytes | None = None,
) -> tuple[list[bytes], list[bytes]]: ...
def kv_range_blocked(
    key: bytes,
    stored: bytes,
    aad: bytes,
    dictionary: KvDictionary | None,
    low: bytes,
    high: bytes,
    stop: bytes | None = None,
    int_keys: bool = False,
) -> tuple[list[Any], list[bytes]]: ...
def kv_blocked_lookup(
    key: bytes,
    stored: bytes,
    aad: bytes,
    position: bytes,
    wanted: bytes,
    dictionary: KvDictionary | None = None,
) -> bytes | None: ...

# Row-bound RND (rust/veil-py/src/rowrnd.rs): values XOR an AES-CTR keystream
# whose nonce is the row id.
class RowRndKey:
    def __init__(self, key: bytes) -> None: ...
    def xor_words(
        self,
        ids: npt.NDArray[np.uint64],
        values: npt.NDArray[np.uint64],
        out: npt.NDArray[np.uint64],
    ) -> None: ...
    def xor_column(
        self,
        ids: npt.NDArray[np.uint64],
        column: tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8], npt.NDArray[np.uint8] | None],
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.uint8]]: ...

def rowrnd_xor_columns(
    ids: npt.NDArray[np.uint64],
    words: list[tuple[RowRndKey, npt.NDArray[np.uint64]]],
    binaries: list[tuple[RowRndKey, Any]],
) -> tuple[
    list[npt.NDArray[np.uint64]], list[tuple[npt.NDArray[np.int32], npt.NDArray[np.uint8]]]
]: ...
def rowrnd_reseal_columns(
    old_ids: npt.NDArray[np.uint64],
    new_ids: npt.NDArray[np.uint64],
    words: list[tuple[RowRndKey, npt.NDArray[np.uint64]]],
    binaries: list[tuple[RowRndKey, Any]],
) -> tuple[
    list[npt.NDArray[np.uint64]], list[tuple[npt.NDArray[np.int32], npt.NDArray[np.uint8]]]
]: ...

# JOIN-ADJ (rust/veil-py/src/joinadj.rs): ristretto255 ciphertexts of 33 bytes,
# re-keyed by a 33-byte token. Outputs are (offsets int32, data uint8).
class JoinAdjKey:
    def __init__(self, key: bytes) -> None: ...
    def encrypt_one(self, value: bytes) -> bytes: ...
    def encrypt_column(self, column: _Column) -> tuple[np.ndarray, np.ndarray]: ...
    def encrypt_words(
        self, values: npt.NDArray[np.int64], validity: npt.NDArray[np.uint8] | None
    ) -> tuple[np.ndarray, np.ndarray]: ...
    def token_to(self, target: JoinAdjKey) -> bytes: ...

def joinadj_rekey(token: bytes, column: _Column) -> tuple[np.ndarray, np.ndarray]: ...

# Lewi–Wu ORE over cretrit (rust/veil-py/src/ore.rs): 64-bit unsigned keys in,
# ciphertext bytes out (0x01 || cretrit's serialisation).
class OreCipher:
    def __init__(self, key: bytes) -> None: ...
    def encrypt_left(self, keys: list[int]) -> list[bytes]: ...
    def encrypt_right(self, keys: list[int]) -> list[bytes]: ...

def ore_rank(left: bytes, rights: list[bytes], inclusive: bool) -> int: ...

# Fetched grouped sums (rust/veil-py/src/bsoncols.rs): from raw BSON batches, each
# document's group number, each group's token (first met first) and per field (low,
# high, valued, first, has_first, inc_docs, inc_ids) numpy columns; None for documents
# of another shape.
def fetched_columns(
    batches: list[bytes], key: bytes | None, names: list[bytes]
) -> tuple[np.ndarray, list[bytes], list[tuple[np.ndarray, ...]]] | None: ...

# The named server statements of one PostgreSQL connection (rust/veil-py/src/point):
# its backend calls dropped() after a statement that may make psycopg DEALLOCATE ALL.
class ServerStatements:
    def __init__(self) -> None: ...
    def dropped(self) -> None: ...
    @property
    def generation(self) -> int: ...
