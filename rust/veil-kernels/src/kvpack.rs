//! Opening MiniCrypt packs of `veil.kv` in one call: decrypt, inflate, parse.
//!
//! A stored pack is `version | codec | nonce (12) | AES-256-GCM(body)` with
//! `body = u32 length || compressed || zero padding` and the compressed
//! plaintext a record list (`veil/kv/pack.py` documents both layouts):
//!
//! ```text
//! version 1: 0x01 | count n (u32) | key lengths (n x u32) | value lengths (n x u32)
//!            keys, concatenated | values, concatenated            (integers big-endian)
//! version 2: 0x02 | count n | n shared-prefix lengths | n suffix lengths
//!            | n value lengths | key suffixes, concatenated | values, concatenated
//!            (counts and lengths as LEB128 varints)
//! version 3: 0x03 | count n | terminator t | n shared-prefix lengths
//!            | n suffix lengths | key suffixes, concatenated
//!            | values, each followed by t                (no value holds t)
//! ```
//!
//! Version 2 (written since issue 14) front-codes the keys: each key is the
//! bytes it shares with the previous key plus its own suffix, and the
//! suffix's first byte is stored as its difference (mod 256) from the
//! previous key's byte at that position, so consecutive integer keys become
//! runs of identical bytes. On short records the fixed 8 bytes of lengths and
//! the 9-byte keys of version 1 compressed to as much as a third of the pack.
//! Version 3 (issue 14, second round) ends each value with a byte no value
//! of the list holds (a newline when it can) instead of giving its length:
//! a compressor predicts a record's end from its text (a log line's newline
//! comes with the next line's date in one match), while a list of lengths is
//! noise it pays for. Blocks of 200 log lines of 68 bytes, zstd 19: 78% of the
//! whole-dataset zlib ratio with lengths, 87% with terminators; 64 short JSON
//! records 81% against 87%. A list whose values use all 256 byte values is
//! written as version 2. All three versions are read.
//!
//! Python checks the envelope header and builds the associated data; this
//! module does the per-byte work, so the glue can run it without the GIL and
//! a range query opens its packs on every core. zlib streams are inflated by
//! libdeflate (about 4x zlib's speed on Veil's packs), zstd and lz4 frames by
//! the zstd and lz4_flex crates. Nothing here changes the stored format.

use std::io::Read;
use std::ops::Range;

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes256Gcm, KeyInit, Nonce, Tag};

use crate::KernelError;

pub mod blocks;

/// Codec ids stored in the envelope (`veil.kv.codec`).
pub const ZLIB: u8 = 1;
pub const ZSTD: u8 = 2;
pub const LZ4: u8 = 3;
/// The record-list layout versions this module reads (it writes 3, or 2 when
/// every byte value occurs in the values).
pub const PACK_FORMAT_V1: u8 = 1;
pub const PACK_FORMAT_V2: u8 = 2;
pub const PACK_FORMAT_VERSION: u8 = 3;
/// Terminators tried first (text: a newline), then the smallest absent byte.
const PREFERRED_TERMINATORS: [u8; 2] = [b'\n', 0];
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const LENGTH_PREFIX: usize = 4;
const HEADER: usize = 5;
/// A pack never inflates past this (packs are tens of kilobytes); a stream
/// that claims more is treated as malformed rather than exhausting memory.
const MAX_PLAINTEXT: usize = 1 << 30;

/// A pack's plaintext: its keys (rebuilt into `key_data`) and where each
/// value sits in `data`.
pub struct RecordList {
    pub data: Vec<u8>,
    pub key_data: Vec<u8>,
    pub keys: Vec<Range<usize>>,
    pub values: Vec<Range<usize>>,
}

impl RecordList {
    /// The value stored under `wanted`, if the pack holds it.
    pub fn value_of(&self, wanted: &[u8]) -> Option<&[u8]> {
        let index = self
            .keys
            .iter()
            .position(|key| &self.key_data[key.clone()] == wanted)?;
        Some(&self.data[self.values[index].clone()])
    }

    pub fn key(&self, index: usize) -> &[u8] {
        &self.key_data[self.keys[index].clone()]
    }
}

