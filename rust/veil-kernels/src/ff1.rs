//! FF1 format-preserving encryption (NIST SP 800-38G, section 5.1).
//!
//! Two faces of one function:
//! - [`Ff1`]: numeral strings of any radix up to 2^16, for the published
//!   known-answer samples and for anything that is not a binary integer.
//! - [`Ff1Binary`]: radix 2 over `bits`-bit integers (20..=64), the DET
//!   scheme for integer columns, built for whole columns at a time.
//!
//! Both restrict the Feistel halves to at most 96 bits (`b <= 12` bytes in the
//! standard's notation), so each round's PRF output needs one AES block
//! (`d <= 16`) and all arithmetic fits in `u128`. That covers every sample
//! NIST publishes and every integer width Veil stores.
//!
//! Speed: the PRF is a CBC-MAC over `P || Q`. `P` and every block of `Q` but
//! the last depend only on the key, length and tweak, so their CBC-MAC state
//! is computed once ([`RoundInputs`]); each round then costs one AES call,
//! and [`Ff1Binary`] runs a whole batch of values through each round together
//! so the `aes` crate can pipeline the blocks (AES-NI is detected at run time).

use crate::ecb::AnyAes;
use crate::KernelError;

#[path = "ff1_binary.rs"]
mod binary;
pub use binary::{Ff1Binary, Lane};

const ROUNDS: usize = 10;
/// Longest Feistel half in bytes that keeps `d <= 16` (one AES block).
const MAX_HALF_BYTES: usize = 12;

/// The lengths SP 800-38G derives from the radix and the string length.
#[derive(Clone, Copy, Debug)]
struct Layout {
    radix: u32,
    n: usize,
    u: usize,
    v: usize,
    /// Bytes that hold a numeral of the longer half (`b` in the standard).
    b: usize,
    /// Bytes of PRF output used per round (`d` in the standard).
    d: usize,
}

impl Layout {
    fn new(radix: u32, n: usize) -> Result<Self, KernelError> {
        if !(2..=1 << 16).contains(&radix) {
            return Err(KernelError::Parameter(format!(
                "FF1 radix must be in 2..=65536, got {radix}"
            )));
        }
        let (u, v) = (n / 2, n - n / 2);
        // NIST requires radix^minlen >= 1,000,000 so the domain is not tiny.
        if n < 2 || checked_pow(radix, n).is_some_and(|size| size < 1_000_000) {
            return Err(KernelError::Parameter(format!(
                "FF1 needs a domain of at least 1,000,000 values; radix {radix} with {n} numerals is too small"
            )));
        }
        let b = match checked_pow(radix, v) {
            // ceil(v * log2(radix)) bits is the bit length of radix^v - 1.
            Some(size) => (128 - (size - 1).leading_zeros() as usize).div_ceil(8),
            None => usize::MAX,
        };
        if b > MAX_HALF_BYTES {
            return Err(KernelError::Parameter(format!(
                "FF1 strings of {n} numerals in radix {radix} are too long (at most 192 bits here)"
            )));
        }
        let d = 4 * b.div_ceil(4) + 4;
        Ok(Self {
            radix,
            n,
            u,
            v,
            b,
            d,
        })
    }

    /// Length of the half that round `i` replaces (`m` in the standard).
    fn m(&self, round: usize) -> usize {
        if round.is_multiple_of(2) {
            self.u
        } else {
            self.v
        }
    }
}

fn checked_pow(radix: u32, exp: usize) -> Option<u128> {
    u128::from(radix).checked_pow(u32::try_from(exp).ok()?)
}

/// The per-round AES inputs minus the varying half: the CBC-MAC state after
/// `P` and the constant blocks of `Q`, folded with the constant bytes of
/// `Q`'s last block and the round number.
struct RoundInputs {
    base: [u128; ROUNDS],
}

