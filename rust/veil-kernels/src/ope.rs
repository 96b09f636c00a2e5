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
//! over the node's name (see `NodeCoins`); its 64-bit words feed
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
//! label, like FF1's. Signed domains map v to v + 2^(bits-1) (the sign bit
//! flipped) so that order is kept.
//!
//! Speed: the first `MEMO_DEPTH` levels of the tree are shared by all
//! plaintexts and memoised in arrays; whole plaintext -> ciphertext pairs are
//! cached in hash maps (both directions), so repeats cost one lookup.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use aes::cipher::{generic_array::GenericArray, BlockEncrypt, KeyInit};
use aes::Aes256;
use rand_core::RngCore;

use crate::hgd;
use crate::KernelError;

/// Levels of the tree whose splits are memoised (2^MEMO_DEPTH - 1 nodes, 4 MiB).
const MEMO_DEPTH: u32 = 18;
/// Marks a memo slot not yet computed (a split is at most 2^64).
const UNKNOWN: u128 = u128::MAX;
/// Plaintext/ciphertext pairs cached before the caches are emptied (~60 MB).
const CACHE_LIMIT: usize = 1 << 20;
/// Version byte of the binary ciphertext form.
pub const VERSION: u8 = 0x01;

const INNER: u8 = 0;
const LEAF: u8 = 1;

/// One BCLO key with its parameters, memoised tree top and pair caches.
pub struct Ope {
    prf: Aes256,
    bits: u32,
    cipher_bits: u32,
    signed: bool,
    memo: Vec<Vec<u128>>,
    /// Ciphertexts as (high, low) halves: 8-byte alignment keeps entries small.
    encrypted: HashMap<u64, (u64, u64), KeyedHash>,
    decrypted: HashMap<u128, u64, KeyedHash>,
}

/// Where a descent through the tree is going.
#[derive(Clone, Copy)]
enum Target {
    Plaintext(u64),
    Ciphertext(u128),
}

