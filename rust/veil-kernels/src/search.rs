//! SEARCH: Song–Wagner–Perrig searchable encryption of the words of a text.
//!
//! This is the final scheme of Song, Wagner and Perrig, "Practical
//! techniques for searches on encrypted data" (IEEE S&P 2000, §4.4), with
//! 16-byte words split 8 + 8:
//!
//! - pre-encryption `X = CMAC-AES-128_{K_pre}(word)`, split `X = L || R`;
//! - per-word key `k = AES-128_{K_f}(L || 0^8)` (a PRF of the left half);
//! - a fresh random `S` (8 bytes) per stored word and
//!   `F_k(S) = first 8 bytes of AES-128_k(S || 0^8)`;
//! - stored word ciphertext `C = X XOR (S || F_k(S))`.
//!
//! A token for a word is `(X, k)`; the server tests a stored `C` by
//! computing `T = C XOR X` and checking `T[8..] == F_k(T[..8])`. A word that
//! is not the token's word passes with probability 2^-64. Because `S` is
//! random, stored ciphertexts reveal nothing (not even equal words across
//! rows) until a token is used; a row's length does reveal how many
//! distinct words it has. SWP's `E(W)` is a block cipher so that words
//! can be decrypted; Veil keeps the text itself under RND, so a PRF (CMAC)
//! serves and also takes words of any length.
//!
//! A row's stored value is `0x01 || C_1 || ... || C_n` over the row's
//! distinct words, sorted by ciphertext: the ciphertexts are random, so
//! sorting them shuffles the words and hides their order and multiplicity.
//!
//! Tokenisation (the one rule, also used by Python's `veil.crypto.search`):
//! a word is a maximal run of characters for which Rust's
//! `char::is_alphanumeric` holds (Unicode Alphabetic or Numeric), and each
//! character is mapped by its Unicode lowercase mapping (`char::to_lowercase`,
//! without context-dependent rules such as Greek final sigma), keeping only
//! the letters and digits of the mapping (so 'İ' becomes 'i'). Text is not
//! Unicode-normalised. Everything else (spaces, punctuation, symbols) only
//! separates words.

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::{Aes128, Block};
use cmac::{Cmac, Mac};
use rand_chacha::ChaCha20Rng;
use rand_core::{OsRng, RngCore, SeedableRng};

use crate::binary::{too_large, BinaryColumn, BinaryOutput};
use crate::KernelError;

/// Version byte that starts every stored row and every token.
pub const VERSION: u8 = 0x01;
/// Key length: 16 bytes for the pre-encryption CMAC, 16 for the key PRF.
pub const KEY_LEN: usize = 32;
/// Length of one stored word ciphertext.
pub const WORD_LEN: usize = 16;
/// Length of a serialized token: version, `X`, `k`.
pub const TOKEN_LEN: usize = 1 + 16 + 16;

type Word = [u8; WORD_LEN];

/// A SEARCH key: encrypts texts and makes tokens (client side only).
pub struct SearchKey {
    pre: Cmac<Aes128>,
    word_keys: Aes128,
}

impl SearchKey {
    /// Split a 32-byte key into the pre-encryption and word-key halves.
    pub fn new(key: &[u8]) -> Result<Self, KernelError> {
        if key.len() != KEY_LEN {
            return Err(KernelError::KeyLength {
                expected: KEY_LEN,
                got: key.len(),
            });
        }
        let pre = <Cmac<Aes128> as Mac>::new_from_slice(&key[..16])
            .expect("CMAC-AES-128 takes a 16-byte key");
        let word_keys = Aes128::new_from_slice(&key[16..]).expect("AES-128 takes a 16-byte key");
        Ok(Self { pre, word_keys })
    }

