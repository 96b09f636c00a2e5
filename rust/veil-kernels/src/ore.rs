//! Lewi–Wu order-revealing encryption (ORE) of 64-bit keys, over the `cretrit`
//! crate (MIT; Lewi and Wu, "Order-Revealing Encryption: New Constructions,
//! Applications, and Lower Bounds", CCS 2016, the small-domain construction
//! applied block-wise).
//!
//! A key is split into 8 blocks of 8 bits (cretrit's `Cipher<8, 256>`). A
//! *right* ciphertext is IND-CPA secure on its own: two right ciphertexts
//! reveal nothing about each other, so they are what a server stores. A *left*
//! ciphertext (deterministic) compared with a right one reveals the order of
//! the two plaintexts and the index of the first block where they differ; the
//! client keeps left ciphertexts to itself and compares them with the right
//! ciphertexts it fetches.
//!
//! Stored form, version 1: `0x01 || cretrit's serialisation`. A left
//! ciphertext here is cretrit's full ciphertext (left and right parts); it is
//! never stored, but carries the same version byte.

use std::cmp::Ordering;

use cretrit::aes128v1::ore::{Cipher, CipherText};
use cretrit::SerializableCipherText;

use zeroize::Zeroizing;

use crate::KernelError;

/// Blocks per key and values per block: 8 × 8 bits cover a u64.
const BLOCKS: usize = 8;
const WIDTH: u16 = 256;
/// The leading byte of every ciphertext this version writes.
pub const VERSION: u8 = 1;
pub const KEY_BYTES: usize = 32;

type OreCipher = Cipher<BLOCKS, WIDTH>;
type OreCipherText = CipherText<BLOCKS, WIDTH>;

/// Keys per worker below which one thread encrypts: a cipher per thread costs
/// its key schedule, and each key is ~0.3 ms of work.
const PARALLEL_MIN_KEYS: usize = 64;

/// One ORE key (the cipher's rng is per instance, so an `Ore` is not `Sync`;
/// a batch's worker threads build ciphers of their own from the key).
pub struct Ore {
    cipher: OreCipher,
    key: Zeroizing<[u8; KEY_BYTES]>,
}

impl Ore {
    pub fn new(key: &[u8]) -> Result<Self, KernelError> {
        let key: &[u8; KEY_BYTES] = key.try_into().map_err(|_| KernelError::KeyLength {
            expected: KEY_BYTES,
            got: key.len(),
        })?;
        Ok(Self {
            cipher: cipher_of(key)?,
            key: Zeroizing::new(*key),
        })
    }

    /// Left (comparison-capable) ciphertexts of `values`: the client's, never stored.
    pub fn encrypt_left(&self, values: &[u64]) -> Result<Vec<Vec<u8>>, KernelError> {
        self.encrypt(values, |c, p| c.full_encrypt(p))
    }

    /// Right ciphertexts of `values`: randomised, what the server stores.
    pub fn encrypt_right(&self, values: &[u64]) -> Result<Vec<Vec<u8>>, KernelError> {
        self.encrypt(values, |c, p| c.right_encrypt(p))
    }

    /// `values` encrypted by `how`, split over the machine's cores when there are
    /// enough of them (each key costs thousands of AES calls; the order is kept).
    fn encrypt(
        &self,
        values: &[u64],
        how: impl Fn(&OreCipher, &cretrit::PlainText<BLOCKS, WIDTH>) -> CretritResult + Sync,
    ) -> Result<Vec<Vec<u8>>, KernelError> {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(values.len() / PARALLEL_MIN_KEYS);
        if threads < 2 {
            return encrypt_with(&self.cipher, values, 0, &how);
        }
        let piece = values.len().div_ceil(threads);
        let how = &how;
        let key = &self.key;
        let pieces: Vec<Result<Vec<Vec<u8>>, KernelError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = values
                .chunks(piece)
                .enumerate()
                .map(|(i, chunk)| {
                    scope.spawn(move || encrypt_with(&cipher_of(key)?, chunk, i * piece, how))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("an ORE worker thread panicked"))
                .collect()
        });
        let mut out = Vec::with_capacity(values.len());
        for piece in pieces {
            out.extend(piece?);
        }
        Ok(out)
    }
}

fn cipher_of(key: &[u8; KEY_BYTES]) -> Result<OreCipher, KernelError> {
    OreCipher::new(key).map_err(|e| KernelError::Parameter(e.to_string()))
}

/// `values` (rows `first..` of the caller's batch) encrypted by `how` under `cipher`.
fn encrypt_with(
    cipher: &OreCipher,
    values: &[u64],
    first: usize,
    how: &impl Fn(&OreCipher, &cretrit::PlainText<BLOCKS, WIDTH>) -> CretritResult,
) -> Result<Vec<Vec<u8>>, KernelError> {
    values
        .iter()
        .enumerate()
        .map(|(at, &value)| {
            let row = first + at;
            let plain = value.try_into().map_err(|_| KernelError::Domain {
                row,
                domain: "u64".into(),
            })?;
            let ciphertext = how(cipher, &plain).and_then(|c| c.to_vec());
            let bytes = ciphertext.map_err(|e| KernelError::Parameter(e.to_string()))?;
            let mut out = Vec::with_capacity(bytes.len() + 1);
            out.push(VERSION);
            out.extend_from_slice(&bytes);
            Ok(out)
        })
        .collect()
}

type CretritResult = Result<OreCipherText, cretrit::Error>;

