//! ASHE: Seabed's additive symmetric homomorphic encryption (Papadimitriou et
//! al., OSDI 2016), over 64-bit integers.
//!
//! A value `m` stored under row id `i` is encrypted as
//!
//! ```text
//! c = m + F(i) − F(i − 1)   (mod 2^64)
//! ```
//!
//! where `F` is a pseudorandom function keyed by the column's ASHE key. The
//! server adds ciphertexts with its own integer `SUM`; the client reduces the
//! total mod 2^64 and subtracts the pads `F(i) − F(i − 1)` of the ids summed.
//! Over a run of consecutive ids `a..=b` the pads telescope to
//! `F(b) − F(a − 1)`, so removing them costs two PRF calls per run, not per
//! row.
//!
//! Ids live on the cycle Z/2^64: the predecessor of id 0 is id 2^64 − 1, so
//! every id has a pad of the same form, signed and unsigned views of an id
//! (an `i64` row id stored as BIGINT, or its `u64` bits) agree on which ids
//! are consecutive, and a run may cross 2^64 − 1 → 0 (or, in the signed view,
//! −1 → 0 and `i64::MAX` → `i64::MIN`) without a special case.
//!
//! The PRF, version 1: `F(i)` is the first 8 bytes, read little-endian, of
//! AES-256(k, block(i)), where the 16-byte block is
//!
//! ```text
//! block(i) = DOMAIN_PAD (0x01) || 0x00 × 7 || i (8 bytes, big-endian)
//! ```
//!
//! The domain byte keeps the pad PRF apart from any other use a later
//! version might make of the same key (a second, independent pad for the
//! high word of a split value, say). A raw 64-bit ciphertext has no room for
//! a version byte; the scheme's version is part of the key's derivation label
//! instead (see `veil/crypto/ashe.py`), so a different construction always
//! runs under a different key.
//!
//! Pads are one-time: two values encrypted under one id leak their
//! difference. Callers must never reuse an id (an UPDATE writes a fresh id).

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::{Aes256, Block};

use crate::KernelError;

/// Version of the construction above; part of the key label on the Python side.
pub const VERSION: u8 = 1;
/// Key length (AES-256).
pub const KEY_LEN: usize = 32;
/// First byte of every PRF input block: "pad of an id".
pub const DOMAIN_PAD: u8 = 0x01;

/// Blocks encrypted per AES call: enough to keep AES-NI's pipeline full
/// (the `aes` crate works on 8 blocks at a time), small enough for the stack.
const BATCH: usize = 128;

/// An ASHE key. The expanded AES key is zeroized when dropped (the `aes`
/// crate's `zeroize` feature), and the raw key is not kept.
pub struct Ashe {
    cipher: Aes256,
}

impl Ashe {
    /// Expand a 32-byte key.
    pub fn new(key: &[u8]) -> Result<Self, KernelError> {
        Ok(Self {
            cipher: aes256(key)?,
        })
    }

    /// The PRF `F(id)`.
    pub fn prf(&self, id: u64) -> u64 {
        let mut blocks = [block(id)];
        self.cipher.encrypt_blocks(&mut blocks);
        prf_output(&blocks[0])
    }

    /// The pad of one id: `F(id) − F(id − 1)`, wrapping.
    pub fn pad(&self, id: u64) -> u64 {
        let mut blocks = [block(id), block(id.wrapping_sub(1))];
        self.cipher.encrypt_blocks(&mut blocks);
        prf_output(&blocks[0]).wrapping_sub(prf_output(&blocks[1]))
    }

    /// Encrypts `values[j]` under `ids[j]` into `out[j]` (the ciphertext's
    /// bits; the server stores them as a signed BIGINT).
    pub fn encrypt_into(
        &self,
        ids: &[u64],
        values: &[i64],
        out: &mut [u64],
    ) -> Result<(), KernelError> {
        check_lengths(ids.len(), values.len(), out.len())?;
        self.for_each_pad(ids, |j, pad| out[j] = (values[j] as u64).wrapping_add(pad));
        Ok(())
    }

    /// Encrypts a batch into a new vector.
    pub fn encrypt(&self, ids: &[u64], values: &[i64]) -> Result<Vec<u64>, KernelError> {
        let mut out = vec![0; ids.len()];
        self.encrypt_into(ids, values, &mut out)?;
        Ok(out)
    }

    /// Decrypts single ciphertexts (not sums): `out[j] = c[j] − pad(ids[j])`.
    pub fn decrypt_into(
        &self,
        ids: &[u64],
        ciphertexts: &[u64],
        out: &mut [i64],
    ) -> Result<(), KernelError> {
        check_lengths(ids.len(), ciphertexts.len(), out.len())?;
        self.for_each_pad(ids, |j, pad| {
            out[j] = ciphertexts[j].wrapping_sub(pad) as i64;
        });
        Ok(())
    }

