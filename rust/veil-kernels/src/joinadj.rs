//! JOIN-ADJ: CryptDB's adjustable join, on the ristretto255 group.
//!
//! Two columns that the server must equi-join are stored under different
//! keys, so that they cannot be compared until the client decides they
//! should be. When it does, it hands the server a token that re-keys one
//! column onto the other's key; from then on equal plaintexts have equal
//! ciphertexts across both (Popa et al., CryptDB, SOSP 2011, §3.4). Version 1:
//!
//! ```text
//! k          = Scalar::from_bytes_mod_order_wide(SHA-512("veil-joinadj-v1 key" || key))
//! H(v)       = RistrettoPoint::hash_from_bytes::<Sha512>("veil-joinadj-v1" || v)   (RFC 9496 §4.3.4)
//! ciphertext = 0x01 || encode(k · H(v))                                           (33 bytes)
//! token a->b = 0x01 || bytes(k_b · k_a^-1 mod ℓ)                                   (33 bytes)
//! rekey(t, c) = 0x01 || encode(t · decode(c))
//! ```
//!
//! so `rekey(token(a, b), E_a(v)) = E_b(v)`. An int64 value is hashed as its
//! 8 little-endian bytes. The server learns from a ciphertext only whether it
//! equals another under the same key (DET's leakage), and from a token only
//! that two columns are now joinable: the token is a ratio of two secret
//! scalars, and recovering a key from it or from ciphertexts is a discrete
//! logarithm. `H` is a random oracle onto the group, so `k · H(v)` is a PRF
//! of `v` under the decisional Diffie–Hellman assumption.
//!
//! The server's re-keying needs no Veil code: libsodium's
//! `crypto_scalarmult_ristretto255` computes the same bytes (the PostgreSQL
//! extension, `veil_joinadj.c`).

