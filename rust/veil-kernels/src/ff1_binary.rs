//! The radix-2 face of FF1: whole columns of signed `bits`-bit integers.
//!
//! Values run through the ten rounds in batches of [`LANES`]; each round
//! encrypts the whole batch's PRF blocks in one AES call.

use aes::Block;

use super::{Layout, RoundInputs, ROUNDS};
use crate::ecb::AnyAes;
use crate::KernelError;

/// Values processed together per round.
const LANES: usize = 256;

/// An integer column element the binary batch path reads or writes.
pub trait Lane: Copy {
    const BITS: u32;
    fn to_i64(self) -> i64;
    /// Only called with values that fit (checked against `BITS` up front).
    fn from_i64(value: i64) -> Self;
}

impl Lane for i64 {
    const BITS: u32 = 64;
    fn to_i64(self) -> i64 {
        self
    }
    fn from_i64(value: i64) -> Self {
        value
    }
}

impl Lane for i32 {
    const BITS: u32 = 32;
    fn to_i64(self) -> i64 {
        i64::from(self)
    }
    fn from_i64(value: i64) -> Self {
        value as i32
    }
}

/// FF1 in radix 2 over signed `bits`-bit integers, whole columns at a time.
///
/// A signed value maps to the numeral string of `value + 2^(bits-1)` (the
/// sign bit flipped), so the whole signed range is one FF1 domain; the
/// ciphertext maps back the same way and is again a signed `bits`-bit value.
pub struct Ff1Binary {
    aes: AnyAes,
    inputs: RoundInputs,
    bits: u32,
    u: u32,
    v: u32,
}

impl Ff1Binary {
    pub fn new(key: &[u8], bits: u32, tweak: &[u8]) -> Result<Self, KernelError> {
        if !(20..=64).contains(&bits) {
            return Err(KernelError::Parameter(format!(
                "FF1 integers are 20 to 64 bits wide, got {bits}"
            )));
        }
        let aes = AnyAes::new(key)?;
        let layout = Layout::new(2, bits as usize)?;
        let inputs = RoundInputs::new(&aes, &layout, tweak)?;
        Ok(Self {
            aes,
            inputs,
            bits,
            u: layout.u as u32,
            v: layout.v as u32,
        })
    }

    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// The signed range this instance encrypts, for error messages.
    pub fn domain(&self) -> String {
        let (min, max) = self.range();
        format!("[{min}, {max}] ({}-bit signed integers)", self.bits)
    }

    /// Encrypts `input` into `out` (same length). A value outside the
    /// domain fails the whole call with [`KernelError::Domain`] naming its row.
    pub fn encrypt<I: Lane, O: Lane>(&self, input: &[I], out: &mut [O]) -> Result<(), KernelError> {
        self.run(input, out, true)
    }

    /// Decrypts `input` into `out`; values outside the ciphertext range are
    /// [`KernelError::Malformed`].
    pub fn decrypt<I: Lane, O: Lane>(&self, input: &[I], out: &mut [O]) -> Result<(), KernelError> {
        self.run(input, out, false)
    }

    /// The smallest and largest value of the domain.
    pub fn range(&self) -> (i64, i64) {
        let half = 1i128 << (self.bits - 1);
        ((-half) as i64, (half - 1) as i64)
    }

    fn run<I: Lane, O: Lane>(
        &self,
        input: &[I],
        out: &mut [O],
        encrypt: bool,
    ) -> Result<(), KernelError> {
        if out.len() != input.len() {
            return Err(KernelError::Parameter(format!(
                "output holds {} values but the input has {}",
                out.len(),
                input.len()
            )));
        }
        if O::BITS < self.bits {
            return Err(KernelError::Parameter(format!(
                "{}-bit values do not fit a {}-bit output column",
                self.bits,
                O::BITS
            )));
        }
        let mut a = [0u64; LANES];
        let mut b = [0u64; LANES];
        for (chunk, (src, dst)) in input.chunks(LANES).zip(out.chunks_mut(LANES)).enumerate() {
            let n = src.len();
            self.split(src, &mut a[..n], &mut b[..n])
                .map_err(|row| self.range_error(chunk * LANES + row, encrypt))?;
            self.rounds(&mut a[..n], &mut b[..n], encrypt);
            self.join(&a[..n], &b[..n], dst);
        }
        Ok(())
    }

    fn range_error(&self, row: usize, encrypt: bool) -> KernelError {
        if encrypt {
            KernelError::Domain {
                row,
                domain: self.domain(),
            }
        } else {
            KernelError::Malformed {
                row,
                reason: format!("not a {}-bit FF1 ciphertext", self.bits),
            }
        }
    }

    /// Maps signed values to numeral halves; `Err(row)` for the first value
    /// out of range.
    fn split<I: Lane>(&self, src: &[I], a: &mut [u64], b: &mut [u64]) -> Result<(), usize> {
        let (min, max) = self.range();
        let mask = u64::MAX >> (64 - self.bits);
        let sign = 1u64 << (self.bits - 1);
        let low = u64::MAX >> (64 - self.v);
        for (row, value) in src.iter().enumerate() {
            let x = value.to_i64();
            if x < min || x > max {
                return Err(row);
            }
            let numeral = ((x as u64) & mask) ^ sign;
            a[row] = numeral >> self.v;
            b[row] = numeral & low;
        }
        Ok(())
    }

    fn join<O: Lane>(&self, a: &[u64], b: &[u64], dst: &mut [O]) {
        let shift = 64 - self.bits;
        let sign = 1u64 << (self.bits - 1);
        for ((out, &high), &low) in dst.iter_mut().zip(a).zip(b) {
            let numeral = ((high << self.v) | low) ^ sign;
            *out = O::from_i64(((numeral << shift) as i64) >> shift);
        }
    }

    /// The ten Feistel rounds over a batch. Every round encrypts all the
    /// batch's PRF blocks in one call so AES-NI can pipeline them.
    fn rounds(&self, a: &mut [u64], b: &mut [u64], encrypt: bool) {
        let mut blocks = [Block::default(); LANES];
        let blocks = &mut blocks[..a.len()];
        let (mut keep, mut fed) = if encrypt { (a, b) } else { (b, a) };
        for step in 0..ROUNDS {
            let round = if encrypt { step } else { ROUNDS - 1 - step };
            for (block, &half) in blocks.iter_mut().zip(fed.iter()) {
                *block = self
                    .inputs
                    .block(round, u128::from(half))
                    .to_be_bytes()
                    .into();
            }
            self.aes.encrypt_blocks(blocks);
            let m = if round.is_multiple_of(2) {
                self.u
            } else {
                self.v
            };
            let mask = u64::MAX >> (64 - m);
            // d = 8 for every width here: y is the first 8 bytes of R.
            for (half, block) in keep.iter_mut().zip(blocks.iter()) {
                let y = u64::from_be_bytes(block[..8].try_into().unwrap());
                *half = if encrypt {
                    half.wrapping_add(y) & mask
                } else {
                    half.wrapping_sub(y) & mask
                };
            }
            // The replaced half becomes the one fed to the next round's PRF.
            core::mem::swap(&mut keep, &mut fed);
        }
    }
}
