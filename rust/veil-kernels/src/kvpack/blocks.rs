//! Blocked packs (envelope version 3, issue 14): a pack whose rows are cut
//! into blocks that are compressed and sealed one by one, behind an index.
//!
//! ```text
//! stored  = 0x03 | codec (zstd) | dictionary version (u32, 0 = none) | nonce (12)
//!           | index length L (u32) | index: GCM(K_pack, n_0, index plaintext) (L bytes)
//!           | block 1: GCM(K_pack, n_1, zstd(record list)) | block 2 | ...
//! index   = block count m | m first positions (front-coded: shared length,
//!           suffix length, suffix) | m sealed block lengths      (LEB128 varints)
//! K_pack  = the first 8 bytes of AES-256_K(le32(i) || nonce), i = 0..3
//! n_j     = j as a 96-bit big-endian integer
//! ```
//!
//! A point read authenticates and decrypts the small index, picks the block
//! whose first position is the largest at or below the wanted key's (packs
//! hold their rows in packID order), and decrypts and inflates that block
//! only: a few kilobytes instead of the whole pack. Blocks are zstd frames,
//! with the table's trained dictionary when it has one, so a block of a few
//! rows compresses almost like a large pack (veil/kv/dictionary.py).
//!
//! Each stored pack draws a fresh random nonce; the pack key derived from it
//! (RFC 8452 §4's key derivation, here only for the encryption key) makes
//! every block's GCM nonce unique under that key, so blocks are encrypted
//! independently with no nonce reuse across packs beyond the chance of two
//! 96-bit random nonces colliding -- the same bound as one GCM per pack. The
//! associated data (the table, the kind, the packID, the envelope header and
//! the index length) is authenticated with the index and with every block, and
//! a block's nonce is its position: a server cannot move a block to another
//! pack, another place in the pack, or another pack version without the
//! read failing.

use std::cell::RefCell;
use std::ops::Range;

use aes::cipher::generic_array::GenericArray;
use aes::cipher::BlockEncrypt;
use aes::cipher::KeyInit;
use aes::Aes256;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};
use zeroize::Zeroize;
use zstd::zstd_safe::{CCtx, CParameter, ResetDirective};

use super::{
    append_records, decompress_zstd_into, decompress_zstd_with, find_value, malformed,
    parse_records, read_varint, serialize_records, take, write_varint, PackDictionary, RecordList,
    NONCE_LEN, TAG_LEN,
};
use crate::KernelError;

/// How hard blocks are compressed. Level 3 lost 10-15% of the ratio on
/// short records against 9; 19 gains another 3-4% on them but compresses at
/// ~4 MB/s against ~90 MB/s, so it is for write-once paths (bulk loads, APPEND
/// merges), and single-key writes use 9. Decompression costs the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Fast = 0,
    Dense = 1,
}

impl Level {
    pub fn zstd(self) -> i32 {
        match self {
            Level::Fast => 9,
            Level::Dense => 19,
        }
    }
}
const INDEX_LENGTH: usize = 4;