/// A table's trained zstd dictionary, prepared once for decompression.
///
/// Packs written with a dictionary name its version in their (authenticated)
/// header; the client fetches and authenticates the dictionary and passes it
/// here. Shared by the scan threads (zstd's prepared dictionaries are
/// read-only once built).
pub struct PackDictionary {
    prepared: zstd::dict::DecoderDictionary<'static>,
    data: Vec<u8>,
    // Prepared for compression on first use, one per block level.
    encoders: [std::sync::OnceLock<zstd::dict::EncoderDictionary<'static>>; 2],
}

impl PackDictionary {
    pub fn new(dictionary: &[u8]) -> Self {
        Self {
            prepared: zstd::dict::DecoderDictionary::copy(dictionary),
            data: dictionary.to_vec(),
            encoders: Default::default(),
        }
    }

    fn encoder(&self, level: blocks::Level) -> &zstd::dict::EncoderDictionary<'static> {
        self.encoders[level as usize]
            .get_or_init(|| zstd::dict::EncoderDictionary::copy(&self.data, level.zstd()))
    }
}

/// The AES-256-GCM key of one table's packs.
pub struct PackKey {
    cipher: Aes256Gcm,
}

impl PackKey {
    pub fn new(key: &[u8]) -> Result<Self, KernelError> {
        let cipher = Aes256Gcm::new_from_slice(key).map_err(|_| KernelError::KeyLength {
            expected: 32,
            got: key.len(),
        })?;
        Ok(Self { cipher })
    }

    /// Authenticate and decrypt a pack body (`ciphertext || tag`) and return
    /// it with the range of its compressed plaintext (padding stripped).
    pub fn open_body(
        &self,
        nonce: &[u8],
        sealed: &[u8],
        aad: &[u8],
    ) -> Result<(Vec<u8>, Range<usize>), KernelError> {
        if nonce.len() != NONCE_LEN {
            return Err(malformed(format!(
                "nonce is {} bytes, expected {NONCE_LEN}",
                nonce.len()
            )));
        }
        if sealed.len() < TAG_LEN {
            return Err(malformed("stored pack is truncated".into()));
        }
        let (ciphertext, tag) = sealed.split_at(sealed.len() - TAG_LEN);
        let mut body = ciphertext.to_vec();
        self.cipher
            .decrypt_in_place_detached(
                Nonce::from_slice(nonce),
                aad,
                &mut body,
                Tag::from_slice(tag),
            )
            .map_err(|_| KernelError::Authentication { row: 0 })?;
        let compressed = unpad(&body)?;
        Ok((body, compressed))
    }

    /// Decrypt, decompress and parse one stored pack.
    pub fn open_pack(
        &self,
        codec: u8,
        nonce: &[u8],
        sealed: &[u8],
        aad: &[u8],
    ) -> Result<RecordList, KernelError> {
        self.open_pack_with(codec, nonce, sealed, aad, None)
    }

    /// [`PackKey::open_pack`] for a pack compressed with a zstd dictionary.
    pub fn open_pack_with(
        &self,
        codec: u8,
        nonce: &[u8],
        sealed: &[u8],
        aad: &[u8],
        dictionary: Option<&PackDictionary>,
    ) -> Result<RecordList, KernelError> {
        let (body, compressed) = self.open_body(nonce, sealed, aad)?;
        let plaintext = match dictionary {
            None => decompress(codec, &body[compressed])?,
            Some(dictionary) if codec == ZSTD => {
                decompress_zstd_with(&body[compressed], Some(dictionary))?
            }
            Some(_) => {
                return Err(malformed(format!(
                    "pack names a dictionary but uses compression id {codec}, not zstd"
                )))
            }
        };
        parse_records(plaintext)
    }
}

/// The compressed bytes of a decrypted body: `u32 length || data || zeros`.
fn unpad(body: &[u8]) -> Result<Range<usize>, KernelError> {
    let prefix: [u8; LENGTH_PREFIX] = body
        .get(..LENGTH_PREFIX)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| malformed("pack body is truncated".into()))?;
    let length = u32::from_be_bytes(prefix) as usize;
    if LENGTH_PREFIX + length > body.len() {
        return Err(malformed(
            "pack body is shorter than its length prefix".into(),
        ));
    }
    Ok(LENGTH_PREFIX..LENGTH_PREFIX + length)
}