impl RoundInputs {
    fn new(aes: &AnyAes, layout: &Layout, tweak: &[u8]) -> Result<Self, KernelError> {
        let t = u32::try_from(tweak.len())
            .map_err(|_| KernelError::Parameter("FF1 tweak is longer than 2^32 bytes".into()))?;
        let n = u32::try_from(layout.n)
            .map_err(|_| KernelError::Parameter("FF1 input is longer than 2^32 numerals".into()))?;
        let mut p = [
            1u8,
            2,
            1,
            0,
            0,
            0,
            10,
            (layout.u % 256) as u8,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ];
        p[3..6].copy_from_slice(&layout.radix.to_be_bytes()[1..]);
        p[8..12].copy_from_slice(&n.to_be_bytes());
        p[12..16].copy_from_slice(&t.to_be_bytes());
        let mut state = aes.encrypt_u128(u128::from_be_bytes(p));

        // Q = T || 0^pad || [i] || [NUM(B)]^b, a whole number of blocks.
        let pad = (16 - (tweak.len() + layout.b + 1) % 16) % 16;
        let mut q = tweak.to_vec();
        q.resize(tweak.len() + pad + 1 + layout.b, 0);
        let (constant, last) = q.split_at(q.len() - 16);
        for block in constant.chunks_exact(16) {
            state = aes.encrypt_u128(state ^ u128::from_be_bytes(block.try_into().unwrap()));
        }
        let folded = state ^ u128::from_be_bytes(last.try_into().unwrap());
        let round_shift = 8 * layout.b;
        let base = core::array::from_fn(|i| folded ^ ((i as u128) << round_shift));
        Ok(Self { base })
    }

    /// The AES input whose output's first `d` bytes are round `i`'s `y`.
    #[inline]
    fn block(&self, round: usize, half: u128) -> u128 {
        self.base[round] ^ half
    }
}

/// FF1 over numeral strings of radix up to 2^16.
pub struct Ff1 {
    aes: AnyAes,
}

impl Ff1 {
    /// `key` is an AES key of 16, 24 or 32 bytes.
    pub fn new(key: &[u8]) -> Result<Self, KernelError> {
        Ok(Self {
            aes: AnyAes::new(key)?,
        })
    }

    pub fn encrypt(&self, radix: u32, tweak: &[u8], x: &[u16]) -> Result<Vec<u16>, KernelError> {
        self.feistel(radix, tweak, x, true)
    }

    pub fn decrypt(&self, radix: u32, tweak: &[u8], x: &[u16]) -> Result<Vec<u16>, KernelError> {
        self.feistel(radix, tweak, x, false)
    }

    fn feistel(
        &self,
        radix: u32,
        tweak: &[u8],
        x: &[u16],
        encrypt: bool,
    ) -> Result<Vec<u16>, KernelError> {
        let layout = Layout::new(radix, x.len())?;
        if let Some(pos) = x.iter().position(|&digit| u32::from(digit) >= radix) {
            return Err(KernelError::Domain {
                row: 0,
                domain: format!("numerals 0..{radix} (numeral {pos} is {})", x[pos]),
            });
        }
        let inputs = RoundInputs::new(&self.aes, &layout, tweak)?;
        let mut a = num(radix, &x[..layout.u]);
        let mut b = num(radix, &x[layout.u..]);
        for step in 0..ROUNDS {
            let round = if encrypt { step } else { ROUNDS - 1 - step };
            let modulus = checked_pow(radix, layout.m(round)).expect("Layout bounds the halves");
            let fed = if encrypt { b } else { a };
            let r = self.aes.encrypt_u128(inputs.block(round, fed));
            let y = (r >> (128 - 8 * layout.d)) % modulus;
            if encrypt {
                let c = (a + y) % modulus;
                (a, b) = (b, c);
            } else {
                let c = (b + modulus - y) % modulus;
                (a, b) = (c, a);
            }
        }
        let mut out = numerals(radix, a, layout.u);
        out.extend(numerals(radix, b, layout.v));
        Ok(out)
    }
}

/// NUM_radix: the number a numeral string denotes, most significant first.
fn num(radix: u32, x: &[u16]) -> u128 {
    x.iter()
        .fold(0, |acc, &digit| acc * u128::from(radix) + u128::from(digit))
}

/// STR^m_radix: `value` as exactly `m` numerals, most significant first.
fn numerals(radix: u32, mut value: u128, m: usize) -> Vec<u16> {
    let mut out = vec![0u16; m];
    for digit in out.iter_mut().rev() {
        *digit = (value % u128::from(radix)) as u16;
        value /= u128::from(radix);
    }
    out
}

#[cfg(test)]
#[path = "ff1_tests.rs"]
mod tests;