thread_local! {
    static COMPRESSOR: RefCell<CCtx<'static>> = RefCell::new(CCtx::create());
    // A point read's buffers (a decrypted segment, an inflated block), kept
    // per thread: allocating them cost ~0.5 us of a ~10 us read.
    static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The AES-256-GCM key of one stored pack, derived from the table key and
/// the pack's nonce.
///
/// GCM runs on ring's assembly (AES-NI or VAES, aggregated GHASH): a point
/// read opens the index and one block, and aes-gcm's one-block-at-a-time
/// POLYVAL made that ~25% of the read (0.8 us a kilobyte against ring's
/// 0.16). The derivation stays on the `aes` crate (ring exposes no raw AES).
pub struct PackCipher {
    cipher: LessSafeKey,
}

impl PackCipher {
    pub fn new(table_key: &[u8], nonce: &[u8]) -> Result<Self, KernelError> {
        let mut key = pack_key(table_key, nonce)?;
        let cipher = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).expect("a 32-byte key"));
        key.zeroize();
        Ok(Self { cipher })
    }

    fn seal(&self, segment: usize, aad: &[u8], plaintext: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(plaintext);
        let tag = self
            .cipher
            .seal_in_place_separate_tag(segment_nonce(segment), Aad::from(aad), &mut out[start..])
            .expect("a segment shorter than GCM's limit");
        out.extend_from_slice(tag.as_ref());
    }

    fn open(&self, segment: usize, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, KernelError> {
        let mut plaintext = Vec::new();
        self.open_into(segment, aad, sealed, &mut plaintext)?;
        Ok(plaintext)
    }

    /// [`PackCipher::open`] into `plaintext` (cleared first).
    fn open_into(
        &self,
        segment: usize,
        aad: &[u8],
        sealed: &[u8],
        plaintext: &mut Vec<u8>,
    ) -> Result<(), KernelError> {
        if sealed.len() < TAG_LEN {
            return Err(malformed("stored pack is truncated".into()));
        }
        let (ciphertext, tag) = sealed.split_at(sealed.len() - TAG_LEN);
        let tag = Tag::try_from(tag).expect("a 16-byte tag");
        plaintext.clear();
        plaintext.extend_from_slice(ciphertext);
        self.cipher
            .open_in_place_separate_tag(segment_nonce(segment), Aad::from(aad), tag, plaintext, 0..)
            .map(|_| ())
            .map_err(|_| KernelError::Authentication { row: 0 })
    }
}

/// K_pack: the first 8 bytes of AES-256_K(le32(i) || nonce), i = 0..3.
fn pack_key(table_key: &[u8], nonce: &[u8]) -> Result<[u8; 32], KernelError> {
    if nonce.len() != NONCE_LEN {
        return Err(malformed(format!(
            "nonce is {} bytes, expected {NONCE_LEN}",
            nonce.len()
        )));
    }
    let derive = Aes256::new_from_slice(table_key).map_err(|_| KernelError::KeyLength {
        expected: 32,
        got: table_key.len(),
    })?;
    // The four blocks in one call: AES-NI pipelines them (a point read
    // derives a key per pack it opens).
    let mut blocks = [GenericArray::<u8, aes::cipher::consts::U16>::default(); 4];
    for (i, block) in blocks.iter_mut().enumerate() {
        block[..4].copy_from_slice(&(i as u32).to_le_bytes());
        block[4..].copy_from_slice(nonce);
    }
    derive.encrypt_blocks(&mut blocks);
    let mut key = [0u8; 32];
    for (part, block) in key.chunks_mut(8).zip(&mut blocks) {
        part.copy_from_slice(&block[..8]);
        block.zeroize();
    }
    Ok(key)
}

fn segment_nonce(segment: usize) -> Nonce {
    let mut nonce = [0u8; NONCE_LEN];
    nonce[NONCE_LEN - 8..].copy_from_slice(&(segment as u64).to_be_bytes());
    Nonce::assume_unique_for_key(nonce)
}

/// The associated data of every segment: the caller's, then the index length.
fn full_aad(aad: &[u8], index_length: usize) -> Vec<u8> {
    let mut full = aad.to_vec();
    full.extend_from_slice(&(index_length as u32).to_be_bytes());
    full
}

/// The rows of each block of a pack of `count` rows: `block_rows` each,
/// except that a last block of fewer than half as many joins the one before
/// it (so no block holds more than 1.5 x `block_rows`). A short last block
/// compresses worse than its rows would at the end of a full one (it has
/// little of its own to refer back to) and costs a GCM tag and an index entry
/// like a full block: a bulk load cuts packs of any length, and on 68-byte log
/// lines in 200-row blocks each pack's 36-row tail cost ~100 bytes more that way.
pub fn block_bounds(count: usize, block_rows: usize) -> Vec<Range<usize>> {
    let block_rows = block_rows.max(1);
    let mut bounds: Vec<Range<usize>> = (0..count)
        .step_by(block_rows)
        .map(|start| start..(start + block_rows).min(count))
        .collect();
    if bounds.len() > 1 && bounds[bounds.len() - 1].len() * 2 < block_rows {
        let tail = bounds.pop().map_or(count, |tail| tail.end);
        if let Some(last) = bounds.last_mut() {
            last.end = tail;
        }
    }
    bounds
}

