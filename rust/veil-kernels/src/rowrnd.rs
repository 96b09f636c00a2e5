//! Row-bound RND: a table column's values encrypted under the row's id, with
//! no per-value nonce or tag.
//!
//! Every row of a Veil table has an id that is never used twice (ids are
//! sequential, taken from a counter on the server, and an UPDATE writes fresh
//! ids; see `veil/session/row_ids.py`). That id is the nonce: a value `m` of the
//! row with id `i` is stored as `m XOR keystream(i)`, where, version 1,
//!
//! ```text
//! keystream(i) = AES-256(k, block(i, 0)) || AES-256(k, block(i, 1)) || ...
//! block(i, j)  = DOMAIN (0x02) || 0x00 × 3 || j (4 bytes, big-endian) || i (8 bytes, big-endian)
//! ```
//!
//! (AES in counter mode with the row id as nonce). An int64 value takes the
//! first 8 bytes of the keystream (little-endian), so it stays an 8-byte
//! BIGINT; a binary value keeps its length. Against the 37 bytes of an
//! AES-GCM RND integer, this is what makes stored numbers compact.
//!
//! What it gives: IND-CPA while no (key, id) pair encrypts two values, which
//! the id allocator guarantees (keys are also fresh per load, since a reload
//! numbers rows from 0 again); the server sees lengths and NULLs, as with
//! RND. What it does not: integrity (a changed ciphertext decrypts to a
//! changed value; answers' integrity is out of Veil's scope, as for ASHE and
//! OPE). A raw ciphertext has no room for a version byte: the version is in
//! the key's derivation label (`rowrnd-v1`), so another construction always
//! runs under another key.

use aes::cipher::BlockEncrypt;
use aes::{Aes256, Block};

use crate::ashe::{aes256, prf_output};
use crate::binary::{BinaryColumn, BinaryOutput};
use crate::KernelError;

/// Version of the construction above; part of the key label on the Python side.
pub const VERSION: u8 = 1;
/// First byte of every keystream block.
pub const DOMAIN: u8 = 0x02;

/// Rows whose keystream blocks are encrypted in one AES call.
const CHUNK_BLOCKS: usize = 512;

/// A row-bound RND key (the expanded AES key is zeroized when dropped).
pub struct RowRnd {
    cipher: Aes256,
}

impl RowRnd {
    /// Expand a 32-byte key.
    pub fn new(key: &[u8]) -> Result<Self, KernelError> {
        Ok(Self {
            cipher: aes256(key)?,
        })
    }

    /// `out[j] = values[j] XOR keystream(ids[j])[0..8]` (encrypts and decrypts).
    pub fn xor_words(
        &self,
        ids: &[u64],
        values: &[u64],
        out: &mut [u64],
    ) -> Result<(), KernelError> {
        if ids.len() != values.len() || values.len() != out.len() {
            return Err(KernelError::Parameter(format!(
                "row-bound RND needs one id and one output slot per value; got {} ids, {} values \
                 and {} output slots",
                ids.len(),
                values.len(),
                out.len()
            )));
        }
        let mut blocks = [Block::default(); CHUNK_BLOCKS];
        for (chunk, ids) in ids.chunks(CHUNK_BLOCKS).enumerate() {
            for (slot, &id) in blocks.iter_mut().zip(ids) {
                *slot = block(id, 0);
            }
            self.cipher.encrypt_blocks(&mut blocks[..ids.len()]);
            let base = chunk * CHUNK_BLOCKS;
            for (k, stream) in blocks[..ids.len()].iter().enumerate() {
                out[base + k] = values[base + k] ^ prf_output(stream);
            }
        }
        Ok(())
    }

    /// Every non-NULL value of `column` XOR the keystream of its row's id
    /// (encrypts and decrypts; lengths are kept).
    pub fn xor_column(
        &self,
        ids: &[u64],
        column: &BinaryColumn<'_>,
    ) -> Result<BinaryOutput, KernelError> {
        if ids.len() != column.len() {
            return Err(KernelError::Parameter(format!(
                "row-bound RND needs one id per value; got {} ids and {} values",
                ids.len(),
                column.len()
            )));
        }
        self.xor_keystreams([ids], column)
    }

    /// `out[j] = values[j] XOR keystream(from[j])[0..8] XOR keystream(to[j])[0..8]`:
    /// a value stored under row `from[j]` carried to row `to[j]` without its
    /// plaintext ever being formed apart (the two XORs of decrypt-then-encrypt).
    pub fn rexor_words(
        &self,
        from: &[u64],
        to: &[u64],
        values: &[u64],
        out: &mut [u64],
    ) -> Result<(), KernelError> {
        if from.len() != to.len() {
            return Err(KernelError::Parameter(format!(
                "row-bound RND needs as many new ids as old ones; got {} and {}",
                from.len(),
                to.len()
            )));
        }
        let mut opened = vec![0u64; values.len()];
        self.xor_words(from, values, &mut opened)?;
        self.xor_words(to, &opened, out)
    }

    /// `xor_column` under the ids `from`, then under the ids `to` (see `rexor_words`).
    pub fn rexor_column(
        &self,
        from: &[u64],
        to: &[u64],
        column: &BinaryColumn<'_>,
    ) -> Result<BinaryOutput, KernelError> {
        if from.len() != to.len() || from.len() != column.len() {
            return Err(KernelError::Parameter(format!(
                "row-bound RND needs one old and one new id per value; got {} old ids, {} new \
                 ids and {} values",
                from.len(),
                to.len(),
                column.len()
            )));
        }
        self.xor_keystreams([from, to], column)
    }

    /// Every non-NULL value of `column` XOR the keystreams of its row's id in each
    /// of `ids` (one array or two: a const `N`, so the one-array loop stays as tight
    /// as before). The callers checked the lengths.
    fn xor_keystreams<const N: usize>(
        &self,
        ids: [&[u64]; N],
        column: &BinaryColumn<'_>,
    ) -> Result<BinaryOutput, KernelError> {
        let mut out = BinaryOutput::with_lengths(column, |_, value| Ok(value.len()))?;
        let mut stream: Vec<Block> = Vec::with_capacity(CHUNK_BLOCKS);
        for (row, value) in column.rows().enumerate() {
            let Some(value) = value else { continue };
            let blocks = value.len().div_ceil(16);
            stream.clear();
            for set in ids {
                for counter in 0..blocks {
                    stream.push(block(set[row], counter as u32));
                }
            }
            self.cipher.encrypt_blocks(&mut stream);
            let target = out.row_mut(row);
            for (k, (byte, source)) in target.iter_mut().zip(value).enumerate() {
                let mut mixed = *source;
                for set in 0..N {
                    mixed ^= stream[set * blocks + k / 16][k % 16];
                }
                *byte = mixed;
            }
        }
        Ok(out)
    }
}

/// The keystream block `counter` of row `id`.
#[inline]
fn block(id: u64, counter: u32) -> Block {
    let value = (u128::from(DOMAIN) << 120) | (u128::from(counter) << 64) | u128::from(id);
    Block::from(value.to_be_bytes())
}

#[cfg(test)]
mod tests;