    /// The sum of the pads of `ids` (a multiset, in any order), wrapping.
    ///
    /// Runs of consecutive ids in the array's order telescope, so a sorted
    /// array costs two AES blocks per run; an unsorted one is still exact,
    /// only slower (up to two blocks per id).
    pub fn pad_sum_ids(&self, ids: &[u64]) -> u64 {
        let mut sum = PadSum::new(self);
        let mut rest = ids;
        while let Some((&start, tail)) = rest.split_first() {
            let length = run_length(start, tail);
            sum.add_run(start, start.wrapping_add(length as u64));
            rest = &tail[length..];
        }
        sum.finish()
    }

    /// The sum of the pads over runs `[start, end]`, both ends included. A
    /// run goes forward from `start` to `end` on the cycle of ids, so
    /// `end < start` (as unsigned) is a run that wraps past 2^64 − 1.
    pub fn pad_sum_runs(&self, runs: &[[u64; 2]]) -> u64 {
        let mut sum = PadSum::new(self);
        for &[start, end] in runs {
            sum.add_run(start, end);
        }
        sum.finish()
    }

    /// The sum of the pads of the ids whose bit is set in `words`: bit `k`
    /// (least significant first) of `words[w]` stands for id
    /// `base + 64 w + k`, wrapping.
    pub fn pad_sum_bitmap(&self, base: u64, words: &[u64]) -> u64 {
        let mut sum = PadSum::new(self);
        let mut open: Option<u64> = None;
        for (w, &word) in words.iter().enumerate() {
            let word_base = base.wrapping_add((w as u64).wrapping_mul(64));
            open = bitmap_word_runs(word, word_base, open, &mut sum);
        }
        if let Some(start) = open {
            let bits = (words.len() as u64).wrapping_mul(64);
            sum.add_run(start, base.wrapping_add(bits).wrapping_sub(1));
        }
        sum.finish()
    }

    /// Per-block pad sums: `out[r]` is the sum of the pads of the ids whose
    /// bit is set in `masks[r]`, bit `k` standing for id `bases[r] + k`.
    ///
    /// This is what a grouped server sum needs: the server returns, per
    /// (group, block of 64 ids), the SUM of the block's ciphertexts and the
    /// BIT_OR of the ids' bits, and every such row is unpadded on its own.
    /// AES blocks of all rows are batched together.
    pub fn pad_sums_blocks(
        &self,
        bases: &[u64],
        masks: &[u64],
        out: &mut [u64],
    ) -> Result<(), KernelError> {
        if bases.len() != masks.len() || masks.len() != out.len() {
            return Err(KernelError::Parameter(format!(
                "per-block pad sums need one base and one output slot per mask; got {} bases, \
                 {} masks and {} output slots",
                bases.len(),
                masks.len(),
                out.len()
            )));
        }
        let mut batch = RowBatch::new(self);
        for (row, (&base, &mask)) in bases.iter().zip(masks).enumerate() {
            out[row] = 0;
            let mut rest = mask;
            while rest != 0 {
                let start = rest.trailing_zeros();
                let ones = (rest >> start).trailing_ones();
                let end = start + ones - 1;
                let first = base.wrapping_add(u64::from(start));
                batch.add_run(row, first, base.wrapping_add(u64::from(end)), out);
                rest = if end >= 63 {
                    0
                } else {
                    rest & (u64::MAX << (end + 1))
                };
            }
        }
        batch.flush(out);
        Ok(())
    }

    /// Calls `emit(j, pad(ids[j]))` for every j, batching the AES blocks.
    /// A run of consecutive ids reuses `F(i)` as the next id's `F(i − 1)`,
    /// so sequential ids cost one block per id.
    fn for_each_pad(&self, ids: &[u64], mut emit: impl FnMut(usize, u64)) {
        let mut blocks = [Block::default(); 2 * BATCH];
        let mut previous = [0u8; BATCH]; // index of F(id − 1) in `blocks`
        for (chunk_index, chunk) in ids.chunks(BATCH).enumerate() {
            let mut used = 0;
            for (k, &id) in chunk.iter().enumerate() {
                if k > 0 && chunk[k - 1].wrapping_add(1) == id {
                    previous[k] = (used - 1) as u8;
                } else {
                    blocks[used] = block(id.wrapping_sub(1));
                    previous[k] = used as u8;
                    used += 1;
                }
                blocks[used] = block(id);
                used += 1;
            }
            self.cipher.encrypt_blocks(&mut blocks[..used]);
            // F(id) always sits right after F(id − 1): either it was pushed
            // just after it, or F(id − 1) was the previous id's F.
            for (k, &p) in previous[..chunk.len()].iter().enumerate() {
                let p = usize::from(p);
                let pad = prf_output(&blocks[p + 1]).wrapping_sub(prf_output(&blocks[p]));
                emit(chunk_index * BATCH + k, pad);
            }
        }
    }
}