/// Cut entries (in pack order) into blocks (`block_bounds`), compress each
/// and seal the pack: everything after the nonce of the stored form.
///
/// `previous` is the pack this one replaces (opened, written with the same
/// dictionary), if any: a block whose rows are those of the same block of
/// `previous` keeps its compressed form, re-sealed under the new pack's key,
/// and only the blocks that changed are compressed. A GENERIC put changes one
/// block of a ~16 KB pack (up to 200 KB of plaintext on short records), whose
/// recompression at zstd 9 cost 2-9 ms; inflating the old blocks to compare
/// costs a tenth of that.
#[allow(clippy::too_many_arguments)] // the key, where it is stored, the rows, how to cut and compress them
pub fn seal_blocked(
    table_key: &[u8],
    nonce: &[u8],
    aad: &[u8],
    keys: &[&[u8]],
    values: &[&[u8]],
    positions: &[&[u8]],
    block_rows: usize,
    dictionary: Option<&PackDictionary>,
    level: Level,
    previous: Option<&BlockedPack>,
) -> Result<Vec<u8>, KernelError> {
    let cipher = PackCipher::new(table_key, nonce)?;
    let mut firsts: Vec<&[u8]> = Vec::new();
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    for (number, rows) in block_bounds(keys.len(), block_rows).into_iter().enumerate() {
        let records = serialize_records(&keys[rows.clone()], &values[rows.clone()]);
        firsts.push(positions[rows.start]);
        let kept = match previous {
            Some(pack) => pack.unchanged_block(number, &records, dictionary)?,
            None => None,
        };
        blocks.push(match kept {
            Some(compressed) => compressed,
            None => compress_block(&records, dictionary, level)?,
        });
    }
    let lengths: Vec<usize> = blocks.iter().map(|b| b.len() + TAG_LEN).collect();
    let index = serialize_index(&firsts, &lengths);
    let index_length = index.len() + TAG_LEN;
    let aad = full_aad(aad, index_length);
    let mut out = Vec::with_capacity(INDEX_LENGTH + index_length + lengths.iter().sum::<usize>());
    out.extend_from_slice(&(index_length as u32).to_be_bytes());
    cipher.seal(0, &aad, &index, &mut out);
    for (number, block) in blocks.iter().enumerate() {
        cipher.seal(number + 1, &aad, block, &mut out);
    }
    Ok(out)
}

fn compress_block(
    records: &[u8],
    dictionary: Option<&PackDictionary>,
    level: Level,
) -> Result<Vec<u8>, KernelError> {
    COMPRESSOR.with(|context| {
        let mut context = context.borrow_mut();
        let fail = |code| malformed(format!("zstd: {}", zstd::zstd_safe::get_error_name(code)));
        context
            .reset(ResetDirective::SessionAndParameters)
            .map_err(fail)?;
        // No dictionary id, no checksum (GCM authenticates), the size stated.
        context
            .set_parameter(CParameter::DictIdFlag(false))
            .map_err(fail)?;
        context
            .set_parameter(CParameter::ChecksumFlag(false))
            .map_err(fail)?;
        context
            .set_parameter(CParameter::ContentSizeFlag(true))
            .map_err(fail)?;
        match dictionary {
            Some(dictionary) => context.ref_cdict(dictionary.encoder(level).as_cdict()),
            None => context.set_parameter(CParameter::CompressionLevel(level.zstd())),
        }
        .map_err(fail)?;
        let mut out: Vec<u8> = Vec::with_capacity(zstd::zstd_safe::compress_bound(records.len()));
        let result = context
            .compress2(&mut out, records)
            .map(|_| ())
            .map_err(fail);
        // Drop the reference to the dictionary before the context outlives it.
        context
            .reset(ResetDirective::SessionAndParameters)
            .map_err(fail)?;
        result.map(|()| out)
    })
}