impl Ope {
    /// A scheme over `bits`-bit plaintexts (1..=64) under a 32-byte key.
    pub fn new(key: &[u8], bits: u32, signed: bool) -> Result<Self, KernelError> {
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
        let prf = Aes256::new(GenericArray::from_slice(key));
        let hash = KeyedHash::from_prf(&prf);
        Ok(Self {
            prf,
            bits,
            cipher_bits: cipher_bits_for(bits),
            signed,
            memo: Vec::new(),
            encrypted: HashMap::with_hasher(hash),
            decrypted: HashMap::with_hasher(hash),
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
        if let Some(&(high, low)) = self.encrypted.get(&point) {
            return (high as u128) << 64 | low as u128;
        }
        let (_, c) = self
            .descend(Target::Plaintext(point))
            .expect("plaintexts reach a leaf");
        self.remember(point, c);
        c
    }

    /// Decrypts to a domain point; `None` if `c` is not a valid ciphertext.
    pub fn decrypt_point(&mut self, c: u128) -> Option<u64> {
        if let Some(&p) = self.decrypted.get(&c) {
            return Some(p);
        }
        if c >> self.cipher_bits != 0 {
            return None;
        }
        let (point, leaf_c) = self.descend(Target::Ciphertext(c))?;
        (leaf_c == c).then(|| {
            self.remember(point, c);
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
        for (row, (&v, c)) in plaintexts.iter().zip(out.iter_mut()).enumerate() {
            if valid.is_some_and(|valid| !valid[row]) {
                continue;
            }
            let point = self.point_of(v.into()).ok_or_else(|| KernelError::Domain {
                row,
                domain: self.domain(),
            })?;
            *c = self.encrypt_point(point);
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
        for (row, (c, p)) in ciphertexts.zip(out.iter_mut()).enumerate() {
            if valid.is_some_and(|valid| !valid[row]) {
                continue;
            }
            let point =
                c.and_then(|c| self.decrypt_point(c))
                    .ok_or_else(|| KernelError::Malformed {
                        row,
                        reason: "it is not an OPE ciphertext under this key and width \
                             (wrong key or column, or tampered data)"
                            .to_string(),
                    })?;
            *p = self.plaintext_of(point);
        }
        Ok(())
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

    fn remember(&mut self, point: u64, c: u128) {
        if self.encrypted.len() >= CACHE_LIMIT {
            self.encrypted.clear();
            self.decrypted.clear();
        }
        self.encrypted.insert(point, ((c >> 64) as u64, c as u64));
        self.decrypted.insert(c, point);
    }

    /// Walks from the root to the leaf of `target`: for a plaintext, returns
    /// (its point, its ciphertext); for a ciphertext, the leaf it leads to,
    /// or `None` if it leads to a side with no plaintexts.
    fn descend(&mut self, target: Target) -> Option<(u64, u128)> {
        let (mut d_low, mut d_size) = (0u128, 1u128 << self.bits);
        let (mut r_low, mut r_size) = (0u128, 1u128 << self.cipher_bits);
        let mut depth = 0;
        while d_size > 1 {
            let below = self.split(depth, r_low, d_size, r_size);
            let half = r_size / 2;
            let left = match target {
                Target::Plaintext(p) => (p as u128) < d_low + below,
                Target::Ciphertext(c) => c < r_low + half,
            };
            if left {
                d_size = below;
            } else {
                (d_low, d_size) = (d_low + below, d_size - below);
                r_low += half;
            }
            r_size = half;
            depth += 1;
        }
        if d_size == 0 {
            return None;
        }
        let mut coins = self.coins(LEAF, depth, r_low);
        let offset = next_u128(&mut coins) & (r_size - 1);
        Some((d_low as u64, r_low + offset))
    }

    /// Domain points below the middle of the node's range (memoised near the root).
    fn split(&mut self, depth: u32, r_low: u128, d_size: u128, r_size: u128) -> u128 {
        if depth >= MEMO_DEPTH {
            return self.sample_split(depth, r_low, d_size, r_size);
        }
        let index = (r_low >> (self.cipher_bits - depth)) as usize;
        if self.memo.len() <= depth as usize {
            self.memo.resize_with(depth as usize + 1, Vec::new);
        }
        if self.memo[depth as usize].is_empty() {
            self.memo[depth as usize] = vec![UNKNOWN; 1 << depth];
        }
        let known = self.memo[depth as usize][index];
        if known != UNKNOWN {
            return known;
        }
        let below = self.sample_split(depth, r_low, d_size, r_size);
        self.memo[depth as usize][index] = below;
        below
    }

    fn sample_split(&self, depth: u32, r_low: u128, d_size: u128, r_size: u128) -> u128 {
        let mut coins = self.coins(INNER, depth, r_low);
        hgd::sample(d_size, r_size - d_size, r_size / 2, &mut coins)
    }

    /// The node's coin stream (see `NodeCoins`).
    fn coins(&self, kind: u8, depth: u32, r_low: u128) -> NodeCoins<'_> {
        let mut name = [0u8; 16];
        name[0] = kind | (self.signed as u8) << 1 | ((self.bits - 1) as u8) << 2;
        name[1] = depth as u8;
        name[4..].copy_from_slice(&r_low.to_be_bytes()[4..]);
        NodeCoins {
            prf: &self.prf,
            name,
            counter: 0,
            words: [0; 4],
            used: 4,
        }
    }
}

/// BCLO's random tape for one node: AES-256 under the working key of the
/// blocks `kind | signed | bits-1, depth, counter (2 bytes), range start (12
/// bytes)` for counter = 0, 1, 2, ... (AES as a PRF in counter mode). The
/// range start and depth name the node uniquely because the range tree is
/// the same for every key; `cipher_bits` follows from `bits`. A node uses a
/// handful of blocks; the 16-bit counter would wrap only after 2^16 rejected
/// HGD proposals, which never happens in practice (and stays deterministic).
struct NodeCoins<'a> {
    prf: &'a Aes256,
    name: [u8; 16],
    counter: u16,
    words: [u64; 4],
    used: usize,
}

impl NodeCoins<'_> {
    fn refill(&mut self) {
        let mut blocks = [GenericArray::from(self.name), GenericArray::from(self.name)];
        for block in blocks.iter_mut() {
            block[2..4].copy_from_slice(&self.counter.to_be_bytes());
            self.counter = self.counter.wrapping_add(1);
        }
        self.prf.encrypt_blocks(&mut blocks);
        for (i, word) in self.words.iter_mut().enumerate() {
            let bytes = &blocks[i / 2][(i % 2) * 8..(i % 2) * 8 + 8];
            *word = u64::from_be_bytes(bytes.try_into().expect("8 bytes"));
        }
        self.used = 0;
    }
}

impl RngCore for NodeCoins<'_> {
    fn next_u64(&mut self) -> u64 {
        if self.used == self.words.len() {
            self.refill();
        }
        self.used += 1;
        self.words[self.used - 1]
    }

    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            chunk.copy_from_slice(&self.next_u64().to_be_bytes()[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// A fast hash for the pair caches, keyed from the PRF so that nobody without
/// the key can choose plaintexts that collide (SipHash costs 4x as much here).
#[derive(Clone, Copy)]
struct KeyedHash {
    multiplier: u64,
}

impl KeyedHash {
    fn from_prf(prf: &Aes256) -> Self {
        let mut block = GenericArray::from([0xffu8; 16]); // no node name has depth 0xff
        prf.encrypt_block(&mut block);
        let word = u64::from_le_bytes(block[..8].try_into().expect("8 bytes"));
        Self {
            multiplier: word | 1,
        }
    }
}

impl BuildHasher for KeyedHash {
    type Hasher = KeyedHasher;
    fn build_hasher(&self) -> KeyedHasher {
        KeyedHasher {
            multiplier: self.multiplier,
            state: 0,
        }
    }
}

/// Folded 128-bit multiply of each word into the state (as in wyhash).
struct KeyedHasher {
    multiplier: u64,
    state: u64,
}

impl Hasher for KeyedHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        let product = ((self.state ^ word) as u128) * (self.multiplier as u128);
        self.state = (product >> 64) as u64 ^ product as u64;
    }

    fn write_u128(&mut self, word: u128) {
        self.write_u64(word as u64);
        self.write_u64((word >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.state
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

/// Ciphertext bits for `bits`-bit plaintexts (see the module docs).
pub fn cipher_bits_for(bits: u32) -> u32 {
    if bits <= 32 {
        bits + 31
    } else {
        bits + 32
    }
}

fn next_u128<R: RngCore>(rng: &mut R) -> u128 {
    let high = rng.next_u64() as u128;
    (high << 64) | rng.next_u64() as u128
}