/// How many of `tail`'s leading ids continue the run that `start` opens.
#[inline]
fn run_length(start: u64, tail: &[u64]) -> usize {
    let mut expected = start.wrapping_add(1);
    let mut length = 0;
    for &id in tail {
        if id != expected {
            break;
        }
        expected = expected.wrapping_add(1);
        length += 1;
    }
    length
}

/// Adds the runs of set bits of one bitmap word whose bit 0 is id
/// `word_base`; `open` is the start of a run carried in from the previous
/// word, and the return value the start of a run carried on to the next.
fn bitmap_word_runs(
    word: u64,
    word_base: u64,
    mut open: Option<u64>,
    sum: &mut PadSum,
) -> Option<u64> {
    let mut position = 0u32;
    while position < 64 {
        let rest = word >> position;
        match open {
            Some(start) => {
                let ones = rest.trailing_ones();
                if ones >= 64 - position {
                    return open; // every remaining bit is set: the run goes on
                }
                position += ones;
                sum.add_run(start, word_base.wrapping_add(u64::from(position) - 1));
                open = None;
            }
            None => {
                if rest == 0 {
                    return None;
                }
                position += rest.trailing_zeros();
                open = Some(word_base.wrapping_add(u64::from(position)));
            }
        }
    }
    open
}

/// Accumulates `F(end) − F(start − 1)` over runs into one total (a
/// `RowBatch` with a single output row).
struct PadSum<'a> {
    batch: RowBatch<'a>,
    total: [u64; 1],
}

impl<'a> PadSum<'a> {
    fn new(ashe: &'a Ashe) -> Self {
        Self {
            batch: RowBatch::new(ashe),
            total: [0],
        }
    }

    #[inline]
    fn add_run(&mut self, start: u64, end: u64) {
        self.batch.add_run(0, start, end, &mut self.total);
    }

    fn finish(mut self) -> u64 {
        self.batch.flush(&mut self.total);
        self.total[0]
    }
}

/// Sums `F(end) − F(start − 1)` per run into the run's output row, AES
/// blocks batched: even slots hold run ends (added), odd slots the ids
/// before run starts (subtracted).
struct RowBatch<'a> {
    cipher: &'a Aes256,
    blocks: [Block; BATCH],
    rows: [usize; BATCH / 2],
    used: usize,
}

impl<'a> RowBatch<'a> {
    fn new(ashe: &'a Ashe) -> Self {
        Self {
            cipher: &ashe.cipher,
            blocks: [Block::default(); BATCH],
            rows: [0; BATCH / 2],
            used: 0,
        }
    }

    #[inline]
    fn add_run(&mut self, row: usize, start: u64, end: u64, out: &mut [u64]) {
        self.blocks[self.used] = block(end);
        self.blocks[self.used + 1] = block(start.wrapping_sub(1));
        self.rows[self.used / 2] = row;
        self.used += 2;
        if self.used == BATCH {
            self.flush(out);
        }
    }

    fn flush(&mut self, out: &mut [u64]) {
        let blocks = &mut self.blocks[..self.used];
        self.cipher.encrypt_blocks(blocks);
        for (pair, &row) in blocks.chunks_exact(2).zip(&self.rows) {
            let run = prf_output(&pair[0]).wrapping_sub(prf_output(&pair[1]));
            out[row] = out[row].wrapping_add(run);
        }
        self.used = 0;
    }
}

/// The PRF's input block for `id`.
#[inline]
fn block(id: u64) -> Block {
    let value = (u128::from(DOMAIN_PAD) << 120) | u128::from(id);
    Block::from(value.to_be_bytes())
}

/// Expands a 32-byte AES-256 key (shared with `rowrnd`).
pub(crate) fn aes256(key: &[u8]) -> Result<Aes256, KernelError> {
    Aes256::new_from_slice(key).map_err(|_| KernelError::KeyLength {
        expected: KEY_LEN,
        got: key.len(),
    })
}

/// The PRF's output: the first 8 bytes of the AES block, little-endian
/// (also row-bound RND's word of keystream).
#[inline]
pub(crate) fn prf_output(block: &Block) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&block[..8]);
    u64::from_le_bytes(bytes)
}

fn check_lengths(ids: usize, values: usize, out: usize) -> Result<(), KernelError> {
    if ids == values && values == out {
        return Ok(());
    }
    Err(KernelError::Parameter(format!(
        "ASHE needs one id per value and one output slot per value; got {ids} ids, \
         {values} values and {out} output slots"
    )))
}

#[cfg(test)]
mod tests;