fn serialize_index(firsts: &[&[u8]], lengths: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    write_varint(&mut out, firsts.len());
    let mut previous: &[u8] = &[];
    for first in firsts {
        let shared = first
            .iter()
            .zip(previous)
            .take_while(|(a, b)| a == b)
            .count();
        write_varint(&mut out, shared);
        write_varint(&mut out, first.len() - shared);
        out.extend_from_slice(&first[shared..]);
        previous = first;
    }
    for &length in lengths {
        write_varint(&mut out, length);
    }
    out
}

/// The decrypted index of a blocked pack.
pub struct BlockIndex {
    // Every block's first position, rebuilt into one buffer: a point read
    // parses the index of a ~16 KB pack (dozens of blocks) every time, and an
    // allocation per position cost ~1.5 us of a ~13 us read.
    first_data: Vec<u8>,
    firsts: Vec<Range<usize>>,
    spans: Vec<Range<usize>>,
    aad: Vec<u8>,
}

/// A blocked pack opened as far as its index.
pub struct BlockedPack<'a> {
    cipher: PackCipher,
    body: &'a [u8],
    pub index: BlockIndex,
}

impl<'a> BlockedPack<'a> {
    /// Authenticate and read the index of `body` (the stored pack after its nonce).
    pub fn open(
        table_key: &[u8],
        nonce: &[u8],
        aad: &[u8],
        body: &'a [u8],
    ) -> Result<Self, KernelError> {
        let cipher = PackCipher::new(table_key, nonce)?;
        let length: [u8; INDEX_LENGTH] =
            body.get(..INDEX_LENGTH)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| malformed("stored pack is truncated".into()))?;
        let index_length = u32::from_be_bytes(length) as usize;
        let mut cursor = INDEX_LENGTH;
        let span = take(&mut cursor, index_length, body.len())
            .map_err(|_| malformed("stored pack is truncated".into()))?;
        let aad = full_aad(aad, index_length);
        let plaintext = cipher.open(0, &aad, &body[span])?;
        let (first_data, firsts, lengths) = parse_index(&plaintext)?;
        let mut spans = Vec::with_capacity(lengths.len());
        for length in lengths {
            spans.push(
                take(&mut cursor, length, body.len())
                    .map_err(|_| malformed("stored pack is truncated".into()))?,
            );
        }
        if cursor != body.len() {
            return Err(malformed(
                "stored pack has bytes past its last block".into(),
            ));
        }
        Ok(Self {
            cipher,
            body,
            index: BlockIndex {
                first_data,
                firsts,
                spans,
                aad,
            },
        })
    }

    /// The block that holds `position` if the pack holds it.
    pub fn block_of(&self, position: &[u8]) -> Option<usize> {
        let after = self
            .index
            .firsts
            .partition_point(|first| &self.index.first_data[first.clone()] <= position);
        after.checked_sub(1)
    }

    /// Block `number`'s compressed form if it inflates to exactly `records`.
    fn unchanged_block(
        &self,
        number: usize,
        records: &[u8],
        dictionary: Option<&PackDictionary>,
    ) -> Result<Option<Vec<u8>>, KernelError> {
        let Some(span) = self.index.spans.get(number) else {
            return Ok(None);
        };
        let compressed = self
            .cipher
            .open(number + 1, &self.index.aad, &self.body[span.clone()])?;
        // The frame states its size: most changed blocks stop here.
        let size = zstd::zstd_safe::get_frame_content_size(&compressed);
        if !matches!(size, Ok(Some(size)) if size == records.len() as u64) {
            return Ok(None);
        }
        let same = decompress_zstd_with(&compressed, dictionary)? == records;
        Ok(same.then_some(compressed))
    }

    /// Decrypt, inflate and parse block `number`.
    pub fn block(
        &self,
        number: usize,
        dictionary: Option<&PackDictionary>,
    ) -> Result<RecordList, KernelError> {
        let span = self.index.spans[number].clone();
        let compressed = self
            .cipher
            .open(number + 1, &self.index.aad, &self.body[span])?;
        parse_records(decompress_zstd_with(&compressed, dictionary)?)
    }

    /// Blocks `numbers` as one record list (in pack order): each block
    /// decrypted through one buffer and inflated onto the end of the list's
    /// data, so a range's ~200 blocks cost no buffers of their own.
    pub fn records_of(
        &self,
        numbers: Range<usize>,
        dictionary: Option<&PackDictionary>,
    ) -> Result<RecordList, KernelError> {
        let mut compressed = Vec::new();
        let mut lengths = Vec::new();
        let mut records = RecordList {
            data: Vec::new(),
            key_data: Vec::new(),
            keys: Vec::new(),
            values: Vec::new(),
        };
        for number in numbers {
            let span = self.index.spans[number].clone();
            self.cipher.open_into(
                number + 1,
                &self.index.aad,
                &self.body[span],
                &mut compressed,
            )?;
            append_records(&compressed, dictionary, &mut records, &mut lengths)?;
        }
        Ok(records)
    }

    /// How many blocks the pack holds.
    pub fn block_count(&self) -> usize {
        self.index.spans.len()
    }

    /// The numbers of the blocks that may hold positions in `low..=high`.
    ///
    /// Only an ordered layout's range reads use this (there a position is the
    /// key). The first and last packs of a range hold a few of its keys; a
    /// 1,000-key range over packs of 85 rows in 5-row blocks inflated about
    /// two packs' worth of blocks it then cut away.
    pub fn blocks_between(&self, low: &[u8], high: &[u8]) -> Range<usize> {
        if high < low {
            return 0..0;
        }
        let first = self.block_of(low).unwrap_or(0);
        let end = self.block_of(high).map_or(0, |last| last + 1);
        first..end.max(first)
    }

    /// Every block's records, concatenated in pack order.
    pub fn records(&self, dictionary: Option<&PackDictionary>) -> Result<RecordList, KernelError> {
        let mut all = RecordList {
            data: Vec::new(),
            key_data: Vec::new(),
            keys: Vec::new(),
            values: Vec::new(),
        };
        for number in 0..self.index.spans.len() {
            let block = self.block(number, dictionary)?;
            let (data_base, key_base) = (all.data.len(), all.key_data.len());
            all.data.extend_from_slice(&block.data);
            all.key_data.extend_from_slice(&block.key_data);
            let shift = |r: &Range<usize>, base: usize| r.start + base..r.end + base;
            all.keys
                .extend(block.keys.iter().map(|r| shift(r, key_base)));
            all.values
                .extend(block.values.iter().map(|r| shift(r, data_base)));
        }
        Ok(all)
    }
}

