//! Order-preserving encryption: Boldyreva, Chenette, Lee, O'Neill,
//! "Order-Preserving Symmetric Encryption", EUROCRYPT 2009 (BCLO).
//!
//! A key stands for one random strictly increasing map from the domain
//! D = [0, 2^bits) into the range R = [0, 2^cipher_bits), sampled lazily:
//! a tree node owns a domain interval of M points and a range interval of
//! N slots; the range splits at its middle y (N is a power of two, so the
//! split is exact), and the number x of domain points below y is drawn from
//! the hypergeometric law HGD(M good, N - M bad, N/2 draws) with coins from
//! the node. A plaintext descends to the side holding it; a node with one
//! plaintext picks the ciphertext uniformly in its range, with coins from
//! that leaf. Decryption walks the same path comparing the ciphertext with y,
//! and rejects ciphertexts that lead to an empty side or to a leaf whose
//! ciphertext differs (most random numbers are not valid ciphertexts).
//!
//! Coins: BCLO's TapeGen is AES-256 under the working key in counter mode
//! over the node's name (see `tree::NodeCoins`); its 64-bit words feed
//! `hgd::sample`. (A ChaCha20 stream seeded per node was tried first: its
//! 256-byte refill took a third of the time of a node that needs ~16 bytes.)
//! So ciphertexts are a pure function of (key, bits, signed, plaintext), on
//! every platform.
//!
//! Ciphertext bits: bits <= 32 gives cipher_bits = bits + 31 (at most 63, so a
//! ciphertext is a non-negative BIGINT the server compares natively); bits > 32
//! gives cipher_bits = bits + 32 (at most 96), stored as fixed-width binary
//! 0x01 || big-endian bytes, which byte-wise comparison orders correctly. The
//! BIGINT form has no room for a version byte; its version lives in the key
//! label, like FF1's. `Ope::with_cipher_bits` takes a narrower range (still
//! more than `bits`): a server that bit-packs integers stores fewer bits a row.
//! Signed domains map v to v + 2^(bits-1) (the sign bit
//! flipped) so that order is kept.
//!
//! Speed: whole plaintext <-> ciphertext pairs are cached (`pairs`), so
//! repeats cost one lookup; a column's new values are walked in sorted order
//! and each descent resumes where it leaves the previous one, and the top
//! of the tree is memoised (`tree`).

mod pairs;
mod tree;

use aes::cipher::{generic_array::GenericArray, KeyInit};
use aes::Aes256;

use crate::KernelError;
use pairs::Pairs;
use tree::{Target, Tree};

/// Version byte of the binary ciphertext form.
pub const VERSION: u8 = 0x01;

/// One BCLO key with its parameters, its tree and its pair caches.
pub struct Ope {
    bits: u32,
    cipher_bits: u32,
    signed: bool,
    tree: Tree,
    pairs: Pairs,
}

impl Ope {
    /// A scheme over `bits`-bit plaintexts (1..=64) under a 32-byte key, with
    /// `cipher_bits_for(bits)` ciphertext bits.
    pub fn new(key: &[u8], bits: u32, signed: bool) -> Result<Self, KernelError> {
        Self::with_cipher_bits(key, bits, cipher_bits_for(bits), signed)
    }

    /// A scheme over `bits`-bit plaintexts into `cipher_bits`-bit ciphertexts
    /// (`bits < cipher_bits <= 96`; int64 ciphertexts up to 63 bits, binary above).
    /// The coins do not name `cipher_bits`: a caller choosing other than
    /// `cipher_bits_for(bits)` derives its own key for it (`veil.crypto.ope`'s label
    /// version), so that no key serves two ranges.
    pub fn with_cipher_bits(
        key: &[u8],
        bits: u32,
        cipher_bits: u32,
        signed: bool,
    ) -> Result<Self, KernelError> {
        if key.len() != 32 {
            return Err(KernelError::KeyLength {
                expected: 32,
                got: key.len(),
            });
        }
        if !(1..=64).contains(&bits) {
            return Err(KernelError::Parameter(format!(
                "OPE plaintext bits must be in 1..=64, got {bits}"
            )));
        }
        if !(bits + 1..=MAX_CIPHER_BITS).contains(&cipher_bits) {
            return Err(KernelError::Parameter(format!(
                "OPE ciphertext bits must be in {}..={MAX_CIPHER_BITS} for {bits}-bit \
                 plaintexts, got {cipher_bits}",
                bits + 1
            )));
        }
        let prf = Aes256::new(GenericArray::from_slice(key));
        Ok(Self {
            bits,
            cipher_bits,
            signed,
            pairs: Pairs::new(&prf),
            tree: Tree::new(prf, bits, cipher_bits, signed),
        })
    }

    pub fn cipher_bits(&self) -> u32 {
        self.cipher_bits
    }

    /// Bytes of the binary form: version byte plus the big-endian ciphertext.
    pub fn binary_width(&self) -> usize {
        1 + self.cipher_bits.div_ceil(8) as usize
    }

    /// The domain in words, for error messages.
    pub fn domain(&self) -> String {
        let (low, high) = self.plaintext_bounds();
        let kind = if self.signed { "signed" } else { "unsigned" };
        format!(
            "{kind} {}-bit integers [{low}, {high}]; declare the column with more OPE bits \
             to hold larger values",
            self.bits
        )
    }

    fn plaintext_bounds(&self) -> (i128, i128) {
        let size = 1i128 << self.bits;
        if self.signed {
            (-size / 2, size / 2 - 1)
        } else {
            (0, size - 1)
        }
    }