use curve25519_dalek::ristretto::{CompressedRistretto, RistrettoPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::IsIdentity;
use sha2::{Digest, Sha512};
use zeroize::Zeroize;

use crate::binary::{BinaryColumn, BinaryOutput};
use crate::KernelError;

/// Version byte that starts every ciphertext and every token.
pub const VERSION: u8 = 0x01;
/// Length of a JOIN-ADJ key (the input of the scalar derivation).
pub const KEY_LEN: usize = 32;
/// Length of a ciphertext: version byte and a compressed ristretto255 point.
pub const CIPHERTEXT_LEN: usize = 33;
/// Length of a token: version byte and a canonical scalar.
pub const TOKEN_LEN: usize = 33;

const KEY_DOMAIN: &[u8] = b"veil-joinadj-v1 key";
const HASH_DOMAIN: &[u8] = b"veil-joinadj-v1";

/// A JOIN-ADJ key: its secret scalar (zeroized when dropped).
pub struct JoinAdjKey {
    scalar: Scalar,
}

impl JoinAdjKey {
    /// Derive the secret scalar of a 32-byte key.
    pub fn new(key: &[u8]) -> Result<Self, KernelError> {
        if key.len() != KEY_LEN {
            return Err(KernelError::KeyLength {
                expected: KEY_LEN,
                got: key.len(),
            });
        }
        let mut wide: [u8; 64] = Sha512::new()
            .chain_update(KEY_DOMAIN)
            .chain_update(key)
            .finalize()
            .into();
        let scalar = Scalar::from_bytes_mod_order_wide(&wide);
        wide.zeroize();
        if scalar == Scalar::ZERO {
            // Probability 2^-252: a zero key would map every value to one point.
            return Err(KernelError::Parameter(
                "this JOIN-ADJ key derives the zero scalar; use another key".into(),
            ));
        }
        Ok(Self { scalar })
    }

    /// The ciphertext `0x01 || encode(k · H(value))` of one value.
    pub fn encrypt(&self, value: &[u8]) -> [u8; CIPHERTEXT_LEN] {
        let point = hash_to_group(value);
        ciphertext(&(self.scalar * point))
    }

    /// The ciphertext of every non-NULL row of a binary column (NULL rows
    /// stay empty: the output carries the input's NULLs), on all cores
    /// (`batch`: the same bytes as `encrypt` of each row).
    pub fn encrypt_column(&self, column: &BinaryColumn<'_>) -> Result<BinaryOutput, KernelError> {
        batch::map_points(column, &self.scalar, |_, value| Ok(hash_to_group(value)))
    }

    /// The ciphertext of every int64 value (hashed as its 8 little-endian
    /// bytes) whose bit in `validity` is set; all rows when it is `None`.
    pub fn encrypt_words(
        &self,
        values: &[i64],
        validity: Option<&[u8]>,
    ) -> Result<BinaryOutput, KernelError> {
        let offsets: Vec<i64> = (0..=values.len() as i64).map(|i| i * 8).collect();
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.encrypt_column(&BinaryColumn::new(&offsets, &data, validity)?)
    }

    /// The token that re-keys this key's ciphertexts onto `target`'s.
    pub fn token_to(&self, target: &JoinAdjKey) -> [u8; TOKEN_LEN] {
        let mut token = [0u8; TOKEN_LEN];
        token[0] = VERSION;
        token[1..].copy_from_slice((target.scalar * self.scalar.invert()).as_bytes());
        token
    }
}

impl Drop for JoinAdjKey {
    fn drop(&mut self) {
        self.scalar.zeroize();
    }
}

/// A parsed re-keying token (public: the server holds it).
pub struct Token {
    scalar: Scalar,
}

impl Token {
    /// Parse `0x01 || canonical non-zero scalar`.
    pub fn new(token: &[u8]) -> Result<Self, KernelError> {
        let malformed = |reason: &str| {
            KernelError::Parameter(format!(
                "a JOIN-ADJ token is {TOKEN_LEN} bytes: 0x01 and a canonical non-zero scalar \
                 ({reason})"
            ))
        };
        if token.len() != TOKEN_LEN {
            return Err(malformed(&format!("got {} bytes", token.len())));
        }
        if token[0] != VERSION {
            return Err(malformed(&format!("version byte {:#04x}", token[0])));
        }
        let bytes: [u8; 32] = token[1..].try_into().expect("32 bytes after the version");
        let scalar = Option::<Scalar>::from(Scalar::from_canonical_bytes(bytes))
            .ok_or_else(|| malformed("the scalar is not reduced modulo the group order"))?;
        if scalar == Scalar::ZERO {
            return Err(malformed("the scalar is zero"));
        }
        Ok(Self { scalar })
    }

    /// `0x01 || encode(t · P)` for the ciphertext `0x01 || encode(P)` at `row`.
    pub fn rekey(&self, row: usize, value: &[u8]) -> Result<[u8; CIPHERTEXT_LEN], KernelError> {
        let point = decode(row, value)?;
        Ok(ciphertext(&(self.scalar * point)))
    }

    /// Re-key every non-NULL row of a column of ciphertexts (on all cores,
    /// `batch`; the first malformed row's error if any).
    pub fn rekey_column(&self, column: &BinaryColumn<'_>) -> Result<BinaryOutput, KernelError> {
        batch::map_points(column, &self.scalar, decode)
    }
}

/// `H(v)`: the RFC 9496 one-way map of SHA-512 of the domain and the value.
pub fn hash_to_group(value: &[u8]) -> RistrettoPoint {
    RistrettoPoint::from_hash(Sha512::new().chain_update(HASH_DOMAIN).chain_update(value))
}

fn ciphertext(point: &RistrettoPoint) -> [u8; CIPHERTEXT_LEN] {
    let mut out = [0u8; CIPHERTEXT_LEN];
    out[0] = VERSION;
    out[1..].copy_from_slice(point.compress().as_bytes());
    out
}

/// The point of a stored ciphertext; refuses anything `ciphertext` cannot
/// have written (the identity included: `k · H(v)` never is it).
fn decode(row: usize, value: &[u8]) -> Result<RistrettoPoint, KernelError> {
    let malformed = |reason: &str| KernelError::Malformed {
        row,
        reason: format!("a JOIN-ADJ ciphertext is 0x01 and a ristretto255 point; {reason}"),
    };
    if value.len() != CIPHERTEXT_LEN {
        return Err(malformed(&format!("got {} bytes", value.len())));
    }
    if value[0] != VERSION {
        return Err(malformed(&format!("version byte {:#04x}", value[0])));
    }
    let compressed =
        CompressedRistretto::from_slice(&value[1..]).expect("32 bytes after the version");
    match compressed.decompress() {
        Some(point) if !point.is_identity() => Ok(point),
        Some(_) => Err(malformed("the point is the identity")),
        None => Err(malformed("not a canonical point encoding")),
    }
}

mod batch;
#[cfg(test)]
mod tests;