/// The value of `wanted` (at `position` in pack order) in a blocked pack, or
/// None: a point read. Only the index and the one block that may hold the
/// key are decrypted, into per-thread buffers; the index is walked without
/// being rebuilt (it is read once), and the block's record list is searched
/// without being parsed into lists ([`find_value`]). The result is the same
/// as [`BlockedPack::open`], [`BlockedPack::block_of`] and
/// [`BlockedPack::block`], which ranges and rewrites use.
pub fn lookup(
    table_key: &[u8],
    nonce: &[u8],
    aad: &[u8],
    body: &[u8],
    position: &[u8],
    wanted: &[u8],
    dictionary: Option<&PackDictionary>,
) -> Result<Option<Vec<u8>>, KernelError> {
    let cipher = PackCipher::new(table_key, nonce)?;
    let truncated = || malformed("stored pack is truncated".into());
    let length: [u8; INDEX_LENGTH] = body
        .get(..INDEX_LENGTH)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(truncated)?;
    let index_length = u32::from_be_bytes(length) as usize;
    let mut cursor = INDEX_LENGTH;
    let index_span = take(&mut cursor, index_length, body.len()).map_err(|_| truncated())?;
    let aad = full_aad(aad, index_length);
    SCRATCH.with(|scratch| {
        let (segment, records) = &mut *scratch.borrow_mut();
        let found = (|| {
            cipher.open_into(0, &aad, &body[index_span], segment)?;
            let Some((number, span)) = find_block(segment, position, cursor, body.len())? else {
                return Ok(None);
            };
            cipher.open_into(number + 1, &aad, &body[span], segment)?;
            decompress_zstd_into(segment, dictionary, records)?;
            Ok(find_value(records, wanted)?.map(|value| records[value].to_vec()))
        })();
        // An unusually large block's allocation does not stay (blocks are
        // capped at 16 KiB of rows by the store's choice, but `block_rows`
        // may be given). Freed buffers are not wiped elsewhere either, and
        // the value goes on to Python's heap.
        for buffer in [segment, records] {
            if buffer.capacity() > SCRATCH_KEEP {
                *buffer = Vec::new();
            }
        }
        found
    })
}