/// Decompress a pack written with `codec`.
pub fn decompress(codec: u8, data: &[u8]) -> Result<Vec<u8>, KernelError> {
    match codec {
        ZLIB => inflate_zlib(data),
        ZSTD => zstd::stream::decode_all(data).map_err(undecodable),
        LZ4 => {
            let mut out = Vec::with_capacity(data.len() * 4);
            lz4_flex::frame::FrameDecoder::new(data)
                .read_to_end(&mut out)
                .map_err(undecodable)?;
            Ok(out)
        }
        other => Err(malformed(format!(
            "pack uses unknown compression id {other}"
        ))),
    }
}

/// Decompress a zstd frame (with a dictionary, or none) into a buffer of its stated size.
fn decompress_zstd_with(
    data: &[u8],
    dictionary: Option<&PackDictionary>,
) -> Result<Vec<u8>, KernelError> {
    let mut out = Vec::new();
    decompress_zstd_into(data, dictionary, &mut out)?;
    Ok(out)
}

/// [`decompress_zstd_with`] into `out` (cleared first), so that a caller
/// reading many frames on one thread reuses one buffer.
fn decompress_zstd_into(
    data: &[u8],
    dictionary: Option<&PackDictionary>,
    out: &mut Vec<u8>,
) -> Result<(), KernelError> {
    out.clear();
    decompress_zstd_onto(data, dictionary, out)
}

/// [`decompress_zstd_with`] onto the end of `out`.
fn decompress_zstd_onto(
    data: &[u8],
    dictionary: Option<&PackDictionary>,
    out: &mut Vec<u8>,
) -> Result<(), KernelError> {
    // Frames state their size (the client writes it), so the output is
    // allocated once; each thread keeps one decompression context, as a
    // fresh one per point read costs as much as inflating a small pack.
    let size = match zstd::zstd_safe::get_frame_content_size(data) {
        Ok(Some(size)) if size <= MAX_PLAINTEXT as u64 => size as usize,
        Ok(Some(_)) => return Err(malformed("pack plaintext is too large".into())),
        Ok(None) | Err(_) => {
            return Err(malformed(
                "pack does not decompress: its zstd frame states no size".into(),
            ))
        }
    };
    out.reserve(size);
    // Written after what `out` holds (a cursor at its end).
    let start = out.len() as u64;
    let mut tail = std::io::Cursor::new(out);
    tail.set_position(start);
    ZSTD_CONTEXT.with(|context| {
        let mut context = context.borrow_mut();
        match dictionary {
            Some(dictionary) => {
                context.decompress_using_ddict(&mut tail, data, dictionary.prepared.as_ddict())
            }
            None => context.decompress(&mut tail, data),
        }
        .map_err(|code| undecodable(zstd::zstd_safe::get_error_name(code)))
    })?;
    Ok(())
}

thread_local! {
    static ZSTD_CONTEXT: std::cell::RefCell<zstd::zstd_safe::DCtx<'static>> =
        std::cell::RefCell::new(zstd::zstd_safe::DCtx::create());
}

/// libdeflate inflates whole streams into a buffer of known size; the size is
/// not stored, so start at 8x the input (packs compress ~4x) and double.
fn inflate_zlib(data: &[u8]) -> Result<Vec<u8>, KernelError> {
    let mut inflater = libdeflater::Decompressor::new();
    let mut capacity = (data.len() * 8).max(1 << 16);
    loop {
        let mut out = vec![0u8; capacity];
        match inflater.zlib_decompress(data, &mut out) {
            Ok(written) => {
                out.truncate(written);
                return Ok(out);
            }
            Err(libdeflater::DecompressionError::InsufficientSpace) if capacity < MAX_PLAINTEXT => {
                capacity *= 2;
            }
            Err(err) => return Err(undecodable(err)),
        }
    }
}