/// The order of `left`'s plaintext against each right ciphertext's: -1, 0 or 1.
pub fn compare(left: &[u8], rights: &[&[u8]]) -> Result<Vec<i8>, KernelError> {
    let left = parse_left(left)?;
    rights
        .iter()
        .enumerate()
        .map(|(row, right)| {
            let right = parse(right, row)?;
            Ok(match left.cmp(&right) {
                Ordering::Less => -1,
                Ordering::Equal => 0,
                Ordering::Greater => 1,
            })
        })
        .collect()
}

/// In `rights` sorted by plaintext, how many lie below `left`'s plaintext
/// (or at or below it, when `inclusive`): a binary search, log2(len) comparisons.
pub fn rank(left: &[u8], rights: &[&[u8]], inclusive: bool) -> Result<usize, KernelError> {
    let parsed = parse_left(left)?;
    let (mut low, mut high) = (0, rights.len());
    while low < high {
        let middle = low + (high - low) / 2;
        let right = parse(rights[middle], middle)?;
        let below = match parsed.cmp(&right) {
            Ordering::Greater => true,
            Ordering::Equal => inclusive,
            Ordering::Less => false,
        };
        if below {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    Ok(low)
}

fn parse_left(bytes: &[u8]) -> Result<OreCipherText, KernelError> {
    let parsed = parse(bytes, 0)?;
    if !parsed.has_left() {
        return Err(malformed(
            0,
            "a right ciphertext where a left one was expected",
        ));
    }
    Ok(parsed)
}

fn parse(bytes: &[u8], row: usize) -> Result<OreCipherText, KernelError> {
    match bytes.split_first() {
        Some((&VERSION, rest)) => {
            OreCipherText::from_slice(rest).map_err(|e| malformed(row, &e.to_string()))
        }
        Some((version, _)) => Err(malformed(row, &format!("unknown version {version}"))),
        None => Err(malformed(row, "empty")),
    }
}

fn malformed(row: usize, reason: &str) -> KernelError {
    KernelError::Malformed {
        row,
        reason: format!("ORE ciphertext: {reason}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ore() -> Ore {
        Ore::new(&[7u8; 32]).unwrap()
    }

    #[test]
    fn orders_like_the_plaintexts() {
        let ore = ore();
        let values = [0u64, 1, 255, 256, 65_535, 1 << 40, u64::MAX - 1, u64::MAX];
        let rights = ore.encrypt_right(&values).unwrap();
        let refs: Vec<&[u8]> = rights.iter().map(Vec::as_slice).collect();
        for (i, left) in ore.encrypt_left(&values).unwrap().iter().enumerate() {
            let got = compare(left, &refs).unwrap();
            let want: Vec<i8> = values.iter().map(|v| values[i].cmp(v) as i8).collect();
            assert_eq!(got, want, "left of {}", values[i]);
        }
    }

    #[test]
    fn ranks_in_sorted_rights() {
        let ore = ore();
        let sorted = [1u64, 3, 3, 3, 8, 200, 70_000];
        let rights = ore.encrypt_right(&sorted).unwrap();
        let refs: Vec<&[u8]> = rights.iter().map(Vec::as_slice).collect();
        for probe in [0u64, 1, 2, 3, 4, 8, 9, 70_000, u64::MAX] {
            let left = &ore.encrypt_left(&[probe]).unwrap()[0];
            let below = sorted.iter().filter(|&&v| v < probe).count();
            let at_most = sorted.iter().filter(|&&v| v <= probe).count();
            assert_eq!(rank(left, &refs, false).unwrap(), below, "< {probe}");
            assert_eq!(rank(left, &refs, true).unwrap(), at_most, "<= {probe}");
        }
        assert_eq!(
            rank(&ore.encrypt_left(&[5]).unwrap()[0], &[], true).unwrap(),
            0
        );
    }

    #[test]
    fn a_batch_split_over_threads_keeps_its_order() {
        let ore = ore();
        let values: Vec<u64> = (0..4 * PARALLEL_MIN_KEYS as u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let rights = ore.encrypt_right(&values).unwrap();
        let refs: Vec<&[u8]> = rights.iter().map(Vec::as_slice).collect();
        let lefts = ore.encrypt_left(&values).unwrap();
        for i in [0, 1, PARALLEL_MIN_KEYS, values.len() - 1] {
            let got = compare(&lefts[i], &refs).unwrap();
            let want: Vec<i8> = values.iter().map(|v| values[i].cmp(v) as i8).collect();
            assert_eq!(got, want, "row {i}");
        }
    }

    #[test]
    fn right_ciphertexts_are_randomised() {
        let ore = ore();
        let a = ore.encrypt_right(&[42, 42]).unwrap();
        assert_ne!(a[0], a[1]);
        assert_eq!(a[0][0], VERSION);
    }

    #[test]
    fn refuses_bad_input() {
        assert!(matches!(
            Ore::new(&[0u8; 16]),
            Err(KernelError::KeyLength { .. })
        ));
        let ore = ore();
        let right = ore.encrypt_right(&[1]).unwrap();
        let left = ore.encrypt_left(&[1]).unwrap();
        assert!(compare(&right[0], &[&right[0]]).is_err());
        assert!(compare(&left[0], &[&[2u8, 0, 0][..]]).is_err());
        assert!(compare(&left[0], &[&[VERSION, 9][..]]).is_err());
        assert!(compare(&left[0], &[&[][..]]).is_err());
    }
}
