//! One value at a time: a parameter encrypted as the session's DET does, a
//! fetched ciphertext decrypted as its column cipher does, and the plaintext
//! in PostgreSQL's text form as the session's wire encoder writes it.
//!
//! Each mirrors a Python class of `veil.ciphers` (named below); the session
//! checks every native plan against its own answer before it keeps it, and
//! `tests/serve/test_native_points.py` compares them value by value.

use pyo3::prelude::*;
use veil_kernels::binary::BinaryColumn as WordsColumn;
use veil_kernels::siv::{BinaryColumn, BinaryOutput, OVERHEAD};

use crate::ff1::Ff1Int;
use crate::rowrnd::RowRndKey;
use crate::siv::SivBytes;

/// DET of an integer: `veil.crypto.det_narrow.NarrowDet` (a narrow FF1 over
/// `bits` bits for the values inside it, the 64-bit one cycle-walked outside)
/// or `veil.crypto.det.DetInt` over 64 bits.
pub enum DetInt {
    Narrow {
        narrow: Py<Ff1Int>,
        wide: Py<Ff1Int>,
        bits: u32,
    },
    Wide(Py<Ff1Int>),
}

fn ff1(key: &Py<Ff1Int>, value: i64, encrypt: bool) -> Option<i64> {
    let cipher = &key.get().inner;
    let mut out = [0i64];
    let done = if encrypt {
        cipher.encrypt(&[value], &mut out)
    } else {
        cipher.decrypt(&[value], &mut out)
    };
    done.ok().map(|()| out[0])
}

fn inside(value: i64, bits: u32) -> bool {
    let half = 1i64 << (bits - 1);
    (-half..half).contains(&value)
}

impl DetInt {
    /// Encrypts (or decrypts) one value; None if the cipher refuses it.
    pub fn run(&self, value: i64, encrypt: bool) -> Option<i64> {
        match self {
            DetInt::Wide(key) => ff1(key, value, encrypt),
            DetInt::Narrow { narrow, wide, bits } => {
                if inside(value, *bits) {
                    return ff1(narrow, value, encrypt);
                }
                // cycle walking: the wide permutation until the value leaves the narrow part
                let mut out = ff1(wide, value, encrypt)?;
                while inside(out, *bits) {
                    out = ff1(wide, out, encrypt)?;
                }
                Some(out)
            }
        }
    }
}

/// How a fetched column opens into its encoded plaintext.
pub enum Opener {
    /// `RowBoundCipher` of a number: XOR the row's keystream, then the low `bits`
    /// bits sign-extended (0: all 64).
    RndWord { key: Py<RowRndKey>, bits: u32 },
    /// `FittedRowBound`: the loaded range in `fit` bits above `low`, other
    /// values marked at `2**fit` in the type's `width` bits.
    RndFitted {
        key: Py<RowRndKey>,
        width: u32,
        low: i64,
        fit: u32,
    },
    /// `RowBoundCipher` of a string: XOR the row's keystream.
    RndBytes(Py<RowRndKey>),
    /// DET of an integer (`Int32Form` and `_Int64Cipher` around it change nothing here).
    DetInt(DetInt),
    /// `DetBytes`: AES-SIV.
    DetBytes(Py<SivBytes>),
    /// Not encrypted: what the server computed (a `COUNT(*)`).
    Plain,
}

/// An encoded plaintext: an integer or bytes.
pub enum Plain {
    Int(i64),
    Bytes(Vec<u8>),
}

fn keystream_word(key: &Py<RowRndKey>, id: u64, stored: u64) -> Option<u64> {
    let mut out = [0u64];
    key.get().inner.xor_words(&[id], &[stored], &mut out).ok()?;
    Some(out[0])
}

fn sign_extended(word: u64, bits: u32) -> i64 {
    if bits == 0 || bits >= 64 {
        return word as i64;
    }
    let top = 1i64 << (bits - 1);
    let low = (word & ((1u64 << bits) - 1)) as i64;
    (low ^ top) - top
}

impl Opener {
    /// The plaintext of one stored value (`stored`: an integer's or the bytes), under
    /// the row id `id` for the RND forms; None if it does not open.
    pub fn open(&self, stored: &Stored<'_>, id: Option<u64>) -> Option<Plain> {
        match (self, stored) {
            (Opener::RndWord { key, bits }, Stored::Int(v)) => {
                let opened = keystream_word(key, id?, *v as u64)?;
                Some(Plain::Int(sign_extended(opened, *bits)))
            }
            (
                Opener::RndFitted {
                    key,
                    width,
                    low,
                    fit,
                },
                Stored::Int(v),
            ) => {
                let mark = 1i64 << fit;
                let outside = *v >= mark;
                let xored = if outside { v - mark } else { *v };
                let opened = keystream_word(key, id?, xored as u64)?;
                if outside {
                    Some(Plain::Int(sign_extended(opened, *width)))
                } else {
                    let value = (opened & ((1u64 << fit) - 1)) as i64;
                    value.checked_add(*low).map(Plain::Int)
                }
            }
            (Opener::RndBytes(key), Stored::Bytes(data)) => {
                let offsets = [0i64, data.len() as i64];
                let column = WordsColumn::new(&offsets, data, None).ok()?;
                let out = key.get().inner.xor_column(&[id?], &column).ok()?;
                Some(Plain::Bytes(out.data))
            }
            (Opener::DetInt(det), Stored::Int(v)) => det.run(*v, false).map(Plain::Int),
            (Opener::Plain, Stored::Int(v)) => Some(Plain::Int(*v)),
            (Opener::DetBytes(key), Stored::Bytes(data)) => {
                let offsets = [0i32, data.len() as i32];
                let mut out_offsets = [0i32; 2];
                let mut out = vec![0u8; data.len().saturating_sub(OVERHEAD).max(1)];
                let input = BinaryColumn {
                    offsets: &offsets,
                    data,
                    validity: None,
                };
                let output = BinaryOutput {
                    offsets: &mut out_offsets,
                    data: &mut out,
                };
                let written = key.get().inner.decrypt(input, output).ok()?;
                out.truncate(written);
                Some(Plain::Bytes(out))
            }
            _ => None,
        }
    }
}