    /// The domain point (0-based) of a plaintext, if it is in the domain.
    pub fn point_of(&self, plaintext: i128) -> Option<u64> {
        let (low, high) = self.plaintext_bounds();
        (low..=high)
            .contains(&plaintext)
            .then(|| (plaintext - low) as u64)
    }

    /// The plaintext of a domain point.
    pub fn plaintext_of(&self, point: u64) -> i128 {
        point as i128 + self.plaintext_bounds().0
    }

    /// Encrypts a domain point (see `point_of`).
    pub fn encrypt_point(&mut self, point: u64) -> u128 {
        if let Some(c) = self.pairs.ciphertext(point) {
            return c;
        }
        let (_, c) = self
            .tree
            .descend(Target::Plaintext(point))
            .expect("plaintexts reach a leaf");
        self.pairs.remember(point, c);
        c
    }

    /// Decrypts to a domain point; `None` if `c` is not a valid ciphertext.
    pub fn decrypt_point(&mut self, c: u128) -> Option<u64> {
        if let Some(p) = self.pairs.point(c) {
            return Some(p);
        }
        if c >> self.cipher_bits != 0 {
            return None;
        }
        let (point, leaf_c) = self.tree.descend(Target::Ciphertext(c))?;
        (leaf_c == c).then(|| {
            self.pairs.remember(point, c);
            point
        })
    }

    /// Encrypts a column; rows where `valid` is false are skipped (left 0).
    pub fn encrypt_column<T: Copy + Into<i128>>(
        &mut self,
        plaintexts: &[T],
        valid: Option<&[bool]>,
        out: &mut [u128],
    ) -> Result<(), KernelError> {
        check_lengths(plaintexts.len(), valid, out.len())?;
        let mut fresh = Vec::new();
        for (row, (&v, c)) in plaintexts.iter().zip(out.iter_mut()).enumerate() {
            if valid.is_some_and(|valid| !valid[row]) {
                continue;
            }
            let point = self.point_of(v.into()).ok_or_else(|| KernelError::Domain {
                row,
                domain: self.domain(),
            })?;
            match self.pairs.ciphertext(point) {
                Some(known) => *c = known,
                None => fresh.push((point, row)),
            }
        }
        // Sorted, consecutive descents share the longest path prefixes.
        fresh.sort_unstable();
        for (point, row) in fresh {
            out[row] = self.encrypt_point(point);
        }
        Ok(())
    }

    /// Decrypts a column of ciphertexts (`None` = malformed) to plaintexts.
    pub fn decrypt_column(
        &mut self,
        ciphertexts: impl ExactSizeIterator<Item = Option<u128>>,
        valid: Option<&[bool]>,
        out: &mut [i128],
    ) -> Result<(), KernelError> {
        check_lengths(ciphertexts.len(), valid, out.len())?;
        let mut fresh = Vec::new();
        let mut first_bad = None;
        for (row, c) in ciphertexts.enumerate() {
            if valid.is_some_and(|valid| !valid[row]) {
                continue;
            }
            match c.map(|c| (c, self.pairs.point(c))) {
                Some((_, Some(point))) => out[row] = self.plaintext_of(point),
                Some((c, None)) => fresh.push((c, row)),
                None => first_bad = first_bad.or(Some(row)),
            }
        }
        if let Some(bad) = first_bad {
            fresh.retain(|&(_, row)| row < bad); // only an earlier row can be reported
        }
        fresh.sort_unstable();
        for (c, row) in fresh {
            match self.decrypt_point(c) {
                Some(point) => out[row] = self.plaintext_of(point),
                None => first_bad = Some(first_bad.map_or(row, |bad: usize| bad.min(row))),
            }
        }
        match first_bad {
            None => Ok(()),
            Some(row) => Err(KernelError::Malformed {
                row,
                reason: "it is not an OPE ciphertext under this key and width \
                         (wrong key or column, or tampered data)"
                    .to_string(),
            }),
        }
    }

    /// Writes the binary form (0x01 || big-endian ciphertext) into `out`.
    pub fn write_binary(&self, c: u128, out: &mut [u8]) {
        let width = self.binary_width();
        out[0] = VERSION;
        out[1..width].copy_from_slice(&c.to_be_bytes()[17 - width..]);
    }

    /// Reads the binary form; `None` if its length or version is wrong.
    pub fn read_binary(&self, bytes: &[u8]) -> Option<u128> {
        let width = self.binary_width();
        if bytes.len() != width || bytes[0] != VERSION {
            return None;
        }
        let mut be = [0u8; 16];
        be[17 - width..].copy_from_slice(&bytes[1..]);
        Some(u128::from_be_bytes(be))
    }
}

/// A column, its validity mask and its output buffer must have one length.
fn check_lengths(rows: usize, valid: Option<&[bool]>, out: usize) -> Result<(), KernelError> {
    let mask = valid.map_or(rows, <[bool]>::len);
    if mask != rows || out != rows {
        return Err(KernelError::Parameter(format!(
            "a column of {rows} values needs a validity mask and output of {rows} rows, \
             got {mask} and {out}"
        )));
    }
    Ok(())
}

/// The widest ciphertexts (`cipher_bits_for(64)`).
pub const MAX_CIPHER_BITS: u32 = 96;

/// Ciphertext bits for `bits`-bit plaintexts (see the module docs).
pub fn cipher_bits_for(bits: u32) -> u32 {
    if bits <= 32 {
        bits + 31
    } else {
        bits + 32
    }
}