/// Where the value of `wanted` sits in a record list, without parsing it all.
///
/// A point read's path: a version 3 list is walked once, rebuilding one key
/// at a time and stopping at the wanted one, and its value is found by
/// skipping that many terminators; no list of keys or values is built (for
/// a 200-row block of log lines that building cost more than finding the
/// row). Versions 1 and 2 take the full parse. Lists come from authenticated
/// blocks, so the rest of the list is not checked as [`parse_records`]
/// does, but every read is bounds-checked.
pub fn find_value(data: &[u8], wanted: &[u8]) -> Result<Option<Range<usize>>, KernelError> {
    if data.first() != Some(&PACK_FORMAT_VERSION) {
        let records = parse_records(data.to_vec())?;
        let index = (0..records.keys.len()).find(|&i| records.key(i) == wanted);
        return Ok(index.map(|i| records.values[i].clone()));
    }
    let (count, terminator, at) = v3_header(data)?;
    // Shared lengths, suffix lengths, then the suffixes: three cursors.
    let mut shared_at = at;
    let mut suffix_length_at = skip_varints(data, at, count)?;
    let mut suffix_at = skip_varints(data, suffix_length_at, count)?;
    let mut key: Vec<u8> = Vec::with_capacity(wanted.len().max(16));
    // How many leading bytes the current key shares with `wanted`. A key
    // that keeps more of its predecessor than that cannot match (it differs
    // from `wanted` where its predecessor did), so most keys of a block are
    // passed over with one comparison of two integers, not a memcmp.
    let mut common = 0;
    let mut found = None;
    for index in 0..count {
        let shared = read_varint(data, &mut shared_at)? as usize;
        let suffix = take(
            &mut suffix_at,
            read_varint(data, &mut suffix_length_at)? as usize,
            data.len(),
        )?;
        if shared > common {
            // Not rebuilt either: the bytes up to `common` that later keys
            // may keep (and their first suffix byte's base) are unchanged.
            continue;
        }
        if shared > key.len() {
            return Err(malformed(
                "pack key shares more than the previous key".into(),
            ));
        }
        let base = key.get(shared).copied();
        key.truncate(shared);
        key.extend_from_slice(&data[suffix.clone()]);
        if let (false, Some(base)) = (suffix.is_empty(), base) {
            key[shared] = key[shared].wrapping_add(base);
        }
        common = shared + common_prefix(&key[shared..], wanted.get(shared..).unwrap_or(&[]));
        if common == key.len() && common == wanted.len() {
            found = Some(index);
            // The values start after every suffix: sum the remaining lengths.
            for _ in index + 1..count {
                let length = read_varint(data, &mut suffix_length_at)? as usize;
                take(&mut suffix_at, length, data.len())?;
            }
            break;
        }
    }
    let Some(index) = found else {
        return Ok(None);
    };
    let at = skip_terminators(data, suffix_at, index, terminator)?;
    let end = value_end(data, at, terminator)?;
    Ok(Some(at..at + end))
}

/// How many leading bytes `a` and `b` share.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The cursor just past the `count`-th `terminator` from `at` (`at` itself
/// when `count` is 0). Terminators are counted a chunk at a time (the
/// compiler vectorises the count), not found one call at a time: a point
/// read into a 200-row block of log lines skipped ~100 values with as many
/// `memchr` calls, a tenth of its time.
fn skip_terminators(
    data: &[u8],
    mut at: usize,
    mut count: usize,
    terminator: u8,
) -> Result<usize, KernelError> {
    const CHUNK: usize = 64;
    if count == 0 {
        return Ok(at);
    }
    let rest = data
        .get(at..)
        .ok_or_else(|| malformed("pack plaintext is truncated".into()))?;
    // Whole chunks first, each counted into a byte (at most 64 hits), which
    // the compiler turns into vector compares and adds.
    for chunk in rest.chunks_exact(CHUNK) {
        let here = chunk
            .iter()
            .fold(0u8, |sum, &byte| sum + u8::from(byte == terminator)) as usize;
        if here >= count {
            break;
        }
        count -= here;
        at += CHUNK;
    }
    // The wanted terminator is in the next bytes: find it byte by byte.
    for (offset, &byte) in data[at..].iter().enumerate() {
        if byte == terminator {
            count -= 1;
            if count == 0 {
                return Ok(at + offset + 1);
            }
        }
    }
    Err(malformed("pack plaintext lacks a value terminator".into()))
}

/// The cursor after `count` varints from `at`.
fn skip_varints(data: &[u8], mut at: usize, count: usize) -> Result<usize, KernelError> {
    for _ in 0..count {
        read_varint(data, &mut at)?;
    }
    Ok(at)
}

/// The length of the value starting at `at` (up to its terminator).
fn value_end(data: &[u8], at: usize, terminator: u8) -> Result<usize, KernelError> {
    data.get(at..)
        .and_then(|rest| memchr::memchr(terminator, rest))
        .ok_or_else(|| malformed("pack plaintext lacks a value terminator".into()))
}

