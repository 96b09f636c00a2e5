//! DET for byte strings: AES-SIV (RFC 5297) over whole Arrow binary columns.
//!
//! Stored format (version 1): `0x01 || SIV (16 bytes) || ciphertext`, where
//! SIV and ciphertext are RFC 5297's output for the plaintext with no
//! associated data. Equal plaintexts give equal ciphertexts under one key
//! (that is the point of DET); the SIV doubles as an authentication tag, so a
//! wrong key or a tampered value fails instead of decrypting to garbage.
//!
//! Batches use Arrow's binary layout: `offsets` (n + 1 entries, absolute
//! positions in `data`) and an optional validity bitmap. Output goes into one
//! preallocated data buffer and an offsets buffer starting at 0; a NULL row
//! stays an empty slot for the caller to mark NULL again.

use aes_siv::siv::{Aes128Siv, Aes256Siv};
use aes_siv::{KeyInit, Tag};

use crate::KernelError;

#[path = "siv_cmac.rs"]
mod siv_cmac;
use siv_cmac::SivNoAd;

/// First byte of every DET byte-string ciphertext.
pub const VERSION: u8 = 0x01;
const SIV_LEN: usize = 16;
/// Bytes a ciphertext adds to its plaintext: version byte and SIV.
pub const OVERHEAD: usize = 1 + SIV_LEN;

/// An Arrow offsets element (`i32` for binary/utf8, `i64` for the large types).
pub trait Offset: Copy {
    fn to_usize(self) -> usize;
    fn from_usize(value: usize) -> Option<Self>;
}

impl Offset for i32 {
    fn to_usize(self) -> usize {
        self as usize
    }
    fn from_usize(value: usize) -> Option<Self> {
        i32::try_from(value).ok()
    }
}

impl Offset for i64 {
    fn to_usize(self) -> usize {
        self as usize
    }
    fn from_usize(value: usize) -> Option<Self> {
        i64::try_from(value).ok()
    }
}

/// An Arrow validity bitmap (bit set = value present) and its bit offset.
#[derive(Clone, Copy)]
pub struct Validity<'a> {
    pub bits: &'a [u8],
    pub offset: usize,
}

impl Validity<'_> {
    fn is_valid(&self, row: usize) -> bool {
        let bit = self.offset + row;
        self.bits[bit / 8] & (1 << (bit % 8)) != 0
    }
}

/// A binary column in Arrow layout, borrowed.
#[derive(Clone, Copy)]
pub struct BinaryColumn<'a, O: Offset> {
    pub offsets: &'a [O],
    pub data: &'a [u8],
    pub validity: Option<Validity<'a>>,
}

impl<O: Offset> BinaryColumn<'_, O> {
    fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// The value at `row`, or `None` when it is NULL.
    fn value(&self, row: usize) -> Result<Option<&[u8]>, KernelError> {
        if self.validity.is_some_and(|v| !v.is_valid(row)) {
            return Ok(None);
        }
        let (start, end) = (
            self.offsets[row].to_usize(),
            self.offsets[row + 1].to_usize(),
        );
        self.data
            .get(start..end)
            .map(Some)
            .ok_or_else(|| KernelError::Parameter(format!("row {row}: offsets exceed the data")))
    }
}

/// Output buffers for a batch: `offsets` has one more entry than rows.
pub struct BinaryOutput<'a, O: Offset> {
    pub offsets: &'a mut [O],
    pub data: &'a mut [u8],
}

/// AES-SIV with a 256-bit (two AES-128 keys) or 512-bit (two AES-256) key.
enum SivCipher {
    Aes128(Box<Aes128Siv>),
    Aes256(Box<Aes256Siv>),
}

impl SivCipher {
    fn new(key: &[u8]) -> Result<Self, KernelError> {
        match key.len() {
            32 => Ok(Self::Aes128(Box::new(Aes128Siv::new(key.into())))),
            64 => Ok(Self::Aes256(Box::new(Aes256Siv::new(key.into())))),
            got => Err(KernelError::Parameter(format!(
                "an AES-SIV key is 32 or 64 bytes, got {got}"
            ))),
        }
    }

    fn seal(&mut self, headers: &[&[u8]], buf: &mut [u8]) -> Result<Tag, KernelError> {
        let sealed = match self {
            Self::Aes128(siv) => siv.encrypt_in_place_detached(headers, buf),
            Self::Aes256(siv) => siv.encrypt_in_place_detached(headers, buf),
        };
        sealed.map_err(|_| KernelError::Parameter("too many AES-SIV header components".into()))
    }

    /// Decrypts in place; `false` when the SIV does not authenticate.
    fn open(&mut self, headers: &[&[u8]], buf: &mut [u8], siv: &Tag) -> bool {
        match self {
            Self::Aes128(c) => c.decrypt_in_place_detached(headers, buf, siv).is_ok(),
            Self::Aes256(c) => c.decrypt_in_place_detached(headers, buf, siv).is_ok(),
        }
    }
}