/// The most a point read's per-thread buffers keep allocated between reads.
const SCRATCH_KEEP: usize = 256 * 1024;

/// The number and stored span of the block holding `position`, from a
/// decrypted index, checking that the blocks fill the body from `start` to `end`.
fn find_block(
    index: &[u8],
    position: &[u8],
    start: usize,
    end: usize,
) -> Result<Option<(usize, Range<usize>)>, KernelError> {
    let mut at = 0;
    let count = read_varint(index, &mut at)? as usize;
    if count > index.len() {
        return Err(malformed("pack index is truncated".into()));
    }
    let mut first: Vec<u8> = Vec::with_capacity(position.len().max(16));
    let mut chosen = None;
    for number in 0..count {
        let shared = read_varint(index, &mut at)? as usize;
        let suffix = read_varint(index, &mut at)? as usize;
        if shared > first.len() {
            return Err(malformed(
                "pack index shares more than the previous key".into(),
            ));
        }
        let span = take(&mut at, suffix, index.len())?;
        first.truncate(shared);
        first.extend_from_slice(&index[span]);
        if first.as_slice() <= position {
            chosen = Some(number);
        }
    }
    let mut cursor = start;
    let mut found = None;
    for number in 0..count {
        let length = read_varint(index, &mut at)? as usize;
        let span = take(&mut cursor, length, end)
            .map_err(|_| malformed("stored pack is truncated".into()))?;
        if Some(number) == chosen {
            found = Some((number, span));
        }
    }
    if at != index.len() {
        return Err(malformed("pack index lengths do not add up".into()));
    }
    if cursor != end {
        return Err(malformed(
            "stored pack has bytes past its last block".into(),
        ));
    }
    Ok(found)
}

type ParsedIndex = (Vec<u8>, Vec<Range<usize>>, Vec<usize>);

fn parse_index(data: &[u8]) -> Result<ParsedIndex, KernelError> {
    let mut at = 0;
    let count = read_varint(data, &mut at)? as usize;
    if count > data.len() {
        return Err(malformed("pack index is truncated".into()));
    }
    let mut first_data: Vec<u8> = Vec::with_capacity(data.len());
    let mut firsts: Vec<Range<usize>> = Vec::with_capacity(count);
    for _ in 0..count {
        let shared = read_varint(data, &mut at)? as usize;
        let suffix = read_varint(data, &mut at)? as usize;
        let previous = firsts.last().cloned().unwrap_or(0..0);
        if shared > previous.len() {
            return Err(malformed(
                "pack index shares more than the previous key".into(),
            ));
        }
        let span = take(&mut at, suffix, data.len())?;
        let start = first_data.len();
        first_data.extend_from_within(previous.start..previous.start + shared);
        first_data.extend_from_slice(&data[span]);
        firsts.push(start..first_data.len());
    }
    let mut lengths = Vec::with_capacity(count);
    for _ in 0..count {
        lengths.push(read_varint(data, &mut at)? as usize);
    }
    if at != data.len() {
        return Err(malformed("pack index lengths do not add up".into()));
    }
    Ok((first_data, firsts, lengths))
}

#[cfg(test)]
#[path = "blocks_tests.rs"]
mod tests;