/// Split a pack plaintext into its keys and values (checking every length).
pub fn parse_records(data: Vec<u8>) -> Result<RecordList, KernelError> {
    match data.first() {
        Some(&PACK_FORMAT_V1) => parse_v1(data),
        Some(&PACK_FORMAT_V2) => parse_v2(data),
        Some(&PACK_FORMAT_VERSION) => parse_v3(data),
        Some(version) => Err(malformed(format!(
            "pack format version {version} is unknown; upgrade Veil to read it"
        ))),
        None => Err(malformed("pack plaintext is truncated".into())),
    }
}

fn parse_v1(data: Vec<u8>) -> Result<RecordList, KernelError> {
    let count = read_u32(&data, 1)? as usize;
    let lengths_end = count
        .checked_mul(8)
        .and_then(|n| n.checked_add(HEADER))
        .filter(|&end| end <= data.len())
        .ok_or_else(|| malformed("pack plaintext is truncated".into()))?;
    let mut cursor = lengths_end;
    let mut spans = Vec::with_capacity(2 * count);
    for index in 0..2 * count {
        let length = read_u32(&data, HEADER + 4 * index)? as usize;
        spans.push(take(&mut cursor, length, data.len())?);
    }
    if cursor != data.len() {
        return Err(malformed("pack plaintext lengths do not add up".into()));
    }
    let values = spans.split_off(count);
    let key_data = data[lengths_end..spans.last().map_or(lengths_end, |k| k.end)].to_vec();
    let keys = spans
        .into_iter()
        .map(|k| k.start - lengths_end..k.end - lengths_end)
        .collect();
    Ok(RecordList {
        data,
        key_data,
        keys,
        values,
    })
}

fn parse_v2(data: Vec<u8>) -> Result<RecordList, KernelError> {
    let mut at = 1;
    let count = read_varint(&data, &mut at)? as usize;
    // Every record takes at least three length bytes: a cheap bound on `count`.
    if count > data.len() / 3 {
        return Err(malformed("pack plaintext is truncated".into()));
    }
    let lengths = read_lengths(&data, &mut at, 3 * count)?;
    let (key_data, keys) = read_keys(&data, &mut at, &lengths[..2 * count])?;
    let mut values = Vec::with_capacity(count);
    for &length in &lengths[2 * count..] {
        values.push(take(&mut at, length, data.len())?);
    }
    finish(data, at, key_data, keys, values)
}

/// A version 3 list's record count and terminator, and where its lengths start.
fn v3_header(data: &[u8]) -> Result<(usize, u8, usize), KernelError> {
    let mut at = 1;
    let count = read_varint(data, &mut at)? as usize;
    let terminator = *data
        .get(at)
        .ok_or_else(|| malformed("pack plaintext is truncated".into()))?;
    // Two length bytes and a terminator per record at least.
    if count > data.len() / 3 {
        return Err(malformed("pack plaintext is truncated".into()));
    }
    Ok((count, terminator, at + 1))
}

fn parse_v3(data: Vec<u8>) -> Result<RecordList, KernelError> {
    let (count, terminator, mut at) = v3_header(&data)?;
    let lengths = read_lengths(&data, &mut at, 2 * count)?;
    let (key_data, keys) = read_keys(&data, &mut at, &lengths)?;
    let mut values = Vec::with_capacity(count);
    for _ in 0..count {
        let end = memchr::memchr(terminator, &data[at..])
            .ok_or_else(|| malformed("pack plaintext lacks a value terminator".into()))?;
        values.push(at..at + end);
        at += end + 1;
    }
    finish(data, at, key_data, keys, values)
}

/// The record list, once every byte up to `at` has been accounted for.
fn finish(
    data: Vec<u8>,
    at: usize,
    key_data: Vec<u8>,
    keys: Vec<Range<usize>>,
    values: Vec<Range<usize>>,
) -> Result<RecordList, KernelError> {
    if at != data.len() {
        return Err(malformed("pack plaintext lengths do not add up".into()));
    }
    Ok(RecordList {
        data,
        key_data,
        keys,
        values,
    })
}

