//! Opening MiniCrypt packs of `veil.kv` in one call: decrypt, inflate, parse.
//!
//! A stored pack is `version | codec | nonce (12) | AES-256-GCM(body)` with
//! `body = u32 length || compressed || zero padding` and the compressed
//! plaintext a record list (`veil/kv/pack.py` documents both layouts):
//!
//! ```text
//! version (0x01) | count n (u32) | key lengths (n x u32) | value lengths (n x u32)
//! keys, concatenated | values, concatenated            (integers big-endian)
//! ```
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

/// Codec ids stored in the envelope (`veil.kv.codec`).
pub const ZLIB: u8 = 1;
pub const ZSTD: u8 = 2;
pub const LZ4: u8 = 3;
/// The record-list layout version this module reads.
pub const PACK_FORMAT_VERSION: u8 = 1;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const LENGTH_PREFIX: usize = 4;
const HEADER: usize = 5;
/// A pack never inflates past this (packs are tens of kilobytes); a stream
/// that claims more is treated as malformed rather than exhausting memory.
const MAX_PLAINTEXT: usize = 1 << 30;

/// A pack's plaintext and where each key and value sits in it.
pub struct RecordList {
    pub data: Vec<u8>,
    pub keys: Vec<Range<usize>>,
    pub values: Vec<Range<usize>>,
}

impl RecordList {
    /// The value stored under `wanted`, if the pack holds it.
    pub fn value_of(&self, wanted: &[u8]) -> Option<&[u8]> {
        let index = self
            .keys
            .iter()
            .position(|key| &self.data[key.clone()] == wanted)?;
        Some(&self.data[self.values[index].clone()])
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
        let (body, compressed) = self.open_body(nonce, sealed, aad)?;
        parse_records(decompress(codec, &body[compressed])?)
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

/// Split a pack plaintext into its keys and values (checking every length).
pub fn parse_records(data: Vec<u8>) -> Result<RecordList, KernelError> {
    let (&version, rest) = data
        .split_first()
        .ok_or_else(|| malformed("pack plaintext is truncated".into()))?;
    if version != PACK_FORMAT_VERSION {
        return Err(malformed(format!(
            "pack format version {version} is unknown; upgrade Veil to read it"
        )));
    }
    let count = read_u32(rest, 0)? as usize;
    let lengths_end = count
        .checked_mul(8)
        .and_then(|n| n.checked_add(HEADER))
        .filter(|&end| end <= data.len())
        .ok_or_else(|| malformed("pack plaintext is truncated".into()))?;
    let mut cursor = lengths_end;
    let mut spans = Vec::with_capacity(2 * count);
    for index in 0..2 * count {
        let length = read_u32(&data, HEADER + 4 * index)? as usize;
        let end = cursor
            .checked_add(length)
            .filter(|&end| end <= data.len())
            .ok_or_else(|| malformed("pack plaintext lengths do not add up".into()))?;
        spans.push(cursor..end);
        cursor = end;
    }
    if cursor != data.len() {
        return Err(malformed("pack plaintext lengths do not add up".into()));
    }
    let values = spans.split_off(count);
    Ok(RecordList {
        data,
        keys: spans,
        values,
    })
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