    /// The token `0x01 || X || k` for one word (lowercased here).
    ///
    /// `word` must be exactly one word under the tokenisation rule; anything
    /// else could never match and is refused.
    pub fn token(&self, word: &str) -> Result<[u8; TOKEN_LEN], KernelError> {
        let words = tokenize(word);
        if words.len() != 1 || !word.chars().all(char::is_alphanumeric) {
            return Err(KernelError::Parameter(
                "a SEARCH token is made for exactly one word (letters and digits only); \
                 split the text with tokenize() and ask for each word"
                    .into(),
            ));
        }
        let x = self.pre_encrypt(&mut self.pre.clone(), &words[0]);
        let mut token = [0u8; TOKEN_LEN];
        token[0] = VERSION;
        token[1..17].copy_from_slice(&x);
        token[17..].copy_from_slice(&self.word_key(&x));
        Ok(token)
    }

    /// Encrypt the words of every non-NULL row of a UTF-8 column.
    pub fn encrypt_column(&self, column: &BinaryColumn<'_>) -> Result<BinaryOutput, KernelError> {
        let mut rng = ChaCha20Rng::from_rng(OsRng).map_err(|err| {
            KernelError::Parameter(format!(
                "the operating system's random number generator failed ({err})"
            ))
        })?;
        let mut pre = self.pre.clone();
        let mut lowered = String::new();
        let mut xs: Vec<Word> = Vec::new();
        let mut out = RowWriter::with_estimate(column);
        for (row, value) in column.rows().enumerate() {
            if let Some(bytes) = value {
                let text = std::str::from_utf8(bytes).map_err(|_| KernelError::Domain {
                    row,
                    domain: "UTF-8 text".into(),
                })?;
                xs.clear();
                for_each_word(text, &mut lowered, |w| {
                    xs.push(self.pre_encrypt(&mut pre, w))
                });
                xs.sort_unstable();
                xs.dedup();
                self.write_row(&mut xs, &mut rng, &mut out.data);
            }
            out.end_row()?;
        }
        Ok(out.finish())
    }

    /// Replace each `X` of a row by its stored ciphertext, sort, and append.
    fn write_row(&self, xs: &mut [Word], rng: &mut ChaCha20Rng, data: &mut Vec<u8>) {
        for x in xs.iter_mut() {
            let k = Aes128::new(&self.word_key(x).into());
            let mut s = [0u8; 8];
            rng.fill_bytes(&mut s);
            let check = check_half(&k, &s);
            for i in 0..8 {
                x[i] ^= s[i];
                x[8 + i] ^= check[i];
            }
        }
        xs.sort_unstable();
        data.push(VERSION);
        for c in xs.iter() {
            data.extend_from_slice(c);
        }
    }

    /// `X = CMAC_{K_pre}(word)`; `mac` is a reusable copy of the keyed CMAC.
    fn pre_encrypt(&self, mac: &mut Cmac<Aes128>, word: &str) -> Word {
        mac.update(word.as_bytes());
        mac.finalize_reset().into_bytes().into()
    }

    /// `k = AES_{K_f}(L || 0^8)`.
    fn word_key(&self, x: &Word) -> [u8; 16] {
        let mut block = Block::default();
        block[..8].copy_from_slice(&x[..8]);
        self.word_keys.encrypt_block(&mut block);
        block.into()
    }
}

/// Which non-NULL rows of `column` hold the token's word, as an Arrow
/// bitmap (bit i set when row i matches; NULL rows get 0 and stay NULL
/// through the input's validity). Pure: needs no key, only the token.
pub fn match_column(column: &BinaryColumn<'_>, token: &[u8]) -> Result<Vec<u8>, KernelError> {
    let (x, k) = parse_token(token)?;
    let mut bits = vec![0u8; column.len().div_ceil(8)];
    for (row, value) in column.rows().enumerate() {
        let Some(stored) = value else { continue };
        if stored.first() != Some(&VERSION) || (stored.len() - 1) % WORD_LEN != 0 {
            return Err(malformed_row(row, stored));
        }
        let matched = stored[1..].chunks_exact(WORD_LEN).any(|c| {
            let mut t = [0u8; WORD_LEN];
            for i in 0..WORD_LEN {
                t[i] = c[i] ^ x[i];
            }
            let s: [u8; 8] = t[..8].try_into().expect("8 bytes");
            check_half(&k, &s) == t[8..]
        });
        if matched {
            bits[row / 8] |= 1 << (row % 8);
        }
    }
    Ok(bits)
}