/// A value as the server returned it (binary format).
pub enum Stored<'a> {
    Int(i64),
    Bytes(&'a [u8]),
}

/// PostgreSQL's type OIDs of the binary values read here.
pub const INT2: u32 = 21;
pub const INT4: u32 = 23;
pub const INT8: u32 = 20;
pub const BYTEA: u32 = 17;

/// A binary field of type `oid` as a stored value; None for a type not read here.
pub fn stored(oid: u32, raw: &[u8]) -> Option<Stored<'_>> {
    Some(match oid {
        INT8 => Stored::Int(i64::from_be_bytes(raw.try_into().ok()?)),
        INT4 => Stored::Int(i32::from_be_bytes(raw.try_into().ok()?) as i64),
        INT2 => Stored::Int(i16::from_be_bytes(raw.try_into().ok()?) as i64),
        BYTEA => Stored::Bytes(raw),
        _ => return None,
    })
}

/// How a plaintext is written for the client (`veil.serve.text`).
#[derive(Clone, Copy)]
pub enum Format {
    /// An integer type of `bits` bits (its range is checked: a value beyond it is
    /// not one the column holds).
    Int { bits: u32 },
    /// DECIMAL(p, s) of at most 18 digits: the scaled integer.
    Decimal { scale: u32 },
    /// DATE: days since 1970-01-01, years 1 to 9999 only.
    Date,
    /// Text: UTF-8 as stored.
    Text,
}

impl Format {
    /// The text of `plain`, appended to `out`; None if this value is not written here.
    pub fn write(&self, plain: &Plain, out: &mut Vec<u8>) -> Option<()> {
        match (self, plain) {
            (Format::Int { bits }, Plain::Int(v)) => {
                if *bits < 64 && !inside(*v, *bits) {
                    return None;
                }
                out.extend_from_slice(v.to_string().as_bytes());
            }
            (Format::Decimal { scale }, Plain::Int(v)) => write_decimal(*v, *scale, out),
            (Format::Date, Plain::Int(days)) => write_date(*days, out)?,
            (Format::Text, Plain::Bytes(b)) => {
                std::str::from_utf8(b).ok()?;
                out.extend_from_slice(b);
            }
            _ => return None,
        }
        Some(())
    }
}

fn write_decimal(value: i64, scale: u32, out: &mut Vec<u8>) {
    let digits = value.unsigned_abs().to_string();
    if value < 0 {
        out.push(b'-');
    }
    let scale = scale as usize;
    if scale == 0 {
        out.extend_from_slice(digits.as_bytes());
        return;
    }
    if digits.len() <= scale {
        out.extend_from_slice(b"0.");
        out.resize(out.len() + scale - digits.len(), b'0');
        out.extend_from_slice(digits.as_bytes());
    } else {
        let (whole, fraction) = digits.split_at(digits.len() - scale);
        out.extend_from_slice(whole.as_bytes());
        out.push(b'.');
        out.extend_from_slice(fraction.as_bytes());
    }
}

/// Days since 1970-01-01 as `YYYY-MM-DD` (proleptic Gregorian; Howard Hinnant's
/// civil-from-days), for years 1 to 9999.
pub(super) fn write_date(days: i64, out: &mut Vec<u8>) -> Option<()> {
    let z = days.checked_add(719_468)?;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if !(1..=9999).contains(&year) {
        return None;
    }
    out.extend_from_slice(format!("{year:04}-{month:02}-{day:02}").as_bytes());
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(days: i64) -> Option<String> {
        let mut out = Vec::new();
        write_date(days, &mut out).map(|()| String::from_utf8(out).unwrap())
    }

    fn decimal(value: i64, scale: u32) -> String {
        let mut out = Vec::new();
        write_decimal(value, scale, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn dates() {
        assert_eq!(date(0).unwrap(), "1970-01-01");
        assert_eq!(date(-1).unwrap(), "1969-12-31");
        assert_eq!(date(18_262).unwrap(), "2020-01-01");
        assert_eq!(date(11_016).unwrap(), "2000-02-29");
        assert_eq!(date(-719_162).unwrap(), "0001-01-01");
        assert!(date(-719_163).is_none());
        assert_eq!(date(2_932_896).unwrap(), "9999-12-31");
        assert!(date(2_932_897).is_none());
    }

    #[test]
    fn decimals() {
        assert_eq!(decimal(750, 2), "7.50");
        assert_eq!(decimal(-5, 2), "-0.05");
        assert_eq!(decimal(0, 2), "0.00");
        assert_eq!(decimal(-1234, 0), "-1234");
        assert_eq!(decimal(i64::MIN, 3), "-9223372036854775.808");
    }

    #[test]
    fn sign_extension() {
        assert_eq!(sign_extended(0xffff_ffff, 32), -1);
        assert_eq!(sign_extended(0x7fff_ffff, 32), i32::MAX as i64);
        assert_eq!(sign_extended(u64::MAX, 0), -1);
    }
}