/// RFC 5297 AES-SIV of one message with any header components (AD, nonce):
/// `SIV || ciphertext`, without Veil's version byte. For known-answer tests.
pub fn rfc5297_seal(
    key: &[u8],
    headers: &[&[u8]],
    plaintext: &[u8],
) -> Result<Vec<u8>, KernelError> {
    let mut out = vec![0u8; SIV_LEN + plaintext.len()];
    out[SIV_LEN..].copy_from_slice(plaintext);
    let tag = SivCipher::new(key)?.seal(headers, &mut out[SIV_LEN..])?;
    out[..SIV_LEN].copy_from_slice(&tag);
    Ok(out)
}

/// Inverse of [`rfc5297_seal`]; [`KernelError::Authentication`] on mismatch.
pub fn rfc5297_open(key: &[u8], headers: &[&[u8]], sealed: &[u8]) -> Result<Vec<u8>, KernelError> {
    if sealed.len() < SIV_LEN {
        return Err(malformed(0, "shorter than the 16-byte SIV"));
    }
    let (siv, body) = sealed.split_at(SIV_LEN);
    let mut out = body.to_vec();
    if SivCipher::new(key)?.open(headers, &mut out, Tag::from_slice(siv)) {
        Ok(out)
    } else {
        Err(KernelError::Authentication { row: 0 })
    }
}

/// DET byte-string encryption under one key.
pub struct DetBytes {
    siv: SivNoAd,
}

impl DetBytes {
    /// `key` is 32 bytes (AES-SIV with AES-128) or 64 bytes (with AES-256).
    pub fn new(key: &[u8]) -> Result<Self, KernelError> {
        Ok(Self {
            siv: SivNoAd::new(key)?,
        })
    }

    /// Output bytes `encrypt` needs for `values` non-NULL values holding
    /// `plaintext_bytes` bytes in all.
    pub fn ciphertext_bytes(plaintext_bytes: usize, values: usize) -> usize {
        plaintext_bytes + OVERHEAD * values
    }

    /// Encrypts a column; returns the number of data bytes written.
    pub fn encrypt<I: Offset, O: Offset>(
        &self,
        input: BinaryColumn<'_, I>,
        out: BinaryOutput<'_, O>,
    ) -> Result<usize, KernelError> {
        for_each_row(input, out, |row, plaintext, slot| {
            let total = OVERHEAD + plaintext.len();
            let slot = slot.get_mut(..total).ok_or_else(|| too_small(row))?;
            slot[0] = VERSION;
            let (siv, body) = slot[1..].split_at_mut(SIV_LEN);
            body.copy_from_slice(plaintext);
            self.siv.seal(siv, body);
            Ok(total)
        })
    }

    /// Decrypts a column; returns the number of data bytes written. The
    /// output data buffer needs at most as many bytes as the input's data.
    pub fn decrypt<I: Offset, O: Offset>(
        &self,
        input: BinaryColumn<'_, I>,
        out: BinaryOutput<'_, O>,
    ) -> Result<usize, KernelError> {
        for_each_row(input, out, |row, ciphertext, slot| {
            let body = check_format(row, ciphertext)?;
            let slot = slot.get_mut(..body.len()).ok_or_else(|| too_small(row))?;
            slot.copy_from_slice(body);
            if self.siv.open(&ciphertext[1..OVERHEAD], slot) {
                Ok(body.len())
            } else {
                Err(KernelError::Authentication { row })
            }
        })
    }
}

/// Runs `transform(row, value, free_output)` over the non-NULL rows; it
/// returns how many output bytes it wrote. NULL rows get empty slots.
fn for_each_row<I: Offset, O: Offset>(
    input: BinaryColumn<'_, I>,
    out: BinaryOutput<'_, O>,
    mut transform: impl FnMut(usize, &[u8], &mut [u8]) -> Result<usize, KernelError>,
) -> Result<usize, KernelError> {
    let rows = input.len();
    if out.offsets.len() != rows + 1 {
        return Err(KernelError::Parameter(format!(
            "output offsets hold {} entries for {rows} rows",
            out.offsets.len()
        )));
    }
    let mut written = 0usize;
    out.offsets[0] = O::from_usize(0).expect("zero fits");
    for row in 0..rows {
        if let Some(value) = input.value(row)? {
            written += transform(row, value, &mut out.data[written..])?;
        }
        out.offsets[row + 1] = O::from_usize(written).ok_or_else(|| {
            KernelError::Parameter("output exceeds its offset type; use large_binary".into())
        })?;
    }
    Ok(written)
}

/// The `SIV || ciphertext` body of a version-1 ciphertext.
fn check_format(row: usize, ciphertext: &[u8]) -> Result<&[u8], KernelError> {
    match ciphertext.first() {
        None => Err(malformed(row, "empty, not a DET ciphertext")),
        Some(&VERSION) if ciphertext.len() >= OVERHEAD => Ok(&ciphertext[OVERHEAD..]),
        Some(&VERSION) => Err(malformed(row, "shorter than the 17-byte header")),
        Some(other) => Err(malformed(
            row,
            &format!("unknown version byte 0x{other:02x} (this Veil reads 0x01)"),
        )),
    }
}

fn malformed(row: usize, reason: &str) -> KernelError {
    KernelError::Malformed {
        row,
        reason: reason.to_string(),
    }
}

fn too_small(row: usize) -> KernelError {
    KernelError::Parameter(format!("output data buffer too small at row {row}"))
}

#[cfg(test)]
#[path = "siv_tests.rs"]
mod tests;