fn read_lengths(data: &[u8], at: &mut usize, count: usize) -> Result<Vec<usize>, KernelError> {
    let mut lengths = Vec::with_capacity(count);
    for _ in 0..count {
        lengths.push(read_varint(data, at)? as usize);
    }
    Ok(lengths)
}

/// Front-coded keys (version 2 and 3) from their shared and suffix lengths.
fn read_keys(
    data: &[u8],
    at: &mut usize,
    lengths: &[usize],
) -> Result<(Vec<u8>, Vec<Range<usize>>), KernelError> {
    // Every key's bytes, allocated once (a range parses ~200 blocks).
    let total = lengths
        .iter()
        .try_fold(0usize, |sum, &n| sum.checked_add(n));
    let mut key_data: Vec<u8> = Vec::with_capacity(total.unwrap_or(0).min(data.len() * 64));
    let mut keys: Vec<Range<usize>> = Vec::with_capacity(lengths.len() / 2);
    read_keys_into(data, at, lengths, &mut key_data, &mut keys)?;
    Ok((key_data, keys))
}

/// [`read_keys`] appending to `key_data` and `keys` (the list's first key
/// shares nothing with keys already there: they belong to another list).
fn read_keys_into(
    data: &[u8],
    at: &mut usize,
    lengths: &[usize],
    key_data: &mut Vec<u8>,
    keys: &mut Vec<Range<usize>>,
) -> Result<(), KernelError> {
    let (shared, suffixes) = lengths.split_at(lengths.len() / 2);
    let first = keys.len();
    for index in 0..shared.len() {
        let suffix = take(at, suffixes[index], data.len())?;
        let previous = if keys.len() > first {
            keys.last().cloned().unwrap_or(0..0)
        } else {
            0..0
        };
        if shared[index] > previous.len() {
            return Err(malformed(
                "pack key shares more than the previous key".into(),
            ));
        }
        let start = key_data.len();
        key_data.extend_from_within(previous.start..previous.start + shared[index]);
        key_data.extend_from_slice(&data[suffix]);
        if suffixes[index] > 0 && previous.len() > shared[index] {
            let base = key_data[previous.start + shared[index]];
            let first = &mut key_data[start + shared[index]];
            *first = first.wrapping_add(base);
        }
        keys.push(start..key_data.len());
    }
    Ok(())
}

/// Inflate a zstd frame onto the end of `records.data` and parse it, its
/// keys and values appended to `records`: several blocks read into one
/// record list, with no buffers of their own (a 1,000-key range of APT
/// stanzas in 5-row blocks opens ~200 of them). `lengths` is scratch.
pub fn append_records(
    frame: &[u8],
    dictionary: Option<&PackDictionary>,
    records: &mut RecordList,
    lengths: &mut Vec<usize>,
) -> Result<(), KernelError> {
    let base = records.data.len();
    let mut block = std::mem::take(&mut records.data);
    let inflated = decompress_zstd_onto(frame, dictionary, &mut block);
    records.data = block;
    inflated?;
    let data = &records.data[base..];
    if data.first() != Some(&PACK_FORMAT_VERSION) {
        // Older formats: parsed on their own, then appended.
        let list = parse_records(data.to_vec())?;
        records.data.truncate(base);
        let key_base = records.key_data.len();
        records.data.extend_from_slice(&list.data);
        records.key_data.extend_from_slice(&list.key_data);
        let shift = |r: &Range<usize>, by: usize| r.start + by..r.end + by;
        records
            .keys
            .extend(list.keys.iter().map(|r| shift(r, key_base)));
        records
            .values
            .extend(list.values.iter().map(|r| shift(r, base)));
        return Ok(());
    }
    let (count, terminator, mut at) = v3_header(data)?;
    lengths.clear();
    for _ in 0..2 * count {
        lengths.push(read_varint(data, &mut at)? as usize);
    }
    read_keys_into(
        data,
        &mut at,
        lengths,
        &mut records.key_data,
        &mut records.keys,
    )?;
    for _ in 0..count {
        let end = memchr::memchr(terminator, &data[at..])
            .ok_or_else(|| malformed("pack plaintext lacks a value terminator".into()))?;
        records.values.push(base + at..base + at + end);
        at += end + 1;
    }
    if at != data.len() {
        return Err(malformed("pack plaintext lengths do not add up".into()));
    }
    Ok(())
}