/// The words of `text`, lowercased, in order, with repeats.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    for_each_word(text, &mut String::new(), |w| words.push(w.to_owned()));
    words
}

/// Call `on_word` with each word of `text`, lowercased into `buf`.
pub fn for_each_word(text: &str, buf: &mut String, mut on_word: impl FnMut(&str)) {
    buf.clear();
    for c in text.chars() {
        if c.is_alphanumeric() {
            if c.is_ascii() {
                buf.push(c.to_ascii_lowercase());
            } else {
                // Keep only the letters and digits of the mapping: 'İ' maps
                // to "i" + U+0307, and a word must stay a run of letters and
                // digits so that tokenising a word gives the word back.
                buf.extend(c.to_lowercase().filter(|l| l.is_alphanumeric()));
            }
        } else if !buf.is_empty() {
            on_word(buf);
            buf.clear();
        }
    }
    if !buf.is_empty() {
        on_word(buf);
        buf.clear();
    }
}

/// `F_k(S)`: the first 8 bytes of `AES_k(S || 0^8)`.
fn check_half(k: &Aes128, s: &[u8; 8]) -> [u8; 8] {
    let mut block = Block::default();
    block[..8].copy_from_slice(s);
    k.encrypt_block(&mut block);
    block[..8].try_into().expect("8 bytes")
}

fn parse_token(token: &[u8]) -> Result<(Word, Aes128), KernelError> {
    if token.len() != TOKEN_LEN || token[0] != VERSION {
        return Err(KernelError::Parameter(format!(
            "not a SEARCH token of version 0x{VERSION:02x} ({TOKEN_LEN} bytes); \
             make tokens with Search.token()"
        )));
    }
    let x: Word = token[1..17].try_into().expect("16 bytes");
    let k = Aes128::new_from_slice(&token[17..]).expect("16-byte key");
    Ok((x, k))
}

fn malformed_row(row: usize, stored: &[u8]) -> KernelError {
    let reason = match stored.first() {
        None => "it is empty".to_string(),
        Some(&VERSION) => format!(
            "its {} bytes after the version are not a whole number of {WORD_LEN}-byte words",
            stored.len() - 1
        ),
        Some(&other) => format!(
            "version byte 0x{other:02x} is not a SEARCH version this Veil reads (0x{VERSION:02x})"
        ),
    };
    KernelError::Malformed { row, reason }
}

/// Appends rows of unknown length to one data buffer sized by an estimate.
struct RowWriter {
    offsets: Vec<i32>,
    data: Vec<u8>,
}

impl RowWriter {
    /// Guess one distinct word per 6 bytes of text (English averages about
    /// one per 6), so the buffer rarely has to grow.
    fn with_estimate(column: &BinaryColumn<'_>) -> Self {
        let text_bytes: usize = column.rows().flatten().map(<[u8]>::len).sum();
        let mut offsets = Vec::with_capacity(column.len() + 1);
        offsets.push(0);
        Self {
            offsets,
            data: Vec::with_capacity(column.len() + text_bytes / 6 * WORD_LEN),
        }
    }

    fn end_row(&mut self) -> Result<(), KernelError> {
        let end = i32::try_from(self.data.len()).map_err(|_| too_large())?;
        self.offsets.push(end);
        Ok(())
    }

    fn finish(self) -> BinaryOutput {
        BinaryOutput {
            offsets: self.offsets,
            data: self.data,
        }
    }
}

#[cfg(test)]
mod tests;
