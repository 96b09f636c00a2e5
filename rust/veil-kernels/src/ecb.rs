//! Raw AES block encryption: the primitive under FF1, and the benchmark's
//! "physical limit" (AES-128-ECB over a caller-provided, reused buffer).
//!
//! ECB is not a way to store data; `aes128_ecb_encrypt` exists only so the
//! benchmark can show how close each scheme comes to raw AES speed.

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::{Aes128, Aes192, Aes256, Block};

use crate::KernelError;

/// AES with a 128-, 192- or 256-bit key, chosen by the key's length.
///
/// The `aes` crate detects AES-NI at run time, and `encrypt_blocks`
/// pipelines several blocks at once, which is why callers hand it batches.
pub enum AnyAes {
    Aes128(Aes128),
    Aes192(Aes192),
    Aes256(Aes256),
}

impl AnyAes {
    pub fn new(key: &[u8]) -> Result<Self, KernelError> {
        match key.len() {
            16 => Ok(Self::Aes128(Aes128::new(key.into()))),
            24 => Ok(Self::Aes192(Aes192::new(key.into()))),
            32 => Ok(Self::Aes256(Aes256::new(key.into()))),
            got => Err(KernelError::Parameter(format!(
                "an AES key is 16, 24 or 32 bytes, got {got}"
            ))),
        }
    }

    /// Encrypts each block in place.
    #[inline]
    pub fn encrypt_blocks(&self, blocks: &mut [Block]) {
        match self {
            Self::Aes128(c) => c.encrypt_blocks(blocks),
            Self::Aes192(c) => c.encrypt_blocks(blocks),
            Self::Aes256(c) => c.encrypt_blocks(blocks),
        }
    }

    /// Encrypts one block given as a big-endian integer.
    pub fn encrypt_u128(&self, block: u128) -> u128 {
        let mut blocks = [Block::from(block.to_be_bytes())];
        self.encrypt_blocks(&mut blocks);
        u128::from_be_bytes(blocks[0].into())
    }
}

/// Encrypts `data` with AES-128 in ECB mode into `out` (same length, a
/// multiple of 16 bytes). No allocation: the caller reuses `out`.
pub fn aes128_ecb_encrypt(key: &[u8], data: &[u8], out: &mut [u8]) -> Result<(), KernelError> {
    if key.len() != 16 {
        return Err(KernelError::KeyLength {
            expected: 16,
            got: key.len(),
        });
    }
    if !data.len().is_multiple_of(16) || out.len() != data.len() {
        return Err(KernelError::Parameter(format!(
            "ECB needs input and output of equal length, a multiple of 16 bytes; got {} and {}",
            data.len(),
            out.len()
        )));
    }
    let cipher = Aes128::new(key.into());
    cipher
        .encrypt_blocks_b2b(as_blocks(data), as_blocks_mut(out))
        .map_err(|_| KernelError::Parameter("ECB buffers differ in length".into()))
}

fn as_blocks(bytes: &[u8]) -> &[Block] {
    debug_assert_eq!(bytes.len() % 16, 0);
    // SAFETY: `Block` is `GenericArray<u8, U16>`, which generic-array lays
    // out exactly as `[u8; 16]` (size 16, alignment 1, `repr(transparent)`
    // over `repr(C)` halves), and `bytes.len()` is a multiple of 16, so the
    // slice covers exactly `len / 16` blocks.
    unsafe { core::slice::from_raw_parts(bytes.as_ptr().cast::<Block>(), bytes.len() / 16) }
}

fn as_blocks_mut(bytes: &mut [u8]) -> &mut [Block] {
    debug_assert_eq!(bytes.len() % 16, 0);
    // SAFETY: as in `as_blocks`; the exclusive borrow is carried over.
    unsafe { core::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<Block>(), bytes.len() / 16) }
}

#[cfg(test)]
mod tests {
    use super::*;

    // FIPS-197 Appendix C.1 (AES-128).
    const FIPS197_KEY: &str = "000102030405060708090a0b0c0d0e0f";
    const FIPS197_PT: &str = "00112233445566778899aabbccddeeff";
    const FIPS197_CT: &str = "69c4e0d86a7b0430d8cdb78070b4c55a";

    #[test]
    fn ecb_matches_fips197() {
        let key = hex::decode(FIPS197_KEY).unwrap();
        let block = hex::decode(FIPS197_PT).unwrap();
        let data: Vec<u8> = block.iter().cycle().take(16 * 20).copied().collect();
        let mut out = vec![0u8; data.len()];
        aes128_ecb_encrypt(&key, &data, &mut out).unwrap();
        for chunk in out.chunks(16) {
            assert_eq!(hex::encode(chunk), FIPS197_CT);
        }
    }

    #[test]
    fn ecb_rejects_partial_blocks() {
        let mut out = [0u8; 17];
        let err = aes128_ecb_encrypt(&[0; 16], &[0; 17], &mut out).unwrap_err();
        assert!(matches!(err, KernelError::Parameter(_)));
    }

    #[test]
    fn any_aes_rejects_odd_key_lengths() {
        assert!(AnyAes::new(&[0; 20]).is_err());
        let aes = AnyAes::new(&hex::decode(FIPS197_KEY).unwrap()).unwrap();
        let pt = u128::from_str_radix(FIPS197_PT, 16).unwrap();
        assert_eq!(
            aes.encrypt_u128(pt),
            u128::from_str_radix(FIPS197_CT, 16).unwrap()
        );
    }
}