/// Serialise (key, value) pairs as a record list (keys in pack order):
/// version 3 when some byte occurs in no value, else version 2.
pub fn serialize_records(keys: &[&[u8]], values: &[&[u8]]) -> Vec<u8> {
    serialize_records_as(keys, values, terminator_for(values))
}

/// Version 3 ending values with `terminator` (which no value may hold), or
/// version 2 with `None`.
pub fn serialize_records_as(keys: &[&[u8]], values: &[&[u8]], terminator: Option<u8>) -> Vec<u8> {
    let payload: usize = keys.iter().chain(values).map(|b| b.len()).sum();
    let mut out = Vec::with_capacity(2 + 5 + 9 * keys.len() + payload);
    out.push(terminator.map_or(PACK_FORMAT_V2, |_| PACK_FORMAT_VERSION));
    write_varint(&mut out, keys.len());
    out.extend(terminator);
    let mut previous: &[u8] = &[];
    let mut shared = Vec::with_capacity(keys.len());
    for key in keys {
        let common = key.iter().zip(previous).take_while(|(a, b)| a == b).count();
        shared.push(common);
        previous = key;
    }
    for &common in &shared {
        write_varint(&mut out, common);
    }
    for (key, &common) in keys.iter().zip(&shared) {
        write_varint(&mut out, key.len() - common);
    }
    if terminator.is_none() {
        for value in values {
            write_varint(&mut out, value.len());
        }
    }
    let mut previous: &[u8] = &[];
    for (key, &common) in keys.iter().zip(&shared) {
        let suffix = &key[common..];
        if let (Some(&first), Some(&base)) = (suffix.first(), previous.get(common)) {
            out.push(first.wrapping_sub(base));
            out.extend_from_slice(&suffix[1..]);
        } else {
            out.extend_from_slice(suffix);
        }
        previous = key;
    }
    for value in values {
        out.extend_from_slice(value);
        out.extend(terminator);
    }
    out
}

/// A byte that occurs in no value (a newline or NUL if possible), if any.
fn terminator_for(values: &[&[u8]]) -> Option<u8> {
    let mut seen = [false; 256];
    for value in values {
        for &byte in *value {
            seen[byte as usize] = true;
        }
    }
    PREFERRED_TERMINATORS
        .into_iter()
        .chain(0..=255)
        .find(|&byte| !seen[byte as usize])
}

fn write_varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// An unsigned LEB128 integer of at most 32 bits.
#[inline(always)]
fn read_varint(data: &[u8], at: &mut usize) -> Result<u32, KernelError> {
    // Most lengths in a record list fit one byte: that case is inlined into
    // the walks (a call and a Result per length was ~8% of a point read into
    // a 200-row block), the rest is not.
    if let Some(&byte) = data.get(*at) {
        if byte & 0x80 == 0 {
            *at += 1;
            return Ok(u32::from(byte));
        }
    }
    read_long_varint(data, at)
}

#[cold]
#[inline(never)]
fn read_long_varint(data: &[u8], at: &mut usize) -> Result<u32, KernelError> {
    let mut value: u64 = 0;
    for shift in (0..35).step_by(7) {
        let byte = *data
            .get(*at)
            .ok_or_else(|| malformed("pack plaintext is truncated".into()))?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return u32::try_from(value)
                .map_err(|_| malformed("pack plaintext has a length past 4 GiB".into()));
        }
    }
    Err(malformed("pack plaintext has an overlong length".into()))
}

/// The next `length` bytes from `cursor`, checked against `end`.
fn take(cursor: &mut usize, length: usize, end: usize) -> Result<Range<usize>, KernelError> {
    let stop = cursor
        .checked_add(length)
        .filter(|&stop| stop <= end)
        .ok_or_else(|| malformed("pack plaintext lengths do not add up".into()))?;
    let span = *cursor..stop;
    *cursor = stop;
    Ok(span)
}

fn read_u32(data: &[u8], at: usize) -> Result<u32, KernelError> {
    data.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| malformed("pack plaintext is truncated".into()))
}

fn malformed(reason: String) -> KernelError {
    KernelError::Malformed { row: 0, reason }
}

fn undecodable(err: impl std::fmt::Display) -> KernelError {
    malformed(format!("pack does not decompress: {err}"))
}

#[cfg(test)]
#[path = "kvpack/tests.rs"]
mod tests;
