//! AES-SIV (RFC 5297) with no associated data, the per-key work done once.
//!
//! The `aes-siv` crate expands the CTR key and recomputes `CMAC(<zero>)` for
//! every message; for a column of short strings that is a third of the work.
//! Here both AES keys, the CMAC subkeys and the S2V starting value are fixed
//! at construction, so a message costs its CMAC chain and its CTR blocks.
//! The batch DET path uses this; the tests check it against the crate.

use subtle::ConstantTimeEq;
use zeroize::Zeroize;

use crate::ecb::AnyAes;
use crate::KernelError;

const BLOCK: usize = 16;
/// Keystream blocks encrypted per AES call (the `aes` crate pipelines 8).
const CTR_BATCH: usize = 8;

/// Doubling in GF(2^128) as RFC 5297 (and CMAC) define it.
fn dbl(x: u128) -> u128 {
    (x << 1) ^ if x >> 127 == 1 { 0x87 } else { 0 }
}

fn load(bytes: &[u8]) -> u128 {
    u128::from_be_bytes(bytes.try_into().expect("a 16-byte block"))
}

pub(super) struct SivNoAd {
    mac: AnyAes,
    ctr: AnyAes,
    /// CMAC subkeys for a complete and a padded last block.
    k1: u128,
    k2: u128,
    /// S2V's starting value, `CMAC(<zero>)`.
    zero_mac: u128,
}

impl SivNoAd {
    /// `key` is 32 or 64 bytes: the first half keys S2V, the second CTR.
    pub(super) fn new(key: &[u8]) -> Result<Self, KernelError> {
        if key.len() != 32 && key.len() != 64 {
            return Err(KernelError::Parameter(format!(
                "an AES-SIV key is 32 or 64 bytes, got {}",
                key.len()
            )));
        }
        let (mac_key, ctr_key) = key.split_at(key.len() / 2);
        let mac = AnyAes::new(mac_key)?;
        let k1 = dbl(mac.encrypt_u128(0));
        let zero_mac = mac.encrypt_u128(k1);
        Ok(Self {
            ctr: AnyAes::new(ctr_key)?,
            k2: dbl(k1),
            k1,
            zero_mac,
            mac,
        })
    }

    /// The synthetic IV of `message`: S2V with no header components.
    pub(super) fn s2v(&self, message: &[u8]) -> u128 {
        let n = message.len();
        if n < BLOCK {
            // T = dbl(D) xor pad(M), one complete block.
            let mut padded = [0u8; BLOCK];
            padded[..n].copy_from_slice(message);
            padded[n] = 0x80;
            return self
                .mac
                .encrypt_u128(dbl(self.zero_mac) ^ load(&padded) ^ self.k1);
        }
        // T = M xorend D. Only the last 16 bytes of T differ from M, and they
        // lie in T's last one or two CMAC blocks: copy those out and fold D in.
        let blocks = n.div_ceil(BLOCK);
        let tail_start = (n - BLOCK) / BLOCK * BLOCK;
        let mut state = 0u128;
        for block in message[..tail_start].chunks_exact(BLOCK) {
            state = self.mac.encrypt_u128(state ^ load(block));
        }
        let mut tail = [0u8; 2 * BLOCK];
        let tail_len = n - tail_start;
        tail[..tail_len].copy_from_slice(&message[tail_start..]);
        let xor_at = tail_len - BLOCK;
        let mixed = load(&tail[xor_at..xor_at + BLOCK]) ^ self.zero_mac;
        tail[xor_at..xor_at + BLOCK].copy_from_slice(&mixed.to_be_bytes());
        let tail_blocks = blocks - tail_start / BLOCK;
        if tail_blocks == 2 {
            state = self.mac.encrypt_u128(state ^ load(&tail[..BLOCK]));
        }
        let last = &mut tail[(tail_blocks - 1) * BLOCK..];
        let last_len = tail_len - (tail_blocks - 1) * BLOCK;
        let subkey = if last_len == BLOCK {
            self.k1
        } else {
            last[last_len] = 0x80;
            self.k2
        };
        self.mac.encrypt_u128(state ^ load(&last[..BLOCK]) ^ subkey)
    }

    /// XORs AES-CTR keystream for `siv` into `data` (encrypts or decrypts).
    pub(super) fn ctr(&self, siv: u128, data: &mut [u8]) {
        // RFC 5297 2.6: clear the top bit of each of the last two 32-bit words.
        let start = siv & !((1u128 << 63) | (1u128 << 31));
        let mut keystream = [aes::Block::default(); CTR_BATCH];
        let mut counter = start;
        for chunk in data.chunks_mut(CTR_BATCH * BLOCK) {
            let blocks = &mut keystream[..chunk.len().div_ceil(BLOCK)];
            for block in blocks.iter_mut() {
                *block = counter.to_be_bytes().into();
                counter = counter.wrapping_add(1);
            }
            self.ctr.encrypt_blocks(blocks);
            for (byte, key) in chunk.iter_mut().zip(blocks.iter().flatten()) {
                *byte ^= key;
            }
        }
    }

    /// Encrypts `message` in place and writes its SIV to `siv_out`.
    pub(super) fn seal(&self, siv_out: &mut [u8], message: &mut [u8]) {
        let siv = self.s2v(message);
        siv_out.copy_from_slice(&siv.to_be_bytes());
        self.ctr(siv, message);
    }

    /// Decrypts `body` in place; `false` (and `body` zeroed) when the SIV
    /// does not authenticate it.
    pub(super) fn open(&self, siv: &[u8], body: &mut [u8]) -> bool {
        let expected = load(siv);
        self.ctr(expected, body);
        let actual = self.s2v(body);
        let ok: bool = actual.to_be_bytes().ct_eq(&expected.to_be_bytes()).into();
        if !ok {
            body.fill(0); // never hand out an unauthenticated plaintext
        }
        ok
    }
}

impl Drop for SivNoAd {
    fn drop(&mut self) {
        // The AES key schedules zeroize themselves (`aes` feature "zeroize").
        self.k1.zeroize();
        self.k2.zeroize();
        self.zero_mac.zeroize();
    }
}
