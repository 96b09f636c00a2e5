//! RND: randomised authenticated encryption with AES-256-GCM.
//!
//! Stored format of one value: `0x01 || nonce (12) || ciphertext || tag (16)`,
//! so a value grows by exactly 29 bytes. The associated data (AAD) is a
//! context chosen by the caller (for instance the table and column a value
//! belongs to), so a ciphertext moved to another column fails to decrypt.
//!
//! Nonces are 96-bit random values. NIST SP 800-38D §8.3 caps the number of
//! encryptions under one key with random nonces at 2^32: the chance that two
//! of q random 96-bit nonces collide is at most q^2 / 2^97, which at
//! q = 2^32 is 2^-33. A nonce collision under GCM reveals the XOR of two
//! plaintexts and lets an attacker forge tags, so Veil must encrypt at most
//! 2^32 values (about four billion) under one RND key. Keys are per column
//! (or key group) and carry a version in their label, so a column that
//! approaches the bound is re-encrypted under the next key version.

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes256Gcm, KeyInit, Nonce, Tag};
use rand_chacha::ChaCha20Rng;
use rand_core::{OsRng, RngCore, SeedableRng};

use crate::binary::{BinaryColumn, BinaryOutput};
use crate::KernelError;

/// Version byte that starts every RND ciphertext.
pub const VERSION: u8 = 0x01;
/// Key length (AES-256).
pub const KEY_LEN: usize = 32;
/// Nonce length (96 bits, the length GCM is specified for).
pub const NONCE_LEN: usize = 12;
/// Authentication tag length.
pub const TAG_LEN: usize = 16;
/// Bytes a ciphertext adds to its plaintext: version, nonce and tag.
pub const OVERHEAD: usize = 1 + NONCE_LEN + TAG_LEN;

/// An RND key, ready to encrypt and decrypt whole columns.
pub struct Rnd {
    cipher: Aes256Gcm,
}

impl Rnd {
    /// Expand a 32-byte AES-256 key.
    pub fn new(key: &[u8]) -> Result<Self, KernelError> {
        let cipher = Aes256Gcm::new_from_slice(key).map_err(|_| KernelError::KeyLength {
            expected: KEY_LEN,
            got: key.len(),
        })?;
        Ok(Self { cipher })
    }

    /// Encrypt every non-NULL row of `column` with a fresh random nonce.
    pub fn encrypt_column(
        &self,
        column: &BinaryColumn<'_>,
        aad: &[u8],
    ) -> Result<BinaryOutput, KernelError> {
        let mut out = BinaryOutput::with_lengths(column, |_, value| Ok(value.len() + OVERHEAD))?;
        let mut rng = nonce_source()?;
        for (row, value) in column.rows().enumerate() {
            if let Some(plaintext) = value {
                let sealed = out.row_mut(row);
                rng.fill_bytes(&mut sealed[1..1 + NONCE_LEN]);
                self.seal_into(sealed, plaintext, aad)?;
            }
        }
        Ok(out)
    }

    /// Decrypt every non-NULL row of `column`; the first row that fails
    /// authentication or is malformed fails the whole batch.
    pub fn decrypt_column(
        &self,
        column: &BinaryColumn<'_>,
        aad: &[u8],
    ) -> Result<BinaryOutput, KernelError> {
        let mut out = BinaryOutput::with_lengths(column, |row, value| {
            check_format(row, value)?;
            Ok(value.len() - OVERHEAD)
        })?;
        for (row, value) in column.rows().enumerate() {
            if let Some(sealed) = value {
                self.open_into(row, sealed, aad, out.row_mut(row))?;
            }
        }
        Ok(out)
    }

    /// HAZMAT, for known-answer tests only: AES-256-GCM with a nonce the
    /// caller chooses, returning the bare `ciphertext || tag` (no version,
    /// no nonce). Reusing a nonce under one key destroys GCM's security;
    /// production code always goes through [`Rnd::encrypt_column`].
    pub fn encrypt_with_nonce_for_tests(
        &self,
        nonce: &[u8],
        aad: &[u8],
        plaintext: &[u8],
    ) -> Result<Vec<u8>, KernelError> {
        if nonce.len() != NONCE_LEN {
            return Err(KernelError::Parameter(format!(
                "an RND nonce is {NONCE_LEN} bytes, got {}",
                nonce.len()
            )));
        }
        let mut sealed = vec![0u8; OVERHEAD + plaintext.len()];
        sealed[1..1 + NONCE_LEN].copy_from_slice(nonce);
        self.seal_into(&mut sealed, plaintext, aad)?;
        Ok(sealed[1 + NONCE_LEN..].to_vec())
    }

    /// Fill `sealed` (already holding the nonce at 1..13) with the version,
    /// ciphertext and tag. Encrypting in place avoids an allocation per value.
    fn seal_into(
        &self,
        sealed: &mut [u8],
        plaintext: &[u8],
        aad: &[u8],
    ) -> Result<(), KernelError> {
        sealed[0] = VERSION;
        let (head, body) = sealed.split_at_mut(1 + NONCE_LEN);
        let (text, tag_out) = body.split_at_mut(plaintext.len());
        text.copy_from_slice(plaintext);
        let tag = self
            .cipher
            .encrypt_in_place_detached(Nonce::from_slice(&head[1..]), aad, text)
            // aes-gcm refuses only messages longer than 2^36 bytes, which
            // cannot occur with 32-bit Arrow offsets.
            .map_err(|_| KernelError::Parameter("value too long for AES-GCM".into()))?;
        tag_out.copy_from_slice(&tag);
        Ok(())
    }

    fn open_into(
        &self,
        row: usize,
        sealed: &[u8],
        aad: &[u8],
        plaintext: &mut [u8],
    ) -> Result<(), KernelError> {
        let nonce = Nonce::from_slice(&sealed[1..1 + NONCE_LEN]);
        let tag_at = sealed.len() - TAG_LEN;
        plaintext.copy_from_slice(&sealed[1 + NONCE_LEN..tag_at]);
        self.cipher
            .decrypt_in_place_detached(nonce, aad, plaintext, Tag::from_slice(&sealed[tag_at..]))
            .map_err(|_| KernelError::Authentication { row })
    }
}

/// A CSPRNG for one batch's nonces, seeded from the operating system.
///
/// ChaCha20 keyed by 256 bits from the OS gives nonces indistinguishable from
/// OS randomness at a fraction of a system call per value. A new generator
/// per batch means no generator state outlives the call, so a forked process
/// can never replay another process's nonce stream.
fn nonce_source() -> Result<ChaCha20Rng, KernelError> {
    ChaCha20Rng::from_rng(OsRng).map_err(|err| {
        KernelError::Parameter(format!(
            "the operating system's random number generator failed ({err}); \
             Veil cannot encrypt without it"
        ))
    })
}

fn check_format(row: usize, sealed: &[u8]) -> Result<(), KernelError> {
    let malformed = |reason: String| Err(KernelError::Malformed { row, reason });
    match sealed.first() {
        None => malformed("it is empty".into()),
        Some(&VERSION) if sealed.len() < OVERHEAD => malformed(format!(
            "it is {} bytes long, shorter than the {OVERHEAD} bytes every RND ciphertext has",
            sealed.len()
        )),
        Some(&VERSION) => Ok(()),
        Some(&other) => malformed(format!(
            "version byte 0x{other:02x} is not an RND version this Veil reads (0x{VERSION:02x})"
        )),
    }
}

#[cfg(test)]
mod tests;
